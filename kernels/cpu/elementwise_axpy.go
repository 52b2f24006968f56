package cpu

import (
	"github.com/esper-go/esper/kernels"
	"github.com/esper-go/esper/tensor"
)

// ChannelAxpy implements kernels.ChannelAxpyer: dst = x + s⊙y with one
// scale per channel (or one for all), each plane's product taken into a
// buffer in L1 and added from there, so that it is bitwise Binary Mul
// followed by Binary Add without the full-size product between them.
func (be *Backend) ChannelAxpy(dst, x, y, s *T) {
	const name = "ChannelAxpy"
	checkChannelAxpy(name, x, y, s, dst)
	needShape(name, "dst", dst, x.Shape())
	needContig(name, "dst", dst)
	if dst.DType() != x.DType() {
		fail(name, "dst (shape %v) has dtype %v, want %v", dst.Shape(), dst.DType(), x.DType())
	}
	if x.DType() == tensor.F64 {
		be.launch(channelAxpyPrep[float64](dst, x, y, s))
	} else {
		be.launch(channelAxpyPrep[float32](dst, x, y, s))
	}
}

// ChannelAxpyBackward implements kernels.ChannelAxpyer: dy = s⊙g
// (bitwise Binary Mul) and ds[c] = Σ g⊙y over channel c's planes, each
// plane's sum in float64, the planes added in sample order.
func (be *Backend) ChannelAxpyBackward(dy, ds, g, y, s *T) {
	const name = "ChannelAxpyBackward"
	checkChannelAxpy(name, g, y, s, dy, ds)
	if dy != nil {
		needShape(name, "dy", dy, y.Shape())
		needContig(name, "dy", dy)
	}
	if ds != nil {
		needShape(name, "ds", ds, s.Shape())
		needContig(name, "ds", ds)
	}
	for _, t := range []*T{dy, ds} {
		if t != nil && t.DType() != y.DType() {
			fail(name, "an output (shape %v) has dtype %v, want %v", t.Shape(), t.DType(), y.DType())
		}
	}
	if y.DType() == tensor.F64 {
		be.launch(channelAxpyBwdPrep[float64](dy, ds, g, y, s))
	} else {
		be.launch(channelAxpyBwdPrep[float32](dy, ds, g, y, s))
	}
}

// checkChannelAxpy validates the operands: x and y (x the residual or
// the output gradient) of one shape [N, C, ...], contiguous, F32 or F64
// alike; s contiguous in their dtype with 1 or C elements.
func checkChannelAxpy(name string, x, y, s *T, outs ...*T) {
	needCPU(name, x, y, s)
	needCPU(name, outs...)
	_, c, _ := planes(name, y)
	if !tensor.SameShape(x.Shape(), y.Shape()) {
		fail(name, "operands of shapes %v and %v differ", x.Shape(), y.Shape())
	}
	dt := y.DType()
	if dt != tensor.F32 && dt != tensor.F64 || x.DType() != dt || s.DType() != dt {
		fail(name, "dtypes %v, %v and scale %v: want one of f32 and f64", x.DType(), dt, s.DType())
	}
	if n := s.Numel(); n != 1 && n != c {
		fail(name, "scale of shape %v: want 1 or %d elements", s.Shape(), c)
	}
	needContig(name, "x", x)
	needContig(name, "y", y)
	needContig(name, "scale", s)
}

// axpyChunk is the length of the product buffer, which stays in L1.
const axpyChunk = 1024

func channelAxpyPrep[F tensor.Float](dst, x, y, s *T) func() {
	n, c, hw := planes("ChannelAxpy", y)
	ds, xs, ys, ss := tensor.Data[F](dst), tensor.Data[F](x), tensor.Data[F](y), tensor.Data[F](s)
	body := func(lo, hi int) {
		var buf [axpyChunk]F
		for it := lo; it < hi; it++ {
			si := 0
			if len(ss) > 1 {
				si = it % c
			}
			for j := it * hw; j < (it+1)*hw; j += axpyChunk {
				m := min(axpyChunk, (it+1)*hw-j)
				t := buf[:m]
				binaryRow(kernels.Mul, t, ss, si, 0, ys, j, 1)
				binaryRow(kernels.Add, ds[j:j+m], xs, j, 1, t, 0, 1)
			}
		}
	}
	return func() { parallelFor(n*c, 2*hw, body) }
}

func channelAxpyBwdPrep[F tensor.Float](dy, ds, g, y, s *T) func() {
	n, c, hw := planes("ChannelAxpyBackward", y)
	gs, ys, ss := tensor.Data[F](g), tensor.Data[F](y), tensor.Data[F](s)
	var dys, dss []F
	if dy != nil {
		dys = tensor.Data[F](dy)
	}
	var part, acc []float64 // Σ g⊙y per plane, then per scale
	if ds != nil {
		dss = tensor.Data[F](ds)
		part, acc = make([]float64, n*c), make([]float64, len(dss))
	}
	body := func(lo, hi int) {
		for it := lo; it < hi; it++ {
			si := 0
			if len(ss) > 1 {
				si = it % c
			}
			o := it * hw
			if dys != nil {
				binaryRow(kernels.Mul, dys[o:o+hw], ss, si, 0, gs, o, 1)
			}
			if part != nil {
				_, part[it] = rowGradSums(gs[o:o+hw], ys[o:o+hw], reluMask{}, 0)
			}
		}
	}
	return func() {
		parallelFor(n*c, 3*hw, body)
		if dss == nil {
			return
		}
		clear(acc)
		for it, v := range part {
			if len(dss) > 1 {
				acc[it%c] += v
			} else {
				acc[0] += v
			}
		}
		for k, v := range acc {
			dss[k] = F(v)
		}
	}
}
