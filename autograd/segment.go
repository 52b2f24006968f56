package autograd

import (
	"fmt"

	"github.com/esper-go/esper/kernels"
	"github.com/esper-go/esper/tensor"
)

// Segment ops reduce the rows of src [E, F...] into numSegments rows by
// segment id (segIDs [E], I64 or I32, values in [0, numSegments)), the
// message-passing primitives of the graph policy. Empty segments give 0.

// segmentShape validates a segment op and returns the output shape.
func segmentShape(op string, src *Var, segIDs *tensor.Tensor, numSegments int) []int {
	checkFloat(op, src)
	checkIndex(op, segIDs)
	ss := src.Shape()
	if len(ss) < 1 || segIDs.Rank() != 1 || segIDs.Shape()[0] != ss[0] || numSegments < 0 {
		panic(fmt.Sprintf("autograd: %s: source shape %v and segment-id shape %v with %d segments (want [E, F...] and [E])", op, ss, segIDs.Shape(), numSegments))
	}
	out := append([]int(nil), ss...)
	out[0] = numSegments
	return out
}

// segmentReduce runs SegmentReduce and returns the output (and argmax for
// Max).
func segmentReduce(op kernels.ReduceOp, src, segIDs *tensor.Tensor, os []int) (out, argmax *tensor.Tensor) {
	out = alloc(src, src.DType(), os...)
	if op == kernels.Max {
		argmax = alloc(src, tensor.I64, os...)
	}
	backendOf(out).SegmentReduce(op, out, argmax, src, segIDs)
	return out, argmax
}

// rowsOf gathers rows of g by segment id: the broadcast of a per-segment
// value back to its rows.
func rowsOf(g, segIDs *tensor.Tensor, rows int) *tensor.Tensor {
	g = contig(g)
	os := append([]int(nil), g.Shape()...)
	os[0] = rows
	out := alloc(g, g.DType(), os...)
	backendOf(out).IndexSelect(out, g, 0, segIDs)
	return out
}

// SegmentSum sums the rows of each segment.
func SegmentSum(src *Var, segIDs *tensor.Tensor, numSegments int) *Var {
	os := segmentShape("segment_sum", src, segIDs, numSegments)
	sv, iv := contig(src.Value), contig(segIDs)
	out, _ := segmentReduce(kernels.Sum, sv, iv, os)
	e := sv.Shape()[0]
	return result("segment_sum", out, []*Var{src}, 1, func() backwardFunc {
		return func(g *tensor.Tensor) []*tensor.Tensor {
			return []*tensor.Tensor{rowsOf(g, iv, e)}
		}
	})
}

// SegmentMean averages the rows of each segment.
func SegmentMean(src *Var, segIDs *tensor.Tensor, numSegments int) *Var {
	os := segmentShape("segment_mean", src, segIDs, numSegments)
	sv, iv := contig(src.Value), contig(segIDs)
	out, _ := segmentReduce(kernels.Mean, sv, iv, os)
	e := sv.Shape()[0]
	return result("segment_mean", out, []*Var{src}, 1, func() backwardFunc {
		return func(g *tensor.Tensor) []*tensor.Tensor {
			// Each row gets its segment's gradient divided by the
			// segment's size, counted on the device.
			ones := full(sv, sv.DType(), 1, e)
			cnt, _ := segmentReduce(kernels.Sum, ones, iv, []int{numSegments})
			rowCnt := rowsOf(cnt, iv, e)
			bs := make([]int, len(os))
			for i := range bs {
				bs[i] = 1
			}
			bs[0] = e
			return []*tensor.Tensor{binT(kernels.Div, rowsOf(g, iv, e), rowCnt.Reshape(bs...))}
		}
	})
}

// SegmentMax takes the per-feature maximum of the rows of each segment.
// The gradient goes to the winning row (the kernel's argmax).
func SegmentMax(src *Var, segIDs *tensor.Tensor, numSegments int) *Var {
	os := segmentShape("segment_max", src, segIDs, numSegments)
	sv, iv := contig(src.Value), contig(segIDs)
	out, argmax := segmentReduce(kernels.Max, sv, iv, os)
	ss := sv.Shape()
	return result("segment_max", out, []*Var{src}, 1, func() backwardFunc {
		return func(g *tensor.Tensor) []*tensor.Tensor {
			dx := alloc(sv, sv.DType(), ss...)
			backendOf(dx).SegmentMaxBackward(dx, contig(g), argmax)
			return []*tensor.Tensor{dx}
		}
	})
}

// SegmentSoftmax applies a softmax within each segment, per feature (the
// attention normalisation of graph attention layers). The result has
// src's shape.
func SegmentSoftmax(src *Var, segIDs *tensor.Tensor, numSegments int) *Var {
	segmentShape("segment_softmax", src, segIDs, numSegments)
	sv, iv := contig(src.Value), contig(segIDs)
	out := alloc(sv, sv.DType(), sv.Shape()...)
	backendOf(out).SegmentSoftmax(out, sv, iv, numSegments)
	return result("segment_softmax", out, []*Var{src}, 2, func() backwardFunc {
		return func(g *tensor.Tensor) []*tensor.Tensor {
			dx := alloc(out, out.DType(), out.Shape()...)
			backendOf(dx).SegmentSoftmaxBackward(dx, out, contig(g), iv, numSegments)
			return []*tensor.Tensor{dx}
		}
	})
}
