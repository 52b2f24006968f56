package cpu

import (
	"math"

	"github.com/esper-go/esper/kernels"
	"github.com/esper-go/esper/tensor"
)

// Segment kernels reduce the rows of src [E, F...] by segment id. Each
// launch first buckets the rows by segment with a stable counting sort
// into prepared buffers, then gives every segment to one item that visits
// its rows in row order: deterministic and race-free.

type segSort struct {
	i64   []int64
	i32   []int32
	start []int // start[s]..start[s+1] index order
	next  []int
	order []int
	op    string
}

// newSegSort prepares the bucketing of e rows into s segments by segIDs
// (checked by the caller: kernels.CheckSegmentIDs).
func newSegSort(op string, segIDs *T, e, s int) *segSort {
	i64, i32 := indexData(op, "segIDs", segIDs)
	return &segSort{i64: i64, i32: i32, start: make([]int, s+1), next: make([]int, s), order: make([]int, e), op: op}
}

// run buckets the rows; it allocates nothing.
func (ss *segSort) run() {
	clear(ss.start)
	S := len(ss.next)
	for e := range ss.order {
		s := idxAt(ss.i64, ss.i32, e)
		checkIndexValue(ss.op, s, S)
		ss.start[s+1]++
	}
	for s := 0; s < S; s++ {
		ss.start[s+1] += ss.start[s]
		ss.next[s] = ss.start[s]
	}
	for e := range ss.order {
		s := idxAt(ss.i64, ss.i32, e)
		ss.order[ss.next[s]] = e
		ss.next[s]++
	}
}

func (ss *segSort) rows(s int) []int { return ss.order[ss.start[s]:ss.start[s+1]] }

// SegmentReduce implements kernels.Backend.
func (be *Backend) SegmentReduce(op kernels.ReduceOp, dst, argmax, src, segIDs *T) {
	name := opName(segmentNames, "SegmentReduce ", op)
	needCPU(name, dst, argmax, src, segIDs)
	e, _, s, err := kernels.CheckSegmentReduce(name, op, dst, argmax, src, segIDs)
	must(err)
	if op == kernels.Max && argmax != nil {
		needContig(name, "argmax", argmax)
	}
	if op != kernels.Max {
		argmax = nil
	}
	ss := newSegSort(name, segIDs, e, s)
	if wide(dst, src) {
		be.launch(segReducePrep[float64](op, ss, dst, argmax, src))
	} else {
		be.launch(segReducePrep[float32](op, ss, dst, argmax, src))
	}
}

func segReducePrep[F tensor.Float](op kernels.ReduceOp, ss *segSort, dst, argmax, src *T) func() {
	var s stage
	xs := in[F](&s, src)
	ds := out[F](&s, dst)
	var am []int64
	if argmax != nil {
		am = tensor.Data[int64](argmax)
	}
	S := dst.Shape()[0]
	fw := dst.Numel() / max(1, S)
	body := func(lo, hi int) {
		for sg := lo; sg < hi; sg++ {
			d := ds[sg*fw : (sg+1)*fw]
			rows := ss.rows(sg)
			var a []int64
			if am != nil {
				a = am[sg*fw : (sg+1)*fw]
			}
			if len(rows) == 0 {
				clear(d)
				for i := range a {
					a[i] = -1
				}
				continue
			}
			copy(d, xs[rows[0]*fw:(rows[0]+1)*fw])
			for i := range a {
				a[i] = int64(rows[0])
			}
			for _, e := range rows[1:] {
				r := xs[e*fw : (e+1)*fw]
				if op == kernels.Max {
					for i, v := range r {
						if v > d[i] {
							d[i] = v
							if a != nil {
								a[i] = int64(e)
							}
						}
					}
					continue
				}
				for i, v := range r {
					d[i] += v
				}
			}
			if op == kernels.Mean {
				inv := 1 / F(len(rows))
				for i := range d {
					d[i] *= inv
				}
			}
		}
	}
	return func() {
		s.load()
		ss.run()
		parallelFor(S, 1+len(ss.order)/max(1, S)*fw, body)
		s.store()
	}
}

// SegmentMaxBackward implements kernels.Backend.
func (be *Backend) SegmentMaxBackward(dsrc, dy, argmax *T) {
	const name = "SegmentMaxBackward"
	needCPU(name, dsrc, dy, argmax)
	must(kernels.CheckSegmentMaxBackward(name, dsrc, dy, argmax))
	needContig(name, "argmax", argmax)
	if wide(dsrc, dy) {
		be.launch(segMaxBwdPrep[float64](dsrc, dy, argmax))
	} else {
		be.launch(segMaxBwdPrep[float32](dsrc, dy, argmax))
	}
}

func segMaxBwdPrep[F tensor.Float](dsrc, dy, argmax *T) func() {
	var s stage
	gs := in[F](&s, dy)
	ds := out[F](&s, dsrc)
	am := tensor.Data[int64](argmax)
	e := dsrc.Shape()[0]
	S := dy.Shape()[0]
	fw := dy.Numel() / max(1, S)
	zero := func(lo, hi int) { clear(ds[lo:hi]) }
	// A row belongs to one segment, so the (argmax, column) targets of
	// different segments never collide.
	body := func(lo, hi int) {
		for sg := lo; sg < hi; sg++ {
			for i := 0; i < fw; i++ {
				a := int(am[sg*fw+i])
				if a < 0 {
					continue
				}
				checkIndexValue("SegmentMaxBackward", a, e)
				ds[a*fw+i] += gs[sg*fw+i]
			}
		}
	}
	return func() {
		s.load()
		parallelFor(len(ds), 1, zero)
		parallelFor(S, fw, body)
		s.store()
	}
}

// SegmentSoftmax implements kernels.Backend.
func (be *Backend) SegmentSoftmax(dst, src, segIDs *T, numSegments int) {
	const name = "SegmentSoftmax"
	needCPU(name, dst, src, segIDs)
	e, _, err := kernels.CheckSegmentSoftmax(name, dst, src, nil, segIDs, numSegments)
	must(err)
	ss := newSegSort(name, segIDs, e, numSegments)
	if wide(dst, src) {
		be.launch(segSoftmaxPrep[float64](ss, dst, src, nil, false))
	} else {
		be.launch(segSoftmaxPrep[float32](ss, dst, src, nil, false))
	}
}

// SegmentSoftmaxBackward implements kernels.Backend.
func (be *Backend) SegmentSoftmaxBackward(dx, y, dy, segIDs *T, numSegments int) {
	const name = "SegmentSoftmaxBackward"
	needCPU(name, dx, y, dy, segIDs)
	e, _, err := kernels.CheckSegmentSoftmax(name, dx, y, dy, segIDs, numSegments)
	must(err)
	ss := newSegSort(name, segIDs, e, numSegments)
	if wide(dx, y, dy) {
		be.launch(segSoftmaxPrep[float64](ss, dx, y, dy, true))
	} else {
		be.launch(segSoftmaxPrep[float32](ss, dx, y, dy, true))
	}
}

// segSoftmaxPrep computes the forward (x = src) or, with bwd, the
// backward dx = y·(dy − Σ_segment y·dy) (x = y).
func segSoftmaxPrep[F tensor.Float](ss *segSort, dst, x, dy *T, bwd bool) func() {
	var s stage
	xs := in[F](&s, x)
	gs := in[F](&s, dy)
	ds := out[F](&s, dst)
	e := x.Shape()[0]
	fw := x.Numel() / max(1, e)
	S := len(ss.next)
	body := func(lo, hi int) {
		for sg := lo; sg < hi; sg++ {
			rows := ss.rows(sg)
			for f := 0; f < fw; f++ {
				if bwd {
					var sum float64
					for _, r := range rows {
						sum += float64(xs[r*fw+f]) * float64(gs[r*fw+f])
					}
					for _, r := range rows {
						ds[r*fw+f] = F(float64(xs[r*fw+f]) * (float64(gs[r*fw+f]) - sum))
					}
					continue
				}
				m := math.Inf(-1)
				for _, r := range rows {
					if v := float64(xs[r*fw+f]); v > m {
						m = v
					}
				}
				var sum float64
				for _, r := range rows {
					sum += math.Exp(float64(xs[r*fw+f]) - m)
				}
				for _, r := range rows {
					ds[r*fw+f] = F(math.Exp(float64(xs[r*fw+f])-m) / sum)
				}
			}
		}
	}
	return func() {
		s.load()
		ss.run()
		parallelFor(S, 1+10*len(ss.order)/max(1, S)*fw, body)
		s.store()
	}
}
