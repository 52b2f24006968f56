package tensor

import (
	"fmt"

	gt "gorgonia.org/tensor"
)

// ToDense copies t into a gorgonia.org/tensor Dense with the matching Go
// element type (BF16 and F16 become float32). CPU only.
func ToDense(t *Tensor) *gt.Dense {
	c := t.Contiguous()
	shape := append([]int(nil), t.shape...)
	if len(shape) == 0 {
		shape = []int{1}
	}
	var backing any
	switch t.DType() {
	case F64:
		backing = append([]float64(nil), c.F64()...)
	case F32:
		backing = append([]float32(nil), c.F32()...)
	case BF16, F16:
		backing = append([]float32(nil), c.Cast(F32).F32()...)
	case I32:
		backing = append([]int32(nil), c.I32()...)
	case I64:
		backing = append([]int64(nil), c.I64()...)
	case Bool:
		backing = append([]bool(nil), c.Bools()...)
	default:
		panic(fmt.Sprintf("tensor: ToDense of dtype %v", t.DType()))
	}
	return gt.New(gt.WithShape(shape...), gt.WithBacking(backing))
}

// FromDense copies a gorgonia.org/tensor Dense into a new CPU tensor. The
// supported element types are float64, float32, int32, int64 and bool.
func FromDense(d *gt.Dense) (*Tensor, error) {
	shape := append([]int(nil), d.Shape()...)
	if !d.IsNativelyAccessible() {
		return nil, fmt.Errorf("tensor: FromDense: dense tensor is not in host memory")
	}
	src := d
	if !d.DataOrder().IsRowMajor() || d.RequiresIterator() {
		src = d.Materialize().(*gt.Dense)
	}
	switch data := src.Data().(type) {
	case []float64:
		return FromSlice(append([]float64(nil), data...), shape...), nil
	case []float32:
		return FromSlice(append([]float32(nil), data...), shape...), nil
	case []int32:
		return FromSlice(append([]int32(nil), data...), shape...), nil
	case []int64:
		return FromSlice(append([]int64(nil), data...), shape...), nil
	case []bool:
		return FromSlice(append([]bool(nil), data...), shape...), nil
	case float64:
		return FromSlice([]float64{data}, shape...), nil
	case float32:
		return FromSlice([]float32{data}, shape...), nil
	}
	return nil, fmt.Errorf("tensor: FromDense: unsupported element type %v", d.Dtype())
}
