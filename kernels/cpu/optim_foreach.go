package cpu

import (
	"math"

	"github.com/esper-go/esper/kernels"
	"github.com/esper-go/esper/tensor"
)

// Multi-tensor kernels: the tensors are cut into fixed chunks of chunkLen
// elements and all chunks of all tensors form one parallel launch. Per
// chunk partials are combined in order per tensor.

// flat is a contiguous float tensor's data, by dtype.
type flat struct {
	dt  tensor.DType
	f32 []float32
	f64 []float64
	u16 []uint16
	n   int
}

func newFlat(op, what string, t *T) flat {
	needCPU(op, t)
	needContig(op, what, t)
	f := flat{dt: t.DType(), n: t.Numel()}
	switch f.dt {
	case tensor.F32:
		f.f32 = tensor.Data[float32](t)
	case tensor.F64:
		f.f64 = tensor.Data[float64](t)
	case tensor.BF16, tensor.F16:
		f.u16 = tensor.Data[uint16](t)
	default:
		fail(op, "%s (shape %v) has dtype %v, want a float dtype", what, t.Shape(), t.DType())
	}
	return f
}

func half2f(dt tensor.DType, h uint16) float32 {
	if dt == tensor.BF16 {
		return tensor.BF16ToF32(h)
	}
	return tensor.F16ToF32(h)
}

func f2half(dt tensor.DType, v float32) uint16 {
	if dt == tensor.BF16 {
		return tensor.F32ToBF16(v)
	}
	return tensor.F32ToF16(v)
}

// chunkList enumerates the chunks of a tensor list.
type chunkList struct {
	tensor []int // chunk → tensor
	lo     []int // chunk → first element
	first  []int // tensor → first chunk; len = tensors+1
}

func newChunkList(fs []flat) chunkList {
	var c chunkList
	c.first = make([]int, len(fs)+1)
	for i, f := range fs {
		c.first[i] = len(c.lo)
		for lo := 0; lo < f.n; lo += chunkLen {
			c.tensor = append(c.tensor, i)
			c.lo = append(c.lo, lo)
		}
	}
	c.first[len(fs)] = len(c.lo)
	return c
}

func flats(op, what string, xs []*T) []flat {
	fs := make([]flat, len(xs))
	for i, x := range xs {
		fs[i] = newFlat(op, what, x)
	}
	return fs
}

// ForeachNorm implements kernels.Backend (float64 accumulation).
func (be *Backend) ForeachNorm(dst *T, xs []*T) {
	const name = "ForeachNorm"
	needCPU(name, dst)
	must(kernels.CheckForeachNorm(name, dst, xs))
	fs := flats(name, "xs[i]", xs)
	cl := newChunkList(fs)
	part := make([]float64, len(cl.lo))
	body := func(lo, hi int) {
		for c := lo; c < hi; c++ {
			f := &fs[cl.tensor[c]]
			a, b := cl.lo[c], min(cl.lo[c]+chunkLen, f.n)
			var s float64
			switch {
			case f.f32 != nil:
				for _, v := range f.f32[a:b] {
					s += float64(v) * float64(v)
				}
			case f.f64 != nil:
				for _, v := range f.f64[a:b] {
					s += v * v
				}
			default:
				for _, h := range f.u16[a:b] {
					v := float64(half2f(f.dt, h))
					s += v * v
				}
			}
			part[c] = s
		}
	}
	var st stage
	d := out[float64](&st, dst)
	be.launch(func() {
		parallelFor(len(part), chunkLen, body)
		for i := range fs {
			var s float64
			for c := cl.first[i]; c < cl.first[i+1]; c++ {
				s += part[c]
			}
			d[i] = math.Sqrt(s)
		}
		st.store()
	})
}

// ForeachScale implements kernels.Backend.
func (be *Backend) ForeachScale(xs []*T, s *T) {
	const name = "ForeachScale"
	needCPU(name, s)
	must(kernels.CheckScalarApart(name, "s", s, xs))
	get := scalarReader(name, "s", s)
	fs := flats(name, "xs[i]", xs)
	cl := newChunkList(fs)
	var k float64
	body := func(lo, hi int) {
		for c := lo; c < hi; c++ {
			scaleChunk(&fs[cl.tensor[c]], cl.lo[c], k)
		}
	}
	be.launch(func() {
		k = get()
		parallelFor(len(cl.lo), chunkLen, body)
	})
}

func scaleChunk(f *flat, lo int, k float64) {
	hi := min(lo+chunkLen, f.n)
	switch {
	case f.f32 != nil:
		k32 := float32(k)
		x := f.f32[lo:hi]
		for i := range x {
			x[i] *= k32
		}
	case f.f64 != nil:
		x := f.f64[lo:hi]
		for i := range x {
			x[i] *= k
		}
	default:
		k32 := float32(k)
		x := f.u16[lo:hi]
		for i, h := range x {
			x[i] = f2half(f.dt, half2f(f.dt, h)*k32)
		}
	}
}

// ForeachAxpy implements kernels.Backend: ys[i] += alpha·xs[i], with
// xs[i] of ys[i]'s shape and dtype.
func (be *Backend) ForeachAxpy(ys, xs []*T, alpha float64) {
	const name = "ForeachAxpy"
	must(kernels.CheckForeachAxpy(name, ys, xs))
	fy := flats(name, "ys[i]", ys)
	fx := flats(name, "xs[i]", xs)
	cl := newChunkList(fy)
	body := func(lo, hi int) {
		for c := lo; c < hi; c++ {
			t := cl.tensor[c]
			y, x := &fy[t], &fx[t]
			a, b := cl.lo[c], min(cl.lo[c]+chunkLen, y.n)
			switch {
			case y.f32 != nil:
				al := float32(alpha)
				xv := x.f32[a:b]
				for i, v := range y.f32[a:b] {
					y.f32[a+i] = v + al*xv[i]
				}
			case y.f64 != nil:
				xv := x.f64[a:b]
				for i, v := range y.f64[a:b] {
					y.f64[a+i] = v + alpha*xv[i]
				}
			default:
				al := float32(alpha)
				xv := x.u16[a:b]
				for i, h := range y.u16[a:b] {
					y.u16[a+i] = f2half(y.dt, half2f(y.dt, h)+al*half2f(x.dt, xv[i]))
				}
			}
		}
	}
	be.launch(func() { parallelFor(len(cl.lo), chunkLen, body) })
}
