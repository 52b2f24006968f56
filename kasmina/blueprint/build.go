package blueprint

import (
	"errors"
	"fmt"
	"math"

	"github.com/esper-go/esper/autograd"
	"github.com/esper-go/esper/kernels"
	"github.com/esper-go/esper/nn"
	"github.com/esper-go/esper/tensor"
)

// ErrOptions is wrapped by Build's errors about invalid Options.
var ErrOptions = errors.New("invalid blueprint options")

// ErrProbe is wrapped by Build's error when a built seed fails its probe
// forward pass: it panicked, changed the shape or dtype of its input, or
// produced non-finite values.
var ErrProbe = errors.New("seed failed its probe")

// Probe input sizes: the spatial side of the cnn probe [1, C, 3, 3] and
// the batch of the mlp probe [2, C].
//
// The reference probes at 32×32; ours is small because the probe is on
// the germination path (W3: p95 ≤ 1 ms for conv_light at 32 channels,
// four germinations at once on two cores): with the pure-Go GEMM a 32×32
// probe costs about 11 ms there, 7×7 about 0.45 ms and 3×3 under 0.1 ms.
// The shape check does not need more: 3 is larger than a 3×3 kernel's
// reach and odd, so a seed that preserves only even sizes (pool then
// upsample) fails, as it would at the 7×7 slots of a 28×28 host. Shape
// preservation of the built-in catalog at 8, 16 and 32 px is covered by
// the package tests.
const (
	probeSide     = 3
	probeMLPBatch = 2
)

// probeShape returns the probe input of topology at width c, or nil for a
// topology without a known activation layout.
func probeShape(topology string, c int) []int {
	switch topology {
	case TopologyCNN:
		return []int{1, c, probeSide, probeSide}
	case TopologyMLP:
		return []int{probeMLPBatch, c}
	}
	return nil
}

// validate checks opts and fills its defaults.
func (o Options) validate(key string) (Options, error) {
	if o.DType == tensor.Invalid {
		o.DType = tensor.F32
	}
	switch {
	case o.Channels <= 0:
		return o, fmt.Errorf("blueprint: Build %s: %w: Channels must be positive, got %d", key, ErrOptions, o.Channels)
	case o.RNG == nil:
		return o, fmt.Errorf("blueprint: Build %s: %w: RNG is required (pass tensor.NewRNG(seed))", key, ErrOptions)
	case !o.DType.IsFloat():
		return o, fmt.Errorf("blueprint: Build %s: %w: DType %v is not a floating-point type", key, ErrOptions, o.DType)
	}
	return o, nil
}

// Build returns a new seed of blueprint topology:name for opts. It
// validates opts, builds the module, zeroes its final affine layer when
// opts.ZeroFinal is set (modules implementing FinalZeroer), and probes it:
// one forward pass in evaluation mode, recording no graph, over a random
// input ([1, C, 7, 7] for cnn, [2, C] for mlp) whose output must have
// the input's shape, be finite, and keep the input's dtype (or be BF16 or
// F16, which autocast may produce). The module is returned in
// training mode with its parameters requiring gradients.
//
// Build may run from several goroutines at once, but not while a graph
// capture is in progress on the CPU backend (the probe's kernels would be
// recorded into it); it reports that as an error.
func Build(topology, name string, opts Options) (nn.Module, error) {
	key := topology + ":" + name
	opts, err := opts.validate(key)
	if err != nil {
		return nil, err
	}
	spec, err := Lookup(topology, name)
	if err != nil {
		return nil, err
	}
	m, err := spec.New(opts)
	if err != nil {
		return nil, fmt.Errorf("blueprint: Build %s: %w", key, err)
	}
	if m == nil {
		return nil, fmt.Errorf("blueprint: Build %s: factory returned a nil module", key)
	}
	if z, ok := m.(FinalZeroer); ok && opts.ZeroFinal {
		z.ZeroFinal()
	}
	if err := probe(key, m, opts.DType, probeShape(topology, opts.Channels)); err != nil {
		return nil, err
	}
	return m, nil
}

// MustBuild is Build that panics on error, for tests and examples.
func MustBuild(topology, name string, opts Options) nn.Module {
	m, err := Build(topology, name, opts)
	if err != nil {
		panic(err)
	}
	return m
}

// probeInputSeed seeds the probe input: the probe does not draw from the
// caller's RNG, so probing never changes what a later Build initialises.
const probeInputSeed = 0x5eed

// probe runs m once over a random input of shape in evaluation mode and
// checks the output.
//
// It records no graph by clearing requires-grad on m's (still private)
// parameters for the pass rather than with autograd.NoGrad: grad mode is
// process-wide, and a germination running beside a training step would
// otherwise switch off that step's graph recording.
func probe(key string, m nn.Module, dt tensor.DType, shape []int) (err error) {
	if kernels.For(tensor.CPU).Capturing() {
		return fmt.Errorf("blueprint: Build %s: a graph capture is in progress; build seeds outside captured regions", key)
	}
	if shape == nil {
		return fmt.Errorf("blueprint: Build %s: %w: no probe shape for its topology", key, ErrProbe)
	}
	training := m.Training()
	params := m.Parameters()
	requires := make([]bool, len(params))
	for i, p := range params {
		requires[i] = p.RequiresGrad()
		if p.IsLeaf() {
			p.SetRequiresGrad(false)
		}
	}
	m.SetTraining(false)
	defer func() {
		m.SetTraining(training)
		for i, p := range params {
			if p.IsLeaf() {
				p.SetRequiresGrad(requires[i])
			}
		}
		if r := recover(); r != nil {
			err = fmt.Errorf("blueprint: Build %s: %w: forward of input %v panicked: %v", key, ErrProbe, shape, r)
		}
	}()

	x := tensor.Uniform(tensor.NewRNG(probeInputSeed), dt, -1, 1, shape...)
	y := m.Forward(autograd.Const(x))
	if y == nil {
		return fmt.Errorf("blueprint: Build %s: %w: forward of input %v returned nil", key, ErrProbe, shape)
	}
	if !tensor.SameShape(y.Shape(), shape) {
		return fmt.Errorf("blueprint: Build %s: %w: input shape %v, output shape %v (seeds must preserve shape)", key, ErrProbe, shape, y.Shape())
	}
	// Autocast is process-wide: a training goroutine in an autocast region
	// makes the probe's convolutions and matmuls return BF16 or F16.
	if y.DType() != dt && !y.DType().IsHalf() {
		return fmt.Errorf("blueprint: Build %s: %w: input dtype %v, output dtype %v", key, ErrProbe, dt, y.DType())
	}
	if i, ok := firstNonFinite(y.Value); !ok {
		return fmt.Errorf("blueprint: Build %s: %w: output element %d is not finite", key, ErrProbe, i)
	}
	return nil
}

// firstNonFinite reports whether every element of t is finite and, if
// not, the index of the first that is not.
func firstNonFinite(t *tensor.Tensor) (int, bool) {
	t = t.Contiguous()
	switch t.DType() {
	case tensor.F32:
		for i, v := range t.F32() {
			if f := float64(v); math.IsNaN(f) || math.IsInf(f, 0) {
				return i, false
			}
		}
	case tensor.F64:
		for i, v := range t.F64() {
			if math.IsNaN(v) || math.IsInf(v, 0) {
				return i, false
			}
		}
	default:
		for i, v := range t.Float64s() {
			if math.IsNaN(v) || math.IsInf(v, 0) {
				return i, false
			}
		}
	}
	return 0, true
}
