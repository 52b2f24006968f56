package nn

import (
	"fmt"
	"slices"

	"github.com/esper-go/esper/kernels"
	"github.com/esper-go/esper/tensor"
)

// To moves m's parameters, buffers and device states (DeviceStater, such
// as dropout's random state) to dev in place (the module, its
// autograd variables and its buffer fields stay the same objects) and
// drops the parameters' gradients, which belong to the old device. Build
// optimizers after moving: an optimizer's arena turns parameters into
// views of its flat buffer, and To refuses to move views. Every tensor is
// checked first, so an error leaves m unchanged. Copying from a device to
// the host counts as a host sync of that device (tensor.HostSyncs).
func To(m Module, dev tensor.Device) error {
	if isNilModule(m) {
		return fmt.Errorf("nn: To %v: nil module", dev)
	}
	es := entries(m)
	for i, t := range deviceStates(m) {
		es = append(es, entry{fmt.Sprintf("device state %d", i), t})
	}
	for _, e := range es {
		if e.t == nil {
			return fmt.Errorf("nn: To %v: %s has no tensor", dev, e.name)
		}
		if e.t.Device() != dev && !e.t.OwnsStorage() {
			return fmt.Errorf("nn: To %v: %s is a view of another tensor (an optimizer's arena?): move the module before building its optimizer", dev, e.name)
		}
	}
	for _, e := range es {
		if err := e.t.Relocate(dev); err != nil {
			return fmt.Errorf("nn: To %v: %s: %w", dev, e.name, err)
		}
	}
	for _, p := range m.Parameters() {
		p.Grad = nil
	}
	return nil
}

// Device returns the device of m's parameters and buffers, or an error
// when they are spread over several (or m has none: then the CPU).
func Device(m Module) (tensor.Device, error) {
	var dev tensor.Device
	for i, e := range entries(m) {
		switch d := e.t.Device(); {
		case i == 0:
			dev = d
		case d != dev:
			return dev, fmt.Errorf("nn: the module's tensors are on %v and %v (%s)", dev, d, e.name)
		}
	}
	return dev, nil
}

// DeviceStater is implemented by a module that keeps tensors outside its
// state dict which must live on its device, such as Dropout's random
// state: To moves them with the parameters.
type DeviceStater interface {
	DeviceState() []*tensor.Tensor
}

// deviceStates returns the device states of m and of its children (a
// Composite's, recursively).
func deviceStates(m Module) []*tensor.Tensor {
	var out []*tensor.Tensor
	if ds, ok := m.(DeviceStater); ok {
		out = append(out, ds.DeviceState()...)
	}
	if c, ok := m.(interface{ Children() []Child }); ok {
		for _, ch := range c.Children() {
			out = append(out, deviceStates(ch.Module)...)
		}
	}
	return out
}

// HostStateDict returns m's parameters and buffers by state-dict name,
// readable on the host, for writing (not copies to modify): CPU tensors
// are m's own, a device's are brought over with HostCopies (one host
// sync per device and dtype).
func HostStateDict(m Module) (map[string]*tensor.Tensor, error) {
	if isNilModule(m) {
		return nil, fmt.Errorf("nn: HostStateDict: nil module")
	}
	es := entries(m)
	ts := make([]*tensor.Tensor, len(es))
	for i, e := range es {
		ts[i] = e.t
	}
	host, err := HostCopies(ts)
	if err != nil {
		return nil, err
	}
	sd := make(map[string]*tensor.Tensor, len(es))
	for i, e := range es {
		sd[e.name] = host[i]
	}
	return sd, nil
}

// HostCopies returns ts readable on the host, in order (nil entries stay
// nil): CPU tensors as they are (callers only read them), and the tensors
// of a device gathered into one flat buffer per dtype there with the
// backend's Copy, the buffers brought over together (tensor.ToHostMany)
// — one host sync per device for the lot instead of one per tensor. A
// device without a registered backend (nothing to gather with) gets one
// copy per tensor.
func HostCopies(ts []*tensor.Tensor) ([]*tensor.Tensor, error) {
	out := make([]*tensor.Tensor, len(ts))
	type group struct {
		dev tensor.Device
		dt  tensor.DType
	}
	var order []group
	members := map[group][]int{}
	for i, t := range ts {
		switch {
		case t == nil:
		case t.Device().IsCPU():
			out[i] = t
		default:
			g := group{t.Device(), t.DType()}
			if _, ok := members[g]; !ok {
				order = append(order, g)
			}
			members[g] = append(members[g], i)
		}
	}
	// Each group gathered into a flat buffer; the flats of a device read
	// together.
	flats := make([]*tensor.Tensor, len(order))
	var devs []tensor.Device
	for k, g := range order {
		idx := members[g]
		total := 0
		for _, i := range idx {
			total += ts[i].Numel()
		}
		be, err := kernels.Lookup(g.dev)
		if total == 0 || err != nil {
			// Nothing to gather, or no backend to gather with: one copy
			// per tensor.
			for _, i := range idx {
				if out[i], err = ts[i].Contiguous().ToDevice(tensor.CPU); err != nil {
					return nil, fmt.Errorf("nn: HostCopies: %w", err)
				}
			}
			continue
		}
		flat, err := tensor.EmptyOn(g.dev, g.dt, total)
		if err != nil {
			return nil, fmt.Errorf("nn: HostCopies: %w", err)
		}
		off := 0
		for _, i := range idx {
			n := ts[i].Numel()
			if n > 0 {
				be.Copy(flat.Narrow(0, off, n), ts[i])
			}
			off += n
		}
		flats[k] = flat
		if !slices.Contains(devs, g.dev) {
			devs = append(devs, g.dev)
		}
	}
	for _, d := range devs {
		var on []*tensor.Tensor
		var at []int
		for k, g := range order {
			if flats[k] != nil && g.dev == d {
				on, at = append(on, flats[k]), append(at, k)
			}
		}
		hosts, err := tensor.ToHostMany(on)
		if err != nil {
			return nil, fmt.Errorf("nn: HostCopies: %w", err)
		}
		for j, k := range at {
			off := 0
			for _, i := range members[order[k]] {
				n := ts[i].Numel()
				out[i] = hosts[j].Narrow(0, off, n).Reshape(ts[i].Shape()...)
				off += n
			}
		}
	}
	return out, nil
}
