package autograd

import (
	"fmt"

	"github.com/esper-go/esper/kernels"
	"github.com/esper-go/esper/tensor"
)

// ChannelAxpy returns x + s⊙y for x and y of one shape [N, C, ...] and a
// scale s with one element per channel, shaped to broadcast along axis 1
// ([1, C, 1, ...]), or a single element: a residual branch y with its
// output scale, added to the input x. Where the backend supports it
// (kernels.ChannelAxpyer) this is one pass forward, bitwise
// Add(x, Mul(s, y)), and one launch backward (dy = s⊙g with
// ds = Σ g⊙y over each channel, summed in float64); otherwise it is those
// two ops.
func ChannelAxpy(x, s, y *Var) *Var {
	checkFloat("channel_axpy", x, s, y)
	xs, ys, ss := x.Shape(), y.Shape(), s.Shape()
	if !tensor.SameShape(xs, ys) || len(ys) < 2 || !channelScale(ss, ys) {
		panic(fmt.Sprintf("autograd: channel_axpy: x %v, scale %v and y %v: want x and y of one shape [N, C, ...] and a scale of 1 or C elements shaped [1, C, 1, ...]", xs, ss, ys))
	}
	acc, ok := backendOf(y.Value).(kernels.ChannelAxpyer)
	p := promote(x, s, y)
	if dt := p[0].DType(); !ok || (dt != tensor.F32 && dt != tensor.F64) {
		return Add(x, Mul(s, y))
	}
	x, s, y = p[0], p[1], p[2]
	xv, sv, yv := contig(x.Value), contig(s.Value), contig(y.Value)
	out := alloc(yv, yv.DType(), ys...)
	acc.ChannelAxpy(out, xv, yv, sv)
	return resultWith("channel_axpy", out, []*Var{x, s, y}, 2, false, func(bufs *opBufs) backwardFunc {
		return func(g *tensor.Tensor) []*tensor.Tensor {
			g = contig(g)
			var dy, ds *tensor.Tensor
			if needs(y) {
				dy = alloc(yv, yv.DType(), ys...)
			}
			if needs(s) {
				ds = alloc(sv, sv.DType(), ss...)
			}
			if dy != nil || ds != nil {
				acc.ChannelAxpyBackward(dy, ds, g, yv, sv)
			}
			if needs(x) {
				bufs.grads[0] = g
			}
			bufs.grads[1], bufs.grads[2] = ds, dy
			return bufs.grads[:3]
		}
	})
}

// channelScale reports whether a scale of shape ss scales y (shape ys)
// per channel: one element, or C along axis 1 with every other axis 1
// and the rank of y.
func channelScale(ss, ys []int) bool {
	if tensor.Numel(ss) == 1 {
		return true
	}
	if len(ss) != len(ys) || ss[1] != ys[1] {
		return false
	}
	for i, d := range ss {
		if i != 1 && d != 1 {
			return false
		}
	}
	return true
}

// StraightThrough returns h + (s − detach(s)): h's value (for finite s;
// an infinite or NaN s makes it NaN, as the subtraction would) while the
// output gradient flows to both h and s unchanged. A seed blending at
// α = 0 trains on the host's errors this way without changing the host's
// output. Where the backend supports kernels.ChannelAxpyer it is one pass
// (h + 0⊙s) instead of a subtraction and an addition, equal to them up
// to the sign of a zero.
func StraightThrough(h, s *Var) *Var {
	checkFloat("straight_through", h, s)
	acc, ok := backendOf(h.Value).(kernels.ChannelAxpyer)
	p := promote(h, s)
	if dt := p[0].DType(); !ok || (dt != tensor.F32 && dt != tensor.F64) ||
		!tensor.SameShape(h.Shape(), s.Shape()) || len(h.Shape()) < 2 {
		// The two ops (which broadcast, and name shapes that do not).
		return Add(h, Sub(s, Detach(s)))
	}
	h, s = p[0], p[1]
	hv, sv := contig(h.Value), contig(s.Value)
	zero := sharedConst(hv, zeroF32, zeroF64) // the scale, read only
	if zero == nil {
		zero = full(hv, hv.DType(), 0)
	}
	out := alloc(hv, hv.DType(), hv.Shape()...)
	acc.ChannelAxpy(out, hv, sv, zero)
	return resultWith("straight_through", out, []*Var{h, s}, 0, false, func(bufs *opBufs) backwardFunc {
		return func(g *tensor.Tensor) []*tensor.Tensor {
			if needs(h) {
				bufs.grads[0] = g
			}
			if needs(s) {
				bufs.grads[1] = g
			}
			return bufs.grads[:2]
		}
	})
}
