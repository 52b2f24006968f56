package kernels

import (
	"fmt"

	"github.com/esper-go/esper/tensor"
)

// ElementwiseFamily is the elementwise op family: fills, copies and
// casts, unary and binary maps, selection and clamping.
type ElementwiseFamily interface {
	// Fill sets every element of dst (contiguous) to v.
	Fill(dst *T, v float64)
	// Copy copies src into dst element by element in row-major order,
	// converting the dtype (float→int truncates, BF16 rounds to nearest
	// even). Both may be arbitrary strided views with equal element
	// counts; dst must not overlap src.
	Copy(dst, src *T)
	// Unary computes dst = op(x). Same shape; dst may alias x.
	Unary(op UnaryOp, dst, x *T)
	// UnaryBackward computes dx = dy * op'(x) for differentiable unary
	// ops (every op except Sign, whose derivative is zero). y = op(x) is
	// passed too so ops like Exp, Sigmoid and Tanh can reuse it; it may
	// be nil for ops that do not need it.
	UnaryBackward(op UnaryOp, dx, x, y, dy *T)
	// Binary computes dst = a op b with NumPy broadcasting: a and b may
	// be any views (Expand'ed views included) whose shapes broadcast to
	// dst's shape. Comparisons need a Bool dst.
	Binary(op BinaryOp, dst, a, b *T)
	// BinaryScalar computes dst = a op s, or s op a when swap is set.
	BinaryScalar(op BinaryOp, dst, a *T, s float64, swap bool)
	// Where computes dst = cond ? a : b with broadcasting (cond Bool).
	Where(dst, cond, a, b *T)
	// Clamp computes dst = min(max(x, lo), hi).
	Clamp(dst, x *T, lo, hi float64)
}

// ChannelAxpyer is implemented by backends that fuse a residual branch's
// output scale into the residual addition: ChannelAxpy sets
// dst = x + s⊙y for x, y and dst of one shape [N, C, ...] and s of C
// elements (one per channel, axis 1) or of one, and ChannelAxpyBackward
// computes from the output gradient g the gradients dy = s⊙g and
// ds[c] = Σ g⊙y over channel c (either may be nil). All contiguous, F32
// or F64 alike. It is an optional capability (check with a type
// assertion); autograd.ChannelAxpy uses it for the seeds' x + g⊙branch
// and autograd.StraightThrough for the blend at α = 0.
type ChannelAxpyer interface {
	ChannelAxpy(dst, x, y, s *T)
	ChannelAxpyBackward(dy, ds, g, y, s *T)
}

// ScaleActAdder is an optional Backend interface: a layer's activation
// over a scaled sum and its residual, dst = act(s·x) + r elementwise, in
// one launch where the backend can (CUDA, F32). Its results are those of
// ScaleActAddOps: BinaryScalar Mul by s (none when s is 1), Unary act
// and Binary Add of r (none when r is nil), which is what the CPU runs.
// x, r and dst are contiguous, of one shape and dtype.
type ScaleActAdder interface {
	ScaleActAdd(dst, x *T, s float64, act UnaryOp, r *T)
}

// ScaleActAddOps runs on be what a ScaleActAdd stands for, in place in
// dst: BinaryScalar Mul of x by s unless s is 1, Unary act, and Binary
// Add of r unless r is nil.
func ScaleActAddOps(be Backend, dst, x *T, s float64, act UnaryOp, r *T) {
	src := x
	if s != 1 {
		be.BinaryScalar(Mul, dst, x, s, false)
		src = dst
	}
	be.Unary(act, dst, src)
	if r != nil {
		be.Binary(Add, dst, dst, r)
	}
}

// UnaryOp selects an elementwise function of one tensor.
type UnaryOp uint8

// Unary ops. The activations have derivatives in UnaryBackward.
const (
	Neg UnaryOp = iota
	Abs
	Exp
	Log
	Sqrt
	Rsqrt
	Square
	Recip
	Sign
	Relu
	GeluTanh // 0.5x(1+tanh(√(2/π)(x+0.044715x³)))
	GeluErf  // 0.5x(1+erf(x/√2))
	Silu
	Sigmoid
	Tanh
	Softplus // log(1+eˣ), linear above 20 like PyTorch
	numUnary
)

var unaryNames = [...]string{"neg", "abs", "exp", "log", "sqrt", "rsqrt", "square", "recip", "sign", "relu", "gelu_tanh", "gelu_erf", "silu", "sigmoid", "tanh", "softplus"}

func (o UnaryOp) String() string {
	if o < numUnary {
		return unaryNames[o]
	}
	return "unary?"
}

// UnaryOps lists every UnaryOp, for table-driven tests.
func UnaryOps() []UnaryOp {
	out := make([]UnaryOp, numUnary)
	for i := range out {
		out[i] = UnaryOp(i)
	}
	return out
}

// BinaryOp selects an elementwise function of two tensors.
type BinaryOp uint8

// Binary ops. The comparisons write a Bool tensor.
const (
	Add BinaryOp = iota
	Sub
	Mul
	Div
	Pow
	Maximum
	Minimum
	Eq
	Ne
	Lt
	Le
	Gt
	Ge
	numBinary
)

var binaryNames = [...]string{"add", "sub", "mul", "div", "pow", "maximum", "minimum", "eq", "ne", "lt", "le", "gt", "ge"}

func (o BinaryOp) String() string {
	if o < numBinary {
		return binaryNames[o]
	}
	return "binary?"
}

// IsComparison reports whether the op yields Bool.
func (o BinaryOp) IsComparison() bool { return o >= Eq && o < numBinary }

// BinaryOps lists every BinaryOp, for table-driven tests.
func BinaryOps() []BinaryOp {
	out := make([]BinaryOp, numBinary)
	for i := range out {
		out[i] = BinaryOp(i)
	}
	return out
}

// UsesOutput reports whether op's derivative can be computed from its
// output y = op(x) alone, so that UnaryBackward may be given y without x:
// Exp, Sqrt, Rsqrt, Recip, Sigmoid and Tanh.
func (o UnaryOp) UsesOutput() bool {
	return o == Exp || o == Sigmoid || o == Tanh || o == Sqrt || o == Rsqrt || o == Recip
}

// CheckUnary checks a Unary (or Clamp, with any op that exists): dst of
// x's shape and a known op.
func CheckUnary(name string, op UnaryOp, dst, x *T) error {
	if !tensor.SameShape(dst.Shape(), x.Shape()) {
		return fmt.Errorf("%s: dst shape %v and x shape %v differ", name, dst.Shape(), x.Shape())
	}
	if op >= numUnary {
		return fmt.Errorf("%s: unknown op %d", name, op)
	}
	return nil
}

// CheckUnaryBackward checks an UnaryBackward: a known op; x given, or y
// for an op that UsesOutput; every given one of x, y and dy of dx's
// shape. useY reports whether the kernel should read y (given, and of
// use to op).
func CheckUnaryBackward(name string, op UnaryOp, dx, x, y, dy *T) (useY bool, err error) {
	if op >= numUnary {
		return false, fmt.Errorf("%s: unknown op %d", name, op)
	}
	if x == nil && y == nil {
		return false, fmt.Errorf("%s: x and y are both nil (dx shape %v)", name, dx.Shape())
	}
	useY = y != nil && op.UsesOutput()
	if x == nil && !useY {
		return false, fmt.Errorf("%s: op needs x (dx shape %v)", name, dx.Shape())
	}
	for _, t := range [...]*T{x, y, dy} {
		if t != nil && !tensor.SameShape(t.Shape(), dx.Shape()) {
			return false, fmt.Errorf("%s: shapes differ: dx %v, x %v, y %v, dy %v", name, dx.Shape(), shapeOf(x), shapeOf(y), shapeOf(dy))
		}
	}
	if dy == nil {
		return false, fmt.Errorf("%s: dy is nil (dx shape %v)", name, dx.Shape())
	}
	return useY, nil
}

// shapeOf is t's shape, nil for a nil t (for messages).
func shapeOf(t *T) []int {
	if t == nil {
		return nil
	}
	return t.Shape()
}

// CheckBinary checks a Binary (b non-nil) or a BinaryScalar (b nil): a
// known op, operands that broadcast to dst's shape, and a Bool dst for
// the comparisons only.
func CheckBinary(name string, op BinaryOp, dst, a, b *T) error {
	// The usual case, operands of dst's shape, first: the small eager
	// ops of W1 pay for every test here.
	ds := dst.Shape()
	if op < numBinary && op.IsComparison() == (dst.DType() == tensor.Bool) &&
		(tensor.SameShape(a.Shape(), ds) || Broadcasts(a.Shape(), ds)) &&
		(b == nil || tensor.SameShape(b.Shape(), ds) || Broadcasts(b.Shape(), ds)) {
		return nil
	}
	return binaryError(name, op, dst, a, b)
}

// binaryError is the error of a CheckBinary that failed.
func binaryError(name string, op BinaryOp, dst, a, b *T) error {
	var err error
	if b != nil {
		err = CheckBroadcast(name, dst, a, b)
	} else {
		err = CheckBroadcast(name, dst, a)
	}
	if err != nil {
		return err
	}
	if op >= numBinary {
		return fmt.Errorf("%s: unknown op %d", name, op)
	}
	if op.IsComparison() != (dst.DType() == tensor.Bool) {
		return fmt.Errorf("%s: dst (shape %v) has dtype %v; comparisons write bool, arithmetic does not", name, dst.Shape(), dst.DType())
	}
	return nil
}

// CheckWhere checks a Where: cond, a and b broadcast to dst's shape and
// cond is Bool.
func CheckWhere(name string, dst, cond, a, b *T) error {
	if err := CheckBroadcast(name, dst, cond, a, b); err != nil {
		return err
	}
	if cond.DType() != tensor.Bool {
		return fmt.Errorf("%s: cond (shape %v) has dtype %v, want bool", name, cond.Shape(), cond.DType())
	}
	return nil
}
