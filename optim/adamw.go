package optim

import (
	"fmt"

	"github.com/esper-go/esper/autograd"
	"github.com/esper-go/esper/kernels"
	"github.com/esper-go/esper/tensor"
)

// AdamW defaults, as in torch.optim.AdamW.
const (
	DefaultAdamWLR          = 1e-3
	DefaultAdamWBeta1       = 0.9
	DefaultAdamWBeta2       = 0.999
	DefaultAdamWEps         = 1e-8
	DefaultAdamWWeightDecay = 0.01
)

// AdamWOptions configure AdamW; zero values select PyTorch's defaults. The
// update follows torch.optim.AdamW (t counts steps from 1):
//
//	p = p·(1 − LR·WeightDecay)
//	m = Beta1·m + (1−Beta1)·g
//	v = Beta2·v + (1−Beta2)·g²
//	p = p − LR/(1−Beta1^t) · m / (sqrt(v)/sqrt(1−Beta2^t) + Eps)
type AdamWOptions struct {
	// LR is the initial learning rate; 0 means DefaultAdamWLR.
	LR float64
	// Beta1 and Beta2 are the moment decay rates in [0, 1); 0 means
	// DefaultAdamWBeta1 / DefaultAdamWBeta2.
	Beta1, Beta2 float64
	// Eps is added to the denominator, > 0; 0 means DefaultAdamWEps.
	Eps float64
	// WeightDecay is the decoupled weight decay, ≥ 0; 0 means
	// DefaultAdamWWeightDecay. Set NoWeightDecay for none.
	WeightDecay float64
	// NoWeightDecay disables weight decay (WeightDecay must then be 0).
	NoWeightDecay bool
}

func (o AdamWOptions) withDefaults() (AdamWOptions, error) {
	if o.LR == 0 {
		o.LR = DefaultAdamWLR
	}
	if o.Beta1 == 0 {
		o.Beta1 = DefaultAdamWBeta1
	}
	if o.Beta2 == 0 {
		o.Beta2 = DefaultAdamWBeta2
	}
	if o.Eps == 0 {
		o.Eps = DefaultAdamWEps
	}
	if o.NoWeightDecay {
		if o.WeightDecay != 0 {
			return o, fmt.Errorf("%w: AdamW NoWeightDecay with WeightDecay = %v", ErrOptions, o.WeightDecay)
		}
	} else if o.WeightDecay == 0 {
		o.WeightDecay = DefaultAdamWWeightDecay
	}
	for _, f := range []struct {
		name string
		v    float64
	}{{"LR", o.LR}, {"Beta1", o.Beta1}, {"Beta2", o.Beta2}, {"Eps", o.Eps}, {"WeightDecay", o.WeightDecay}} {
		if err := checkFinite(f.name, f.v); err != nil {
			return o, fmt.Errorf("%w: AdamW %v", ErrOptions, err)
		}
		if f.v < 0 {
			return o, fmt.Errorf("%w: AdamW %s = %v must not be negative", ErrOptions, f.name, f.v)
		}
	}
	if o.Beta1 >= 1 || o.Beta2 >= 1 {
		return o, fmt.Errorf("%w: AdamW betas (%v, %v) must lie in [0, 1)", ErrOptions, o.Beta1, o.Beta2)
	}
	return o, nil
}

// AdamW is the fused AdamW optimizer over an arena: one Increment of the
// step counter plus one AdamWStep launch per dtype. The bias corrections
// are computed by the kernel from the device-resident step counter, so a
// captured step stays correct under replay. The moments are kept in F32
// (F64 for F64 parameters), whatever the parameter dtype.
type AdamW struct {
	opts  AdamWOptions
	kopts kernels.AdamWOptions
	arena *Arena
	be    kernels.Backend
	hyp   *hyper
	state *flatState // names: exp_avg, exp_avg_sq
}

var _ Optimizer = (*AdamW)(nil)

// State-dict names of the AdamW moments, as in PyTorch.
const (
	keyExpAvg   = "exp_avg"
	keyExpAvgSq = "exp_avg_sq"
)

// NewAdamW builds an Arena over params (repointing their Value and Grad,
// see NewArena) and an AdamW over it.
func NewAdamW(params []*autograd.Var, o AdamWOptions) (*AdamW, error) {
	if _, err := o.withDefaults(); err != nil {
		return nil, err
	}
	a, err := NewArena(params)
	if err != nil {
		return nil, err
	}
	return NewAdamWOnArena(a, o)
}

// NewAdamWOnArena builds an AdamW over an existing arena.
func NewAdamWOnArena(a *Arena, o AdamWOptions) (*AdamW, error) {
	o, err := o.withDefaults()
	if err != nil {
		return nil, err
	}
	if a == nil {
		return nil, fmt.Errorf("%w: AdamW on a nil arena", ErrOptions)
	}
	if err := checkStepDTypes("AdamW", a); err != nil {
		return nil, err
	}
	return &AdamW{
		opts:  o,
		kopts: kernels.AdamWOptions{Beta1: o.Beta1, Beta2: o.Beta2, Eps: o.Eps, WeightDecay: o.WeightDecay},
		arena: a,
		be:    kernels.For(a.Device()),
		hyp:   newHyper(a.Device(), o.LR),
		state: newFlatState(a, keyExpAvg, keyExpAvgSq),
	}, nil
}

// Options returns the options in effect (defaults filled in).
func (o *AdamW) Options() AdamWOptions { return o.opts }

// Arena implements Optimizer.
func (o *AdamW) Arena() *Arena { return o.arena }

// Step implements Optimizer.
func (o *AdamW) Step() { o.StepSkipIf(nil) }

// StepSkipIf implements Optimizer.
func (o *AdamW) StepSkipIf(foundInf *tensor.Tensor) {
	o.arena.mustVerify()
	o.state.sync()
	o.be.Increment(o.hyp.counter, foundInf)
	for bi, b := range o.arena.buckets {
		o.be.AdamWStep(b.flat, b.grad, o.state.buf(bi, 0), o.state.buf(bi, 1), o.hyp.t, foundInf, o.kopts)
	}
}

// ZeroGrad implements Optimizer.
func (o *AdamW) ZeroGrad() { o.arena.ZeroGrad() }

// SetLR implements Optimizer. It panics on a negative or non-finite rate.
func (o *AdamW) SetLR(lr float64) { o.hyp.setLR(lr) }

// LR implements Optimizer.
func (o *AdamW) LR() float64 { return o.hyp.lr }

// StepCount reads the number of steps taken (skipped steps do not count)
// back from the device.
func (o *AdamW) StepCount() int { return o.hyp.steps() }

// StateDict implements Optimizer: "lr" and "step" (F64 scalars) and
// "exp_avg.<dtype>", "exp_avg_sq.<dtype>" per bucket (flat, in arena
// order).
func (o *AdamW) StateDict() map[string]*tensor.Tensor {
	sd := map[string]*tensor.Tensor{}
	o.hyp.stateDict(sd)
	o.state.stateDict(sd)
	return sd
}

// LoadStateDict implements Optimizer.
func (o *AdamW) LoadStateDict(sd map[string]*tensor.Tensor) error {
	lr, step, err := o.hyp.checkStateDict(sd)
	if err != nil {
		return err
	}
	bufs, err := o.state.check(sd)
	if err != nil {
		return err
	}
	o.state.load(bufs)
	o.hyp.load(lr, step)
	return nil
}

// ResetState implements Optimizer: step 0 and zero moments. The learning
// rate is kept.
func (o *AdamW) ResetState() {
	o.hyp.resetStep()
	o.state.sync()
	o.state.reset()
}
