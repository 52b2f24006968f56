package cpu

import "github.com/esper-go/esper/kernels"

// Concat implements kernels.Backend: one strided copy per source into
// its slice of dst.
func (be *Backend) Concat(dst *T, srcs []*T, axis int) {
	const name = "Concat"
	needCPU(name, dst)
	needCPU(name, srcs...)
	a := must1(kernels.CheckConcat(name, dst, srcs, axis))
	fs := concatFuncs(nil, dst, srcs, a)
	be.launch(func() {
		for _, f := range fs {
			f()
		}
	})
}

// concatFuncs appends to fs the copies of a Concat along axis a.
func concatFuncs(fs []func(), dst *T, srcs []*T, a int) []func() {
	off := 0
	for _, t := range srcs {
		n := t.Shape()[a]
		if n > 0 {
			fs = append(fs, copyFunc(dst.Narrow(a, off, n), t))
		}
		off += n
	}
	return fs
}

var _ kernels.ConcatManyer = (*Backend)(nil)

// ConcatMany implements kernels.ConcatManyer: every destination's Concat
// copies in one launch.
func (be *Backend) ConcatMany(dsts []*T, srcs []*T, counts []int, axis int) {
	const name = "ConcatMany"
	needCPU(name, dsts...)
	needCPU(name, srcs...)
	axes := must1(kernels.CheckConcatMany(name, dsts, srcs, counts, axis))
	var fs []func()
	off := 0
	for i, n := range counts {
		fs = concatFuncs(fs, dsts[i], srcs[off:off+n], axes[i])
		off += n
	}
	be.launch(func() {
		for _, f := range fs {
			f()
		}
	})
}

var _ kernels.ZeroManyer = (*Backend)(nil)

// ZeroMany implements kernels.ZeroManyer: every destination zeroed in
// one launch.
func (be *Backend) ZeroMany(dsts []*T) {
	const name = "ZeroMany"
	needCPU(name, dsts...)
	must(kernels.CheckZeroMany(name, dsts))
	fs := make([]func(), len(dsts))
	for i, d := range dsts {
		fs[i] = fillFunc(d, 0)
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
	must(kernels.CheckPad(name, dst, x, pads))
	inner := dst
	for d, s := range x.Shape() {
		inner = inner.Narrow(d, pads[2*d], s)
	}
	fill := fillFunc(dst, value)
	cp := copyFunc(inner, x)
	be.launch(func() {
		fill()
		cp()
	})
}
