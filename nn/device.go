package nn

import (
	"fmt"

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
