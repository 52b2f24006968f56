package tolaria

import "github.com/esper-go/esper/tensor"

// The G2 device validation (esper-reference §3.2 "Device validation") is
// tensor.ParseDevice's: one parser of device names for the engine. These
// names keep tolaria's API; the errors are tensor's.
var (
	// ErrDeviceSyntax is wrapped by ParseDevice's errors for a malformed
	// device string ("cuda0", "cuda:", "cuda:-1"), the G2 ValueError
	// (tensor.ErrDeviceSyntax).
	ErrDeviceSyntax = tensor.ErrDeviceSyntax
	// ErrDeviceUnsupported is wrapped by ParseDevice's errors for a
	// device type the Go port does not train on (meta, xla, xpu, hpu,
	// privateuseone, mps), with the reason (tensor.ErrDeviceUnsupported).
	ErrDeviceUnsupported = tensor.ErrDeviceUnsupported
	// ErrDeviceUnavailable is wrapped by the errors of a well-formed
	// device this process cannot use, the G2 RuntimeError
	// (tensor.ErrDeviceUnavailable): cpu:N for N > 0 from ParseDevice;
	// a CUDA device in a build without CUDA, or an index past the device
	// count, from kernels/device.Open and OpenDevice, which open the
	// device.
	ErrDeviceUnavailable = tensor.ErrDeviceUnavailable
)

// ParseDevice validates a device string the way G2 Tolaria does: it is
// tensor.ParseDevice ("cpu", "cpu:0", "sim", "sim:N", "cuda", "cuda:N";
// errors wrapping ErrDeviceSyntax, ErrDeviceUnsupported or, for cpu:N,
// ErrDeviceUnavailable). Whether a CUDA device exists in this build and
// on this machine is kernels/device's question: open the device with
// kernels/device.Open (or OpenDevice), as esper train does, before moving
// a model there.
//
// Deprecated: call tensor.ParseDevice, or kernels/device.Parse beside
// kernels/device.Open.
func ParseDevice(s string) (tensor.Device, error) { return tensor.ParseDevice(s) }
