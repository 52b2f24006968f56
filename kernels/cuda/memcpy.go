//go:build cuda

package cuda

import (
	"fmt"

	"gorgonia.org/cu"

	"github.com/esper-go/esper/tensor"
)

// Byte copies through the driver's copy engines, for the paths that move
// whole buffers: host to device from ordinary (pageable) Go memory, the
// reference the Stager's pinned copies are measured against (PERF.md W8),
// and device to device, the bandwidth bound of memory-bound kernels such
// as the optimizer steps (W7).

// CopyHostToDevice copies src into dst, a contiguous device tensor of
// exactly len(src) bytes, after the work already enqueued on the stream,
// and waits for the copy: src is pageable memory, which the driver stages
// through a bounce buffer of its own, so the copy cannot overlap the host
// (the Stager's pinned buffers are the asynchronous way). It may not be
// called during a capture.
func (d *Device) CopyHostToDevice(dst *tensor.Tensor, src []byte) error {
	const op = "CopyHostToDevice"
	pd, err := d.ptrOf(op, "dst", dst, dst.DType())
	if err != nil {
		return err
	}
	if dst.Nbytes() != len(src) {
		return fmt.Errorf("cuda: %s: %d bytes into dst %v %v (%d bytes)", op, len(src), dst.DType(), dst.Shape(), dst.Nbytes())
	}
	if len(src) == 0 {
		return nil
	}
	if d.Capturing() {
		return fmt.Errorf("cuda: %s during a graph capture (a synchronous copy would invalidate it)", op)
	}
	release := d.enter()
	defer release()
	if err := d.upload(pd, src); err != nil {
		return fmt.Errorf("cuda: %s: %w", op, err)
	}
	return nil
}

// CopyDeviceToDevice enqueues a copy of src into dst on the stream with
// the driver's device-to-device memcpy (what PyTorch's copy_ does for
// contiguous tensors of one dtype): both contiguous, on this device, of
// one dtype and element count, not overlapping. It does not wait.
func (d *Device) CopyDeviceToDevice(dst, src *tensor.Tensor) error {
	const op = "CopyDeviceToDevice"
	pd, err := d.ptrOf(op, "dst", dst, dst.DType())
	if err != nil {
		return err
	}
	ps, err := d.ptrOf(op, "src", src, dst.DType())
	if err != nil {
		return err
	}
	if dst.Numel() != src.Numel() {
		return fmt.Errorf("cuda: %s: dst %v and src %v have different element counts", op, dst.Shape(), src.Shape())
	}
	n := int64(dst.Nbytes())
	if n == 0 {
		return nil
	}
	if pd < ps+cu.DevicePtr(n) && ps < pd+cu.DevicePtr(n) {
		return fmt.Errorf("cuda: %s: dst and src overlap", op)
	}
	release := d.enter()
	defer release()
	if err := cu.MemcpyDtoDAsync(pd, ps, n, d.stream); err != nil {
		return fmt.Errorf("cuda: %s: %w", op, err)
	}
	return nil
}

// copyDevice copies src into dst (same element count and dtype, both
// contiguous on the device) on the stream.
func (d *Device) copyDevice(dst, src *tensor.Tensor) error {
	if dst.Numel() != src.Numel() {
		return fmt.Errorf("cuda: copy of %d values into %d", src.Numel(), dst.Numel())
	}
	pd, err := d.ptrOf("copy", "dst", dst, src.DType())
	if err != nil {
		return err
	}
	ps, err := d.ptrOf("copy", "src", src, src.DType())
	if err != nil {
		return err
	}
	release := d.enter()
	defer release()
	return cu.MemcpyDtoDAsync(pd, ps, int64(src.Nbytes()), d.stream)
}
