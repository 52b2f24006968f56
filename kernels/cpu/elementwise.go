package cpu

import (
	"math"

	"github.com/esper-go/esper/kernels"
	"github.com/esper-go/esper/tensor"
)

// elemCost is the rough cost per element of an elementwise op for
// parallelFor; transcendental ops weigh more.
func unaryCost(op kernels.UnaryOp) int {
	switch op {
	case kernels.Neg, kernels.Abs, kernels.Square, kernels.Relu, kernels.Sign:
		return 1
	}
	return 8
}

// Unary implements kernels.Backend.
func (be *Backend) Unary(op kernels.UnaryOp, dst, x *T) {
	name := opName(unaryNames, "Unary ", op)
	needCPU(name, dst, x)
	must(kernels.CheckUnary(name, op, dst, x))
	if wide(dst, x) {
		be.launch(unaryPrep[float64](op, dst, x))
	} else {
		be.launch(unaryPrep[float32](op, dst, x))
	}
}

func unaryPrep[F tensor.Float](op kernels.UnaryOp, dst, x *T) func() {
	var s stage
	xs := in[F](&s, x)
	ds := out[F](&s, dst)
	n := len(xs)
	body := func(lo, hi int) { unaryKernel(op, ds[lo:hi], xs[lo:hi]) }
	c := unaryCost(op)
	return func() {
		s.load()
		parallelFor(n, c, body)
		s.store()
	}
}

const sqrt2OverPi = 0.7978845608028654 // √(2/π)

// maskF returns v when keep, else +0, without a branch on keep.
func maskF[F tensor.Float](v F, keep bool) F {
	var k uint64
	if keep {
		k = 1 // a conditional set, not a jump
	}
	switch p := any(&v).(type) {
	case *float32:
		*p = math.Float32frombits(math.Float32bits(*p) & uint32(-k))
	case *float64:
		*p = math.Float64frombits(math.Float64bits(*p) & -k)
	}
	return v
}

func unaryKernel[F tensor.Float](op kernels.UnaryOp, d, x []F) {
	d = d[:len(x)]
	switch op {
	case kernels.Neg:
		for i, v := range x {
			d[i] = -v
		}
	case kernels.Abs:
		for i, v := range x {
			d[i] = F(math.Abs(float64(v)))
		}
	case kernels.Exp:
		for i, v := range x {
			d[i] = F(math.Exp(float64(v)))
		}
	case kernels.Log:
		for i, v := range x {
			d[i] = F(math.Log(float64(v)))
		}
	case kernels.Sqrt:
		for i, v := range x {
			d[i] = F(math.Sqrt(float64(v)))
		}
	case kernels.Rsqrt:
		for i, v := range x {
			d[i] = F(1 / math.Sqrt(float64(v)))
		}
	case kernels.Square:
		for i, v := range x {
			d[i] = v * v
		}
	case kernels.Recip:
		for i, v := range x {
			d[i] = 1 / v
		}
	case kernels.Sign:
		for i, v := range x {
			switch {
			case v > 0:
				d[i] = 1
			case v < 0:
				d[i] = -1
			default:
				d[i] = v // ±0 and NaN stay
			}
		}
	case kernels.Relu:
		// The builtin max is branch-free (a data-dependent branch costs
		// a misprediction every other element) and keeps NaN; max(−0, 0)
		// is +0.
		rowAffineAct(d, x, 0, 1, 0, true)
	case kernels.GeluTanh:
		for i, v := range x {
			f := float64(v)
			d[i] = F(0.5 * f * (1 + math.Tanh(sqrt2OverPi*(f+0.044715*f*f*f))))
		}
	case kernels.GeluErf:
		if d32, x32 := asF32(d), asF32(x); x32 != nil {
			geluErfF32(d32, x32) // float32: vectorised, see gelu.go
			return
		}
		for i, v := range x {
			f := float64(v)
			d[i] = F(f * 0.5 * math.Erfc(-f*math.Sqrt2/2))
		}
	case kernels.Silu:
		for i, v := range x {
			f := float64(v)
			d[i] = F(f / (1 + math.Exp(-f)))
		}
	case kernels.Sigmoid:
		for i, v := range x {
			d[i] = F(1 / (1 + math.Exp(-float64(v))))
		}
	case kernels.Tanh:
		for i, v := range x {
			d[i] = F(math.Tanh(float64(v)))
		}
	case kernels.Softplus:
		for i, v := range x {
			f := float64(v)
			if f > 20 { // PyTorch's threshold (beta 1)
				d[i] = v
			} else {
				d[i] = F(math.Log1p(math.Exp(f)))
			}
		}
	}
}

// UnaryBackward implements kernels.Backend.
func (be *Backend) UnaryBackward(op kernels.UnaryOp, dx, x, y, dy *T) {
	name := opName(unaryBackwardNames, "UnaryBackward ", op)
	needCPU(name, dx, x, y, dy)
	needY := must1(kernels.CheckUnaryBackward(name, op, dx, x, y, dy))
	if !needY {
		y = nil
	}
	if wide(dx, x, y, dy) {
		be.launch(unaryBwdPrep[float64](op, dx, x, y, dy))
	} else {
		be.launch(unaryBwdPrep[float32](op, dx, x, y, dy))
	}
}

func unaryBwdPrep[F tensor.Float](op kernels.UnaryOp, dx, x, y, dy *T) func() {
	var s stage
	xs := in[F](&s, x)
	ys := in[F](&s, y)
	dys := in[F](&s, dy)
	dxs := out[F](&s, dx)
	n := len(dys)
	body := func(lo, hi int) {
		var xr, yr []F
		if xs != nil {
			xr = xs[lo:hi]
		}
		if ys != nil {
			yr = ys[lo:hi]
		}
		unaryBwdKernel(op, dxs[lo:hi], xr, yr, dys[lo:hi])
	}
	c := unaryCost(op)
	return func() {
		s.load()
		parallelFor(n, c, body)
		s.store()
	}
}

func unaryBwdKernel[F tensor.Float](op kernels.UnaryOp, dx, x, y, dy []F) {
	dx = dx[:len(dy)]
	switch op {
	case kernels.Neg:
		for i, g := range dy {
			dx[i] = -g
		}
	case kernels.Abs:
		for i, g := range dy {
			v := x[i]
			switch {
			case v > 0:
				dx[i] = g
			case v < 0:
				dx[i] = -g
			default:
				dx[i] = 0
			}
		}
	case kernels.Exp:
		if y != nil {
			for i, g := range dy {
				dx[i] = g * y[i]
			}
		} else {
			for i, g := range dy {
				dx[i] = g * F(math.Exp(float64(x[i])))
			}
		}
	case kernels.Log:
		for i, g := range dy {
			dx[i] = g / x[i]
		}
	case kernels.Sqrt:
		if y != nil {
			for i, g := range dy {
				dx[i] = g / (2 * y[i])
			}
		} else {
			for i, g := range dy {
				dx[i] = g / (2 * F(math.Sqrt(float64(x[i]))))
			}
		}
	case kernels.Rsqrt:
		for i, g := range dy {
			var r F
			if y != nil {
				r = y[i]
			} else {
				r = F(1 / math.Sqrt(float64(x[i])))
			}
			dx[i] = -0.5 * g * r * r * r
		}
	case kernels.Square:
		for i, g := range dy {
			dx[i] = 2 * x[i] * g
		}
	case kernels.Recip:
		for i, g := range dy {
			var r F
			if y != nil {
				r = y[i]
			} else {
				r = 1 / x[i]
			}
			dx[i] = -g * r * r
		}
	case kernels.Sign:
		for i := range dy {
			dx[i] = 0
		}
	case kernels.Relu:
		// dy where x > 0, else +0 (even for a NaN or infinite dy), by
		// masking the bits: no data-dependent branch.
		rowReluBwd(dx, dy, x)
	case kernels.GeluTanh:
		// PyTorch's GeluBackward (approximate="tanh").
		const kappa = 0.044715
		for i, g := range dy {
			f := float64(x[i])
			xsq := f * f
			inner := sqrt2OverPi * (f + kappa*xsq*f)
			t := math.Tanh(inner)
			left := 0.5 * f
			right := 1 + t
			ld := 0.5 * right
			rd := left * (1 - t*t) * sqrt2OverPi * (1 + 3*kappa*xsq)
			dx[i] = F(float64(g) * (ld + rd))
		}
	case kernels.GeluErf:
		const invSqrt2Pi = 0.3989422804014327 // 1/√(2π)
		for i, g := range dy {
			f := float64(x[i])
			cdf := 0.5 * (1 + math.Erf(f*math.Sqrt2/2))
			pdf := math.Exp(-0.5*f*f) * invSqrt2Pi
			dx[i] = F(float64(g) * (cdf + f*pdf))
		}
	case kernels.Silu:
		for i, g := range dy {
			f := float64(x[i])
			sg := 1 / (1 + math.Exp(-f))
			dx[i] = F(float64(g) * sg * (1 + f*(1-sg)))
		}
	case kernels.Sigmoid:
		for i, g := range dy {
			var sg F
			if y != nil {
				sg = y[i]
			} else {
				sg = F(1 / (1 + math.Exp(-float64(x[i]))))
			}
			dx[i] = g * sg * (1 - sg)
		}
	case kernels.Tanh:
		for i, g := range dy {
			var t F
			if y != nil {
				t = y[i]
			} else {
				t = F(math.Tanh(float64(x[i])))
			}
			dx[i] = g * (1 - t*t)
		}
	case kernels.Softplus:
		for i, g := range dy {
			f := float64(x[i])
			if f > 20 {
				dx[i] = g
			} else {
				z := math.Exp(f)
				dx[i] = F(float64(g) * z / (z + 1))
			}
		}
	}
}

// operand is one input of a broadcasting kernel: a storage slice, the
// offset of its first element and its strides broadcast to the output.
type operand[F tensor.Float] struct {
	data []F
	off  int
	st   []int
}

// bcastOperand prepares t for a broadcast to shape, staging it to a
// packed []F when its dtype is not F.
func bcastOperand[F tensor.Float](s *stage, op string, t *T, shape []int) operand[F] {
	if _, ok := bcastStrides(t, shape); !ok {
		return operand[F]{} // caller validated; unreachable
	}
	if t.DType() == dtypeOf[F]() {
		st, _ := bcastStrides(t, shape)
		return operand[F]{data: tensor.StorageData[F](t.Storage()), off: t.Offset(), st: st}
	}
	tmp := tensor.Empty(dtypeOf[F](), t.Shape()...)
	s.pre = append(s.pre, copyFunc(tmp, t))
	st, _ := bcastStrides(tmp, shape)
	return operand[F]{data: tensor.Data[F](tmp), st: st}
}

// scalarOperand is a constant broadcast to shape.
func scalarOperand[F tensor.Float](v float64, shape []int) operand[F] {
	return operand[F]{data: []F{F(v)}, st: make([]int, len(shape))}
}

// Binary implements kernels.Backend.
func (be *Backend) Binary(op kernels.BinaryOp, dst, a, b *T) {
	name := opName(binaryNames, "Binary ", op)
	needCPU(name, dst, a, b)
	must(kernels.CheckBinary(name, op, dst, a, b))
	needContig(name, "dst", dst)
	if be.eager() && binaryEager(op, dst, a, b) {
		return
	}
	if wide(a, b) || (!op.IsComparison() && wide(dst)) {
		var s stage
		be.launch(binaryPrep(&s, op, dst, bcastOperand[float64](&s, name, a, dst.Shape()), bcastOperand[float64](&s, name, b, dst.Shape())))
	} else {
		var s stage
		be.launch(binaryPrep(&s, op, dst, bcastOperand[float32](&s, name, a, dst.Shape()), bcastOperand[float32](&s, name, b, dst.Shape())))
	}
}

// BinaryScalar implements kernels.Backend.
func (be *Backend) BinaryScalar(op kernels.BinaryOp, dst, a *T, v float64, swap bool) {
	name := opName(binaryScalarNames, "BinaryScalar ", op)
	needCPU(name, dst, a)
	must(kernels.CheckBinary(name, op, dst, a, nil))
	needContig(name, "dst", dst)
	if wide(a) || (!op.IsComparison() && wide(dst)) {
		var s stage
		x, c := bcastOperand[float64](&s, name, a, dst.Shape()), scalarOperand[float64](v, dst.Shape())
		if swap {
			x, c = c, x
		}
		be.launch(binaryPrep(&s, op, dst, x, c))
	} else {
		var s stage
		x, c := bcastOperand[float32](&s, name, a, dst.Shape()), scalarOperand[float32](v, dst.Shape())
		if swap {
			x, c = c, x
		}
		be.launch(binaryPrep(&s, op, dst, x, c))
	}
}

func binaryPrep[F tensor.Float](s *stage, op kernels.BinaryOp, dst *T, a, b operand[F]) func() {
	shape := dst.Shape()
	cs := contigStrides(shape)
	g := newGeom(shape, [][]int{cs, a.st, b.st}, []int{0, a.off, b.off})
	sa, sb := g.innerStride(1), g.innerStride(2)
	cost := 1
	if op == kernels.Pow {
		cost = 16
	}
	if op.IsComparison() {
		d := tensor.Data[bool](dst)
		body := func(lo, hi int) {
			for it := lo; it < hi; it++ {
				o, n := g.item(it)
				compareRow(op, d[o[0]:o[0]+n], a.data, o[1], sa, b.data, o[2], sb)
			}
		}
		return func() {
			s.load()
			parallelFor(g.items, cost*min(g.inner, itemLen), body)
		}
	}
	d := out[F](s, dst)
	body := func(lo, hi int) {
		for it := lo; it < hi; it++ {
			o, n := g.item(it)
			binaryRow(op, d[o[0]:o[0]+n], a.data, o[1], sa, b.data, o[2], sb)
		}
	}
	return func() {
		s.load()
		parallelFor(g.items, cost*min(g.inner, itemLen), body)
		s.store()
	}
}

// binaryRow computes d[i] = a[ia+i·sa] op b[ib+i·sb].
func binaryRow[F tensor.Float](op kernels.BinaryOp, d []F, a []F, ia, sa int, b []F, ib, sb int) {
	n := len(d)
	if n8 := n &^ 7; n8 > 0 && vdotAsm && op <= kernels.Div {
		if d32, ok := any(d).([]float32); ok {
			// float32 add, subtract, multiply and divide of two rows or
			// of a row and a scalar: eight lanes at a time (AVX2), the
			// tail below.
			mode := -1
			switch {
			case sa == 1 && sb == 1:
				mode = 0
			case sa == 1 && sb == 0:
				mode = 1
			case sa == 0 && sb == 1:
				mode = 2
			}
			if mode >= 0 {
				a32, b32 := any(a).([]float32), any(b).([]float32)
				_, _ = a32[ia+sa*(n8-1)], b32[ib+sb*(n8-1)]
				binAVX2(int(op-kernels.Add), mode, &d32[0], &a32[ia], &b32[ib], n8)
				if n8 == n {
					return
				}
				d, ia, ib, n = d[n8:], ia+sa*n8, ib+sb*n8, n-n8
			}
		}
	}
	if sa == 1 && sb == 1 {
		av, bv := a[ia:ia+n], b[ib:ib+n]
		switch op {
		case kernels.Add:
			for i := range d {
				d[i] = av[i] + bv[i]
			}
			return
		case kernels.Sub:
			for i := range d {
				d[i] = av[i] - bv[i]
			}
			return
		case kernels.Mul:
			for i := range d {
				d[i] = av[i] * bv[i]
			}
			return
		case kernels.Div:
			for i := range d {
				d[i] = av[i] / bv[i]
			}
			return
		}
	}
	switch op {
	case kernels.Add:
		for i := range d {
			d[i] = a[ia] + b[ib]
			ia, ib = ia+sa, ib+sb
		}
	case kernels.Sub:
		for i := range d {
			d[i] = a[ia] - b[ib]
			ia, ib = ia+sa, ib+sb
		}
	case kernels.Mul:
		for i := range d {
			d[i] = a[ia] * b[ib]
			ia, ib = ia+sa, ib+sb
		}
	case kernels.Div:
		for i := range d {
			d[i] = a[ia] / b[ib]
			ia, ib = ia+sa, ib+sb
		}
	case kernels.Pow:
		for i := range d {
			d[i] = F(math.Pow(float64(a[ia]), float64(b[ib])))
			ia, ib = ia+sa, ib+sb
		}
	case kernels.Maximum:
		for i := range d {
			x, y := a[ia], b[ib]
			switch {
			case x != x || y != y:
				d[i] = x + y // NaN propagates, as torch.maximum
			case y > x:
				d[i] = y
			default:
				d[i] = x
			}
			ia, ib = ia+sa, ib+sb
		}
	case kernels.Minimum:
		for i := range d {
			x, y := a[ia], b[ib]
			switch {
			case x != x || y != y:
				d[i] = x + y
			case y < x:
				d[i] = y
			default:
				d[i] = x
			}
			ia, ib = ia+sa, ib+sb
		}
	}
}

func compareRow[F tensor.Float](op kernels.BinaryOp, d []bool, a []F, ia, sa int, b []F, ib, sb int) {
	switch op {
	case kernels.Eq:
		for i := range d {
			d[i] = a[ia] == b[ib]
			ia, ib = ia+sa, ib+sb
		}
	case kernels.Ne:
		for i := range d {
			d[i] = a[ia] != b[ib]
			ia, ib = ia+sa, ib+sb
		}
	case kernels.Lt:
		for i := range d {
			d[i] = a[ia] < b[ib]
			ia, ib = ia+sa, ib+sb
		}
	case kernels.Le:
		for i := range d {
			d[i] = a[ia] <= b[ib]
			ia, ib = ia+sa, ib+sb
		}
	case kernels.Gt:
		for i := range d {
			d[i] = a[ia] > b[ib]
			ia, ib = ia+sa, ib+sb
		}
	case kernels.Ge:
		for i := range d {
			d[i] = a[ia] >= b[ib]
			ia, ib = ia+sa, ib+sb
		}
	}
}

// Where implements kernels.Backend.
func (be *Backend) Where(dst, cond, a, b *T) {
	const name = "Where"
	needCPU(name, dst, cond, a, b)
	must(kernels.CheckWhere(name, dst, cond, a, b))
	needContig(name, "dst", dst)
	if wide(dst, a, b) {
		be.launch(wherePrep[float64](dst, cond, a, b))
	} else {
		be.launch(wherePrep[float32](dst, cond, a, b))
	}
}

func wherePrep[F tensor.Float](dst, cond, a, b *T) func() {
	var s stage
	shape := dst.Shape()
	ao := bcastOperand[F](&s, "Where", a, shape)
	bo := bcastOperand[F](&s, "Where", b, shape)
	cst, _ := bcastStrides(cond, shape)
	c := tensor.StorageData[bool](cond.Storage())
	g := newGeom(shape, [][]int{contigStrides(shape), cst, ao.st, bo.st}, []int{0, cond.Offset(), ao.off, bo.off})
	sc, sa, sb := g.innerStride(1), g.innerStride(2), g.innerStride(3)
	d := out[F](&s, dst)
	body := func(lo, hi int) {
		for it := lo; it < hi; it++ {
			o, n := g.item(it)
			ic, ia, ib := o[1], o[2], o[3]
			dd := d[o[0] : o[0]+n]
			for i := range dd {
				if c[ic] {
					dd[i] = ao.data[ia]
				} else {
					dd[i] = bo.data[ib]
				}
				ic, ia, ib = ic+sc, ia+sa, ib+sb
			}
		}
	}
	return func() {
		s.load()
		parallelFor(g.items, min(g.inner, itemLen), body)
		s.store()
	}
}

// Clamp implements kernels.Backend. NaN stays NaN, as in torch.clamp.
func (be *Backend) Clamp(dst, x *T, lo, hi float64) {
	const name = "Clamp"
	needCPU(name, dst, x)
	must(kernels.CheckSameShape(name, "dst", dst, x.Shape()))
	if wide(dst, x) {
		be.launch(clampPrep[float64](dst, x, lo, hi))
	} else {
		be.launch(clampPrep[float32](dst, x, lo, hi))
	}
}

func clampPrep[F tensor.Float](dst, x *T, lo, hi float64) func() {
	var s stage
	xs := in[F](&s, x)
	ds := out[F](&s, dst)
	l, h := F(lo), F(hi)
	body := func(a, b int) {
		d := ds[a:b]
		for i, v := range xs[a:b] {
			if v < l {
				v = l
			}
			if v > h {
				v = h
			}
			d[i] = v
		}
	}
	n := len(xs)
	return func() {
		s.load()
		parallelFor(n, 1, body)
		s.store()
	}
}

// ScaleActAdd implements kernels.ScaleActAdder as kernels.ScaleActAddOps:
// the CPU has no launch to save.
func (be *Backend) ScaleActAdd(dst, x *T, s float64, act kernels.UnaryOp, r *T) {
	const name = "ScaleActAdd"
	needCPU(name, dst, x, r)
	if dst == nil || x == nil {
		fail(name, "dst and x are required (r may be nil)")
	}
	needShape(name, "dst", dst, x.Shape())
	if r != nil {
		needShape(name, "r", r, x.Shape())
	}
	kernels.ScaleActAddOps(be, dst, x, s, act, r)
}
