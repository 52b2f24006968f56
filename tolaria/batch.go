package tolaria

import (
	"fmt"
	"reflect"
	"time"

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

// input returns the batch (x, y) on the model's device: as it is when it
// lives there already (always on the cpu with CPU batches, and from an
// InputSource on the device), else copied there by toDevice, the copies'
// wall time added to the trainer's copy time.
func (t *Trainer) input(x, y *tensor.Tensor) (*tensor.Tensor, *tensor.Tensor, error) {
	if x.Device() == t.dev && y.Device() == t.dev {
		return x, y, nil
	}
	t0 := time.Now()
	x, y, err := toDevice(t.dev, x, y)
	t.copyTime += time.Since(t0)
	return x, y, err
}

// inputCopyTime is the time spent on host-to-device copies of batches
// so far: the trainer's own and its InputSource sources'.
func (t *Trainer) inputCopyTime() time.Duration {
	d := t.copyTime
	for _, s := range t.sources {
		d += s.CopyTime()
	}
	return d
}

// pinnedInput reports whether the training batches come through pinned
// staging (tolaria.train.pin_memory).
func (t *Trainer) pinnedInput() bool {
	s, ok := t.o.Train.(InputSource)
	return ok && s.Pinned()
}

// inputSources returns the distinct InputSource sources among train and
// val, checking that each delivers on the CPU or on dev.
func inputSources(dev tensor.Device, train, val Batches) ([]InputSource, error) {
	var out []InputSource
	for i, b := range []Batches{train, val} {
		s, ok := b.(InputSource)
		if !ok {
			continue
		}
		name := [...]string{"Train", "Val"}[i]
		if d := s.Device(); !d.IsCPU() && d != dev {
			return nil, fmt.Errorf("%w: %s delivers its batches on %v, and the model is on %v", ErrOptions, name, d, dev)
		}
		if !containsSource(out, s) {
			out = append(out, s)
		}
	}
	return out, nil
}

// containsSource reports whether s is in out (a source given as
// both Train and Val counts once); values of a type that cannot be
// compared are taken as distinct.
func containsSource(out []InputSource, s InputSource) bool {
	if !reflect.TypeOf(s).Comparable() {
		return false
	}
	for _, o := range out {
		if reflect.TypeOf(o) == reflect.TypeOf(s) && o == s {
			return true
		}
	}
	return false
}

// toDevice returns the batch (x, y) on dev: as it is when it already
// lives there, else explicit host-to-device copies (a Batches source such
// as a data.Loader on the CPU yields CPU tensors; the trainer moves them
// to the model's device). Copies towards a device are not host syncs.
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
