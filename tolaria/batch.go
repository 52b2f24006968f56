package tolaria

import (
	"fmt"

	"github.com/esper-go/esper/tensor"
)

// checkBatch checks one (x, y) pair a Batches source yielded before any
// kernel sees it: both tensors present, labels an integer vector [B]
// with B ≥ 1, and as many images as labels. kind is "training" or
// "validation" and i the batch's 1-based position in the epoch, so that
// the error says which batch of which pass was wrong (a nil tensor or an
// empty batch otherwise surfaces as a nil dereference or an integer
// division by zero deep inside a kernel).
func checkBatch(kind string, i int, x, y *tensor.Tensor) error {
	switch {
	case x == nil && y == nil:
		return fmt.Errorf("%s batch %d: nil images and labels", kind, i)
	case x == nil:
		return fmt.Errorf("%s batch %d: nil images", kind, i)
	case y == nil:
		return fmt.Errorf("%s batch %d: nil labels", kind, i)
	case y.Rank() != 1:
		return fmt.Errorf("%s batch %d: labels of shape %v (want [B], one class index per image)", kind, i, y.Shape())
	case !y.DType().IsInt():
		return fmt.Errorf("%s batch %d: labels of dtype %v (want i64 or i32 class indices)", kind, i, y.DType())
	case x.Rank() == 0:
		return fmt.Errorf("%s batch %d: images are a scalar (want [B, ...])", kind, i)
	case x.Dim(0) == 0 || y.Dim(0) == 0:
		return fmt.Errorf("%s batch %d has no rows (images %v, labels %v)", kind, i, x.Shape(), y.Shape())
	case x.Dim(0) != y.Dim(0):
		return fmt.Errorf("%s batch %d: %d images but %d labels", kind, i, x.Dim(0), y.Dim(0))
	}
	return nil
}

// toDevice returns the batch (x, y) on dev: as it is when it already
// lives there, else explicit host-to-device copies (a Batches source such
// as data.Loader yields CPU tensors; the trainer moves them to the
// model's device). Copies towards a device are not host syncs.
func toDevice(dev tensor.Device, x, y *tensor.Tensor) (*tensor.Tensor, *tensor.Tensor, error) {
	var err error
	if x.Device() != dev {
		if x, err = x.ToDevice(dev); err != nil {
			return nil, nil, fmt.Errorf("images to %v: %w", dev, err)
		}
	}
	if y.Device() != dev {
		if y, err = y.ToDevice(dev); err != nil {
			return nil, nil, fmt.Errorf("labels to %v: %w", dev, err)
		}
	}
	return x, y, nil
}

// hostCopy returns t readable on the host: t itself on the CPU, else one
// explicit device-to-host copy (one host sync of t's device).
func hostCopy(t *tensor.Tensor) (*tensor.Tensor, error) {
	if t.Device().IsCPU() {
		return t, nil
	}
	return t.ToDevice(tensor.CPU)
}
