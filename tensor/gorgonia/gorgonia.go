// Package gorgonia converts between Esper-Go tensors and
// gorgonia.org/tensor Denses. It lives apart from package tensor so that
// importing tensor costs no third-party module.
package gorgonia

import (
	"fmt"

	gt "gorgonia.org/tensor"

	"github.com/esper-go/esper/tensor"
)

// ToDense copies t into a gorgonia.org/tensor Dense with the matching Go
// element type (BF16 and F16 become float32). A rank-0 tensor becomes a
// scalar Dense (shape ()). CPU only.
func ToDense(t *tensor.Tensor) *gt.Dense {
	c := t.Contiguous()
	var backing any
	switch t.DType() {
	case tensor.F64:
		backing = append([]float64(nil), c.F64()...)
	case tensor.F32:
		backing = append([]float32(nil), c.F32()...)
	case tensor.BF16, tensor.F16:
		backing = append([]float32(nil), c.Cast(tensor.F32).F32()...)
	case tensor.I32:
		backing = append([]int32(nil), c.I32()...)
	case tensor.I64:
		backing = append([]int64(nil), c.I64()...)
	case tensor.Bool:
		backing = append([]bool(nil), c.Bools()...)
	default:
		panic(fmt.Sprintf("gorgonia: ToDense of dtype %v", t.DType()))
	}
	return gt.New(gt.WithShape(t.Shape()...), gt.WithBacking(backing))
}

// denseDTypes maps the gorgonia element types FromDense accepts.
var denseDTypes = map[gt.Dtype]tensor.DType{
	gt.Float64: tensor.F64,
	gt.Float32: tensor.F32,
	gt.Int32:   tensor.I32,
	gt.Int64:   tensor.I64,
	gt.Bool:    tensor.Bool,
}

// FromDense copies a gorgonia.org/tensor Dense into a new CPU tensor. The
// supported element types are float64, float32, int32, int64 and bool.
// Views (transposed or sliced Denses) are copied in their logical
// row-major order; a scalar Dense becomes a rank-0 tensor.
func FromDense(d *gt.Dense) (*tensor.Tensor, error) {
	dt, ok := denseDTypes[d.Dtype()]
	if !ok {
		return nil, fmt.Errorf("gorgonia: FromDense: unsupported element type %v", d.Dtype())
	}
	if !d.IsNativelyAccessible() {
		return nil, fmt.Errorf("gorgonia: FromDense: dense tensor is not in host memory")
	}
	shape := append([]int(nil), d.Shape()...)
	if d.IsScalar() {
		shape = nil
	}
	out := tensor.Empty(dt, shape...)
	if out.Numel() == 0 {
		// gorgonia's Data panics on an empty Dense; there is nothing to copy.
		return out, nil
	}
	src := d
	if !d.DataOrder().IsRowMajor() || d.RequiresIterator() {
		src = d.Materialize().(*gt.Dense)
	}
	var n int
	switch data := src.Data().(type) {
	case []float64:
		n = copy(out.F64(), data)
	case []float32:
		n = copy(out.F32(), data)
	case []int32:
		n = copy(out.I32(), data)
	case []int64:
		n = copy(out.I64(), data)
	case []bool:
		n = copy(out.Bools(), data)
	case float64:
		out.F64()[0], n = data, 1
	case float32:
		out.F32()[0], n = data, 1
	case int32:
		out.I32()[0], n = data, 1
	case int64:
		out.I64()[0], n = data, 1
	case bool:
		out.Bools()[0], n = data, 1
	default:
		return nil, fmt.Errorf("gorgonia: FromDense: unexpected data %T for element type %v", data, d.Dtype())
	}
	if n != out.Numel() {
		return nil, fmt.Errorf("gorgonia: FromDense: dense of shape %v holds %d elements, want %d", d.Shape(), n, out.Numel())
	}
	return out, nil
}
