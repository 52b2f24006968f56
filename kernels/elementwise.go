package kernels

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
