package nn

import (
	"fmt"
	"math"
	mbits "math/bits"
	"math/rand/v2"

	"github.com/esper-go/esper/kernels"
	"github.com/esper-go/esper/tensor"
)

// Initialisation schemes. Each overwrites a tensor of any float dtype
// (views included) in place, drawing values in row-major order from an
// explicit random source, so a seed fixes the result. They mirror
// torch.nn.init; a tensor of the wrong rank is a programming error and
// panics. The values are drawn on the host; a tensor on a device gets
// them through one explicit host-to-device copy, bitwise the values a
// CPU tensor of the same dtype, shape and layout gets.

// Nonlinearity selects the gain of the Kaiming schemes (torch.nn.init's
// calculate_gain). The zero value is NonlinearityLeakyReLU, PyTorch's
// default for kaiming_*; with A = 0 it equals ReLU's gain √2.
type Nonlinearity uint8

// Nonlinearities with their gains.
const (
	NonlinearityLeakyReLU Nonlinearity = iota // √(2/(1+a²))
	NonlinearityReLU                          // √2
	NonlinearityLinear                        // 1 (also conv and identity)
	NonlinearitySigmoid                       // 1
	NonlinearityTanh                          // 5/3
)

// Gain returns the recommended scale for weights feeding nonlinearity n;
// a is the negative slope of a leaky ReLU and ignored otherwise.
func Gain(n Nonlinearity, a float64) float64 {
	switch n {
	case NonlinearityLeakyReLU:
		return math.Sqrt(2 / (1 + a*a))
	case NonlinearityReLU:
		return math.Sqrt2
	case NonlinearityLinear, NonlinearitySigmoid:
		return 1
	case NonlinearityTanh:
		return 5.0 / 3
	}
	panic(fmt.Sprintf("nn: Gain of unknown nonlinearity %d", n))
}

// FanMode selects which fan the Kaiming schemes preserve the variance of.
type FanMode uint8

// Fan modes. FanIn (the zero value, PyTorch's default) preserves the
// variance of activations in the forward pass; FanOut that of gradients in
// the backward pass.
const (
	FanIn FanMode = iota
	FanOut
)

// KaimingOptions configure KaimingUniform and KaimingNormal. The zero
// value is PyTorch's default: fan_in, leaky_relu with a = 0 (gain √2).
type KaimingOptions struct {
	// A is the negative slope of the leaky ReLU (NonlinearityLeakyReLU
	// only). PyTorch's Linear and Conv2d use A = √5.
	A            float64
	Mode         FanMode
	Nonlinearity Nonlinearity
}

// Fans returns the fan-in and fan-out of a weight shape: [out, in] for a
// linear layer, [out, in/groups, kh, kw, ...] for a convolution (the
// receptive field multiplies both). It panics on fewer than two axes.
func Fans(shape []int) (fanIn, fanOut int) {
	if len(shape) < 2 {
		panic(fmt.Sprintf("nn: fan in and fan out need at least 2 dimensions, got shape %v", shape))
	}
	receptive := 1
	for _, d := range shape[2:] {
		receptive *= d
	}
	return shape[1] * receptive, shape[0] * receptive
}

// kaimingStd is gain/√fan.
func kaimingStd(t *tensor.Tensor, o KaimingOptions) float64 {
	fanIn, fanOut := Fans(t.Shape())
	fan := fanIn
	if o.Mode == FanOut {
		fan = fanOut
	}
	if fan == 0 {
		panic(fmt.Sprintf("nn: Kaiming init of a tensor with zero fan, shape %v", t.Shape()))
	}
	return Gain(o.Nonlinearity, o.A) / math.Sqrt(float64(fan))
}

// KaimingUniform fills t from U(−b, b) with b = gain·√(3/fan) (He et al.,
// 2015), torch.nn.init.kaiming_uniform_.
func KaimingUniform(rng *rand.Rand, t *tensor.Tensor, o KaimingOptions) {
	b := math.Sqrt(3) * kaimingStd(t, o)
	Uniform(rng, t, -b, b)
}

// KaimingNormal fills t from N(0, gain²/fan), torch.nn.init.kaiming_normal_.
func KaimingNormal(rng *rand.Rand, t *tensor.Tensor, o KaimingOptions) {
	Normal(rng, t, 0, kaimingStd(t, o))
}

// xavierStd is gain·√(2/(fan_in+fan_out)).
func xavierStd(t *tensor.Tensor, gain float64) float64 {
	fanIn, fanOut := Fans(t.Shape())
	if fanIn+fanOut == 0 {
		panic(fmt.Sprintf("nn: Xavier init of a tensor with zero fans, shape %v", t.Shape()))
	}
	return gain * math.Sqrt(2/float64(fanIn+fanOut))
}

// XavierUniform fills t from U(−b, b) with b = gain·√(6/(fan_in+fan_out))
// (Glorot and Bengio, 2010), torch.nn.init.xavier_uniform_. Pass gain 1
// for PyTorch's default.
func XavierUniform(rng *rand.Rand, t *tensor.Tensor, gain float64) {
	b := math.Sqrt(3) * xavierStd(t, gain)
	Uniform(rng, t, -b, b)
}

// XavierNormal fills t from N(0, gain²·2/(fan_in+fan_out)),
// torch.nn.init.xavier_normal_.
func XavierNormal(rng *rand.Rand, t *tensor.Tensor, gain float64) {
	Normal(rng, t, 0, xavierStd(t, gain))
}

// Orthogonal fills t, viewed as a matrix [shape[0], numel/shape[0]], with a
// (semi-)orthogonal matrix scaled by gain (Saxe et al., 2013): the Q
// factor of the QR decomposition of a standard normal matrix with R's
// diagonal made positive, as torch.nn.init.orthogonal_ does. Rows are
// orthonormal when there are fewer rows than columns, columns otherwise.
// The factorisation is modified Gram-Schmidt with re-orthogonalisation in
// float64, which yields the same Q (Gram-Schmidt's R has a positive
// diagonal by construction).
func Orthogonal(rng *rand.Rand, t *tensor.Tensor, gain float64) {
	checkRNG(rng, "Orthogonal")
	if t.Rank() < 2 {
		panic(fmt.Sprintf("nn: Orthogonal needs at least 2 dimensions, got shape %v", t.Shape()))
	}
	rows := t.Dim(0)
	if rows == 0 || t.Numel() == 0 {
		return
	}
	cols := t.Numel() / rows
	flat := make([]float64, rows*cols)
	for i := range flat {
		flat[i] = rng.NormFloat64()
	}
	// Work on the tall orientation: n ≥ k, orthonormalise k columns of
	// length n. a(i, j) addresses the flat [rows, cols] matrix.
	n, k := rows, cols
	at := func(i, j int) *float64 { return &flat[i*cols+j] }
	if rows < cols {
		n, k = cols, rows
		at = func(i, j int) *float64 { return &flat[j*cols+i] }
	}
	for j := 0; j < k; j++ {
		for pass := 0; pass < 2; pass++ {
			for p := 0; p < j; p++ {
				var dot float64
				for i := 0; i < n; i++ {
					dot += *at(i, p) * *at(i, j)
				}
				for i := 0; i < n; i++ {
					*at(i, j) -= dot * *at(i, p)
				}
			}
		}
		var norm float64
		for i := 0; i < n; i++ {
			norm += *at(i, j) * *at(i, j)
		}
		norm = math.Sqrt(norm)
		if norm == 0 {
			panic("nn: Orthogonal drew a rank-deficient normal matrix")
		}
		for i := 0; i < n; i++ {
			*at(i, j) /= norm
		}
	}
	for i := range flat {
		flat[i] *= gain
	}
	h, done := hostTarget(t)
	store(h, flat)
	done()
}

// Uniform fills t from U(lo, hi).
func Uniform(rng *rand.Rand, t *tensor.Tensor, lo, hi float64) {
	checkRNG(rng, "Uniform")
	h, done := hostTarget(t)
	if !t.IsContiguous() || !uniformDirect(rng, h, lo, hi) {
		v := make([]float64, t.Numel())
		for i := range v {
			v[i] = lo + (hi-lo)*rng.Float64()
		}
		store(h, v)
	}
	done()
}

// Normal fills t from N(mean, std²).
func Normal(rng *rand.Rand, t *tensor.Tensor, mean, std float64) {
	checkRNG(rng, "Normal")
	h, done := hostTarget(t)
	if !t.IsContiguous() || !fillDirect(h, func() float64 { return mean + std*rng.NormFloat64() }) {
		v := make([]float64, t.Numel())
		for i := range v {
			v[i] = mean + std*rng.NormFloat64()
		}
		store(h, v)
	}
	done()
}

// Constant fills t with v (on a device, with the backend's Fill).
func Constant(t *tensor.Tensor, v float64) {
	if t.Device().IsCPU() {
		t.Fill(v)
		return
	}
	kernels.For(t.Device()).Fill(t, v)
}

// Zeros fills t with 0.
func Zeros(t *tensor.Tensor) { Constant(t, 0) }

// Ones fills t with 1.
func Ones(t *tensor.Tensor) { Constant(t, 1) }

// hostTarget returns the tensor an init scheme writes: t itself on the
// CPU; for a tensor on a device, a contiguous host tensor of its dtype and
// shape, and done copies it into t (one host-to-device copy, then the
// backend's Copy, which follows t's strides). The schemes take their fast
// path only when t is contiguous, so a device tensor gets the values a
// CPU tensor of the same layout would.
func hostTarget(t *tensor.Tensor) (h *tensor.Tensor, done func()) {
	dev := t.Device()
	if dev.IsCPU() {
		return t, func() {}
	}
	h = tensor.Empty(t.DType(), t.Shape()...)
	return h, func() {
		d, err := h.ToDevice(dev)
		if err != nil {
			panic(fmt.Sprintf("nn: init of a %v %v tensor on %v: %v", t.DType(), t.Shape(), dev, err))
		}
		kernels.For(dev).Copy(t, d)
	}
}

// uniformDirect fills a contiguous CPU F32 or F64 tensor from U(lo, hi)
// and reports whether it handled t. Parameter init is on the germination
// path (W3), where drawing every element through *rand.Rand costs more
// than building the layer, so it takes one 64-bit seed from rng and runs
// a local wyrand stream (a 64-bit counter through a 128-bit multiply
// mix): deterministic for a given rng state, and about five times
// faster. F32 elements take 24 random bits, F64 elements 53.
func uniformDirect(rng *rand.Rand, t *tensor.Tensor, lo, hi float64) bool {
	if !t.IsContiguous() || !t.Device().IsCPU() {
		return false
	}
	state := rng.Uint64()
	next := func() uint64 {
		state += 0xa0761d6478bd642f
		h, l := mbits.Mul64(state, state^0xe7037ed1a0b428db)
		return h ^ l
	}
	w := hi - lo
	switch t.DType() {
	case tensor.F32:
		d := t.F32()
		for i := range d {
			d[i] = float32(lo + w*float64(next()>>40)*(1.0/(1<<24)))
		}
	case tensor.F64:
		d := t.F64()
		for i := range d {
			d[i] = lo + w*float64(next()>>11)*(1.0/(1<<53))
		}
	default:
		return false
	}
	return true
}

// fillDirect writes next() into every element of a contiguous CPU F32 or
// F64 tensor in row-major order, the same values and order as going
// through store, without the float64 staging slice. It reports whether
// it handled t.
func fillDirect(t *tensor.Tensor, next func() float64) bool {
	if !t.IsContiguous() || !t.Device().IsCPU() {
		return false
	}
	switch t.DType() {
	case tensor.F32:
		d := t.F32()
		for i := range d {
			d[i] = float32(next())
		}
	case tensor.F64:
		d := t.F64()
		for i := range d {
			d[i] = next()
		}
	default:
		return false
	}
	return true
}

// store writes row-major values into t, converting to its dtype.
func store(t *tensor.Tensor, v []float64) {
	if !t.DType().IsFloat() {
		panic(fmt.Sprintf("nn: init of a %v tensor (want a float dtype)", t.DType()))
	}
	tensor.CopyInto(t, tensor.FromSlice(v, t.Shape()...))
}

func checkRNG(rng *rand.Rand, op string) {
	if rng == nil {
		panic("nn: " + op + " with a nil *rand.Rand (pass tensor.NewRNG(seed))")
	}
}
