package simic

import (
	"fmt"

	"github.com/esper-go/esper/tensor"
)

// The two crossings of simic's code to and from a device: the only ways
// it moves tensors, so that every host read on a device is one of the
// explicit, counted copies the design allows (tensor.HostSyncs).

// toDevice returns t on dev: t itself when it is there already, else an
// explicit copy (towards a device: no host sync).
func toDevice(t *tensor.Tensor, dev tensor.Device) (*tensor.Tensor, error) {
	if t.Device() == dev {
		return t, nil
	}
	out, err := t.ToDevice(dev)
	if err != nil {
		return nil, fmt.Errorf("simic: copying %v %v to %v: %w", t.DType(), t.Shape(), dev, err)
	}
	return out, nil
}

// hostFloat64s returns t's elements widened to float64: read directly on
// the CPU, else through one explicit copy to the host (one host sync of
// t's device).
func hostFloat64s(t *tensor.Tensor) ([]float64, error) {
	if !t.Device().IsCPU() {
		h, err := t.ToDevice(tensor.CPU)
		if err != nil {
			return nil, fmt.Errorf("simic: reading %v %v from %v: %w", t.DType(), t.Shape(), t.Device(), err)
		}
		t = h
	}
	return t.Float64s(), nil
}

// constOn returns the host values v as a constant tensor of dtype dt and
// the given shape on dev (one copy towards the device).
func constOn(dev tensor.Device, dt tensor.DType, v []float64, shape ...int) (*tensor.Tensor, error) {
	return toDevice(tensor.FromFloat64s(dt, v, shape...), dev)
}
