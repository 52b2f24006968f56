package cpu

import "fmt"

// Concat implements kernels.Backend: one strided copy per source into
// its slice of dst.
func (be *Backend) Concat(dst *T, srcs []*T, axis int) {
	const name = "Concat"
	needCPU(name, dst)
	needCPU(name, srcs...)
	a := normAxis(name, axis, dst.Shape())
	shapes := func() string {
		s := ""
		for i, t := range srcs {
			if i > 0 {
				s += ", "
			}
			s += fmt.Sprint(t.Shape())
		}
		return s
	}
	total := 0
	for _, t := range srcs {
		if t.Rank() != dst.Rank() {
			fail(name, "sources [%s] do not concatenate into %v along axis %d", shapes(), dst.Shape(), axis)
		}
		for d, s := range t.Shape() {
			if d != a && s != dst.Shape()[d] {
				fail(name, "sources [%s] do not concatenate into %v along axis %d", shapes(), dst.Shape(), axis)
			}
		}
		total += t.Shape()[a]
	}
	if total != dst.Shape()[a] {
		fail(name, "sources [%s] do not concatenate into %v along axis %d", shapes(), dst.Shape(), axis)
	}
	fs := make([]func(), 0, len(srcs))
	off := 0
	for _, t := range srcs {
		n := t.Shape()[a]
		if n > 0 {
			fs = append(fs, copyFunc(dst.Narrow(a, off, n), t))
		}
		off += n
	}
	be.launch(func() {
		for _, f := range fs {
			f()
		}
	})
}

// Pad implements kernels.Backend: fill dst with value, then copy x into
// the interior.
func (be *Backend) Pad(dst, x *T, pads []int, value float64) {
	const name = "Pad"
	needCPU(name, dst, x)
	if len(pads) != 2*x.Rank() || dst.Rank() != x.Rank() {
		fail(name, "x %v with pads %v does not give dst %v", x.Shape(), pads, dst.Shape())
	}
	inner := dst
	for d, s := range x.Shape() {
		if pads[2*d] < 0 || pads[2*d+1] < 0 || dst.Shape()[d] != s+pads[2*d]+pads[2*d+1] {
			fail(name, "x %v with pads %v does not give dst %v", x.Shape(), pads, dst.Shape())
		}
		inner = inner.Narrow(d, pads[2*d], s)
	}
	fill := fillFunc(dst, value)
	cp := copyFunc(inner, x)
	be.launch(func() {
		fill()
		cp()
	})
}
