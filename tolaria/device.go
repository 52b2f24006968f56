package tolaria

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/esper-go/esper/kernels"
	"github.com/esper-go/esper/tensor"
)

// ErrDeviceSyntax is wrapped by ParseDevice's errors for a malformed
// device string ("cuda0", "cuda:", "cuda:-1"), the G2 ValueError.
var ErrDeviceSyntax = errors.New("malformed device string")

// ErrDeviceUnsupported is wrapped by ParseDevice's errors for a device
// type the Go port does not train on (meta, xla, xpu, hpu,
// privateuseone, mps).
var ErrDeviceUnsupported = errors.New("unsupported device type")

// ErrDeviceUnavailable is wrapped by ParseDevice's errors for a
// well-formed CUDA device this process cannot use: no CUDA backend in the
// build, or an index past the device count (the G2 RuntimeError).
var ErrDeviceUnavailable = errors.New("device unavailable")

// unsupportedDevices are the PyTorch device types G2 rejects outright
// (esper-reference §3.2 "Device validation"), with why.
var unsupportedDevices = map[string]string{
	"meta":          "meta tensors hold no data and cannot train",
	"xla":           "XLA devices are not supported",
	"xpu":           "Intel XPU devices are not supported",
	"hpu":           "Habana HPU devices are not supported",
	"privateuseone": "privateuseone backends are not supported",
	"mps":           "Apple MPS is not supported in the Go port (use cpu)",
}

// deviceCounter is implemented by a backend that serves more than one
// device of its kind (the CUDA backend, one per GPU).
type deviceCounter interface {
	DeviceCount() int
}

// ParseDevice validates a device string the way G2 Tolaria does and
// returns the device: "cpu" (or "cpu:0"), "sim" (sim:0) and "sim:N" (the
// strict simulated accelerators, tensor.Sim), "cuda" (device 0) and
// "cuda:N" parse. A malformed string ("cuda0", "cuda:", "cuda:x", " cpu") wraps
// ErrDeviceSyntax; meta, xla, xpu, hpu, privateuseone and mps (any index)
// wrap ErrDeviceUnsupported; a CUDA device when the build has no CUDA
// backend (build with -tags cuda on a GPU machine) or an index at or past
// the device count wraps ErrDeviceUnavailable.
//
// The device count comes from the registered CUDA backend when it
// reports one (a DeviceCount() int method); otherwise only the backend's
// own device is available.
func ParseDevice(s string) (tensor.Device, error) {
	return parseDevice(s, cudaDeviceCount)
}

// cudaDeviceCount asks the kernels registry how many CUDA devices exist.
func cudaDeviceCount() (int, error) {
	b, err := kernels.Lookup(tensor.CUDA(0))
	if err != nil {
		return 0, err
	}
	if c, ok := b.(deviceCounter); ok {
		return c.DeviceCount(), nil
	}
	return b.Device().Index + 1, nil
}

// parseDevice is ParseDevice with the CUDA device count injected, so the
// availability rules can be tested without a GPU.
func parseDevice(s string, cudaCount func() (int, error)) (tensor.Device, error) {
	typ, idxStr, hasIdx := strings.Cut(s, ":")
	if typ == "" || strings.IndexFunc(typ, func(r rune) bool { return !(r >= 'a' && r <= 'z') }) >= 0 {
		return tensor.Device{}, fmt.Errorf("tolaria: device %q: %w: want cpu, sim, sim:N, cuda or cuda:N", s, ErrDeviceSyntax)
	}
	idx := 0
	if hasIdx {
		if idxStr == "" || strings.IndexFunc(idxStr, func(r rune) bool { return r < '0' || r > '9' }) >= 0 {
			return tensor.Device{}, fmt.Errorf("tolaria: device %q: %w: the index after ':' must be a non-negative integer", s, ErrDeviceSyntax)
		}
		n, err := strconv.Atoi(idxStr)
		if err != nil {
			return tensor.Device{}, fmt.Errorf("tolaria: device %q: %w: index out of range", s, ErrDeviceSyntax)
		}
		idx = n
	}
	if why, ok := unsupportedDevices[typ]; ok {
		return tensor.Device{}, fmt.Errorf("tolaria: device %q: %w: %s", s, ErrDeviceUnsupported, why)
	}
	switch typ {
	case "cpu":
		if idx != 0 {
			return tensor.Device{}, fmt.Errorf("tolaria: device %q: %w: there is one cpu device (cpu or cpu:0)", s, ErrDeviceUnavailable)
		}
		return tensor.CPU, nil
	case "sim":
		return tensor.Sim(idx), nil
	case "cuda":
		n, err := cudaCount()
		if err != nil {
			return tensor.Device{}, fmt.Errorf("tolaria: device %q: %w: this build has no CUDA backend; build with -tags cuda and run on a GPU machine (%v)", s, ErrDeviceUnavailable, err)
		}
		if n <= 0 {
			return tensor.Device{}, fmt.Errorf("tolaria: device %q: %w: no CUDA device is present", s, ErrDeviceUnavailable)
		}
		if idx >= n {
			return tensor.Device{}, fmt.Errorf("tolaria: device %q: %w: CUDA index %d out of range (%d device(s): cuda:0..cuda:%d)", s, ErrDeviceUnavailable, idx, n, n-1)
		}
		return tensor.CUDA(idx), nil
	}
	return tensor.Device{}, fmt.Errorf("tolaria: device %q: %w: unknown device type %q (want cpu, sim, sim:N, cuda or cuda:N)", s, ErrDeviceSyntax, typ)
}
