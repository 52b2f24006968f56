package kernels

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

// ReduceOp selects a reduction.
type ReduceOp uint8

// Reductions.
const (
	Sum ReduceOp = iota
	Mean
	Max
	Min
	LogSumExp
	numReduce
)

var reduceNames = [...]string{"sum", "mean", "max", "min", "logsumexp"}

func (o ReduceOp) String() string {
	if o < numReduce {
		return reduceNames[o]
	}
	return "reduce?"
}

// ReduceOps lists every ReduceOp.
func ReduceOps() []ReduceOp {
	out := make([]ReduceOp, numReduce)
	for i := range out {
		out[i] = ReduceOp(i)
	}
	return out
}

// Reduction says how a loss combines per-sample values.
type Reduction uint8

// Loss reductions (zero value = mean, as in PyTorch).
const (
	ReduceMean Reduction = iota
	ReduceSum
	ReduceNone
)

// Conv2dParams configures a 2-D convolution. Zero values mean stride 1,
// padding 0, dilation 1, groups 1.
type Conv2dParams struct {
	StrideH, StrideW     int
	PadH, PadW           int
	DilationH, DilationW int
	Groups               int
}

// Norm fills defaults.
func (p Conv2dParams) Norm() Conv2dParams {
	if p.StrideH == 0 {
		p.StrideH = 1
	}
	if p.StrideW == 0 {
		p.StrideW = 1
	}
	if p.DilationH == 0 {
		p.DilationH = 1
	}
	if p.DilationW == 0 {
		p.DilationW = 1
	}
	if p.Groups == 0 {
		p.Groups = 1
	}
	return p
}

// ConvOut returns the output size of one spatial axis.
func ConvOut(in, k, stride, pad, dil int) int { return (in+2*pad-dil*(k-1)-1)/stride + 1 }

// Pool2dParams configures max/avg pooling. Zero stride means stride =
// kernel size. CountIncludePad (avg only) divides by the full window as
// PyTorch's default does.
type Pool2dParams struct {
	KernelH, KernelW int
	StrideH, StrideW int
	PadH, PadW       int
	CountIncludePad  bool
}

// Norm fills defaults.
func (p Pool2dParams) Norm() Pool2dParams {
	if p.StrideH == 0 {
		p.StrideH = p.KernelH
	}
	if p.StrideW == 0 {
		p.StrideW = p.KernelW
	}
	return p
}

// CrossEntropyParams configures softmax cross-entropy over class indices.
type CrossEntropyParams struct {
	Reduction      Reduction
	LabelSmoothing float64 // in [0, 1)
	// IgnoreIndex: targets equal to it contribute nothing (and are left
	// out of the mean). Use a negative value such as -100 (PyTorch's
	// default); HasIgnore enables it.
	IgnoreIndex int64
	HasIgnore   bool
}

// SGDOptions are the constant hyperparameters of an SGD step (the learning
// rate lives in a tensor so captured steps see schedule changes).
type SGDOptions struct {
	Momentum    float64
	Dampening   float64
	WeightDecay float64
	Nesterov    bool
	Maximize    bool
}

// AdamWOptions are the constant hyperparameters of an AdamW step.
type AdamWOptions struct {
	Beta1, Beta2 float64
	Eps          float64
	WeightDecay  float64 // decoupled: p -= lr*wd*p
}
