package optim

import (
	"errors"
	"fmt"

	"github.com/esper-go/esper/autograd"
	"github.com/esper-go/esper/kernels"
	"github.com/esper-go/esper/tensor"
)

// ErrOptions is wrapped by every error an optimizer, scaler or schedule
// constructor returns for bad options.
var ErrOptions = errors.New("optim: invalid options")

// DefaultSGDLR is the learning rate SGDOptions.LR = 0 selects (PyTorch's
// default since 2.2). It is the optimizer's generic default, not a
// host's: tolaria trains hosts at leyline.DefaultHostLR unless told
// otherwise, and always passes its rate.
const DefaultSGDLR = 1e-3

// SGDOptions configure SGD. The zero value is plain SGD with learning rate
// DefaultSGDLR. The update follows torch.optim.SGD:
//
//	g = ±grad + WeightDecay·p                  (− when Maximize)
//	buf = g on the first step, else Momentum·buf + (1−Dampening)·g
//	g = g + Momentum·buf if Nesterov, else buf  (only when Momentum > 0)
//	p = p − LR·g
type SGDOptions struct {
	// LR is the initial learning rate; 0 means DefaultSGDLR. Schedules
	// change it later with SetLR.
	LR float64
	// Momentum factor, ≥ 0; 0 (the default) disables momentum and its
	// buffer.
	Momentum float64
	// Dampening of the momentum update, ≥ 0 (default 0).
	Dampening float64
	// WeightDecay is the L2 penalty added to the gradient, ≥ 0 (default
	// 0). It applies to every parameter in the arena, biases included.
	WeightDecay float64
	// Nesterov enables Nesterov momentum; it needs Momentum > 0 and
	// Dampening = 0.
	Nesterov bool
	// Maximize ascends the objective instead of descending it.
	Maximize bool
}

func (o SGDOptions) withDefaults() (SGDOptions, error) {
	if o.LR == 0 {
		o.LR = DefaultSGDLR
	}
	for _, f := range []struct {
		name string
		v    float64
	}{{"LR", o.LR}, {"Momentum", o.Momentum}, {"Dampening", o.Dampening}, {"WeightDecay", o.WeightDecay}} {
		if err := checkFinite(f.name, f.v); err != nil {
			return o, fmt.Errorf("%w: SGD %v", ErrOptions, err)
		}
		if f.v < 0 {
			return o, fmt.Errorf("%w: SGD %s = %v must not be negative", ErrOptions, f.name, f.v)
		}
	}
	if o.Nesterov && (o.Momentum <= 0 || o.Dampening != 0) {
		return o, fmt.Errorf("%w: SGD Nesterov needs Momentum > 0 and Dampening = 0 (got %v, %v)", ErrOptions, o.Momentum, o.Dampening)
	}
	return o, nil
}

// SGD is stochastic gradient descent with optional momentum, dampening,
// Nesterov momentum, weight decay and maximisation, applied to the whole
// arena with one kernel launch per dtype (one Increment of the step
// counter plus one SGDStep per bucket). The momentum buffer is kept in
// F32 (F64 for F64 parameters).
type SGD struct {
	opts  SGDOptions
	kopts kernels.SGDOptions
	arena *Arena
	be    kernels.Backend
	hyp   *hyper
	state *flatState // nil without momentum
}

var _ Optimizer = (*SGD)(nil)

// keyMomentum is the state-dict name of the momentum buffers
// ("momentum_buffer.f32" for the F32 bucket).
const keyMomentum = "momentum_buffer"

// NewSGD builds an Arena over params (repointing their Value and Grad, see
// NewArena) and an SGD over it.
func NewSGD(params []*autograd.Var, o SGDOptions) (*SGD, error) {
	if _, err := o.withDefaults(); err != nil {
		return nil, err
	}
	a, err := NewArena(params)
	if err != nil {
		return nil, err
	}
	return NewSGDOnArena(a, o)
}

// NewSGDOnArena builds an SGD over an existing arena, for callers that
// build the arena themselves (to share it with a gradient hook or a
// clipper before choosing the optimizer).
func NewSGDOnArena(a *Arena, o SGDOptions) (*SGD, error) {
	o, err := o.withDefaults()
	if err != nil {
		return nil, err
	}
	if a == nil {
		return nil, fmt.Errorf("%w: SGD on a nil arena", ErrOptions)
	}
	if err := checkStepDTypes("SGD", a); err != nil {
		return nil, err
	}
	s := &SGD{
		opts:  o,
		kopts: kernels.SGDOptions{Momentum: o.Momentum, Dampening: o.Dampening, WeightDecay: o.WeightDecay, Nesterov: o.Nesterov, Maximize: o.Maximize},
		arena: a,
		be:    kernels.For(a.Device()),
		hyp:   newHyper(a.Device(), o.LR),
	}
	if o.Momentum > 0 {
		s.state = newFlatState(a, keyMomentum)
	}
	return s, nil
}

// Options returns the options in effect (defaults filled in).
func (s *SGD) Options() SGDOptions { return s.opts }

// Arena implements Optimizer.
func (s *SGD) Arena() *Arena { return s.arena }

// Step implements Optimizer.
func (s *SGD) Step() { s.StepSkipIf(nil) }

// StepSkipIf implements Optimizer.
func (s *SGD) StepSkipIf(foundInf *tensor.Tensor) { s.step(foundInf, s.kopts) }

// StepZeroGrad is StepSkipIf that leaves the gradients zeroed, the
// update skipped or not (kernels.SGDOptions.ZeroGrad: in the step's own
// launch on CUDA). A training loop that reads no gradient between two
// steps can call it instead of StepSkipIf and leave out the next step's
// ZeroGrad, one launch a step.
func (s *SGD) StepZeroGrad(foundInf *tensor.Tensor) {
	o := s.kopts
	o.ZeroGrad = true
	s.step(foundInf, o)
}

// step is StepSkipIf with the kernels' options o.
func (s *SGD) step(foundInf *tensor.Tensor, o kernels.SGDOptions) {
	s.arena.mustVerify()
	if s.state != nil {
		s.state.sync()
	}
	// A backend with kernels.SGDIncrementer counts the step in the first
	// bucket's launch (one launch fewer per step on CUDA).
	inc, fused := s.be.(kernels.SGDIncrementer)
	if !fused || len(s.arena.buckets) == 0 {
		s.be.Increment(s.hyp.counter, foundInf)
	}
	for bi, b := range s.arena.buckets {
		var mom *tensor.Tensor
		if s.state != nil {
			mom = s.state.buf(bi, 0)
		}
		if fused && bi == 0 {
			inc.IncrementSGDStep(b.flat, b.grad, mom, s.hyp.t, foundInf, o)
			continue
		}
		s.be.SGDStep(b.flat, b.grad, mom, s.hyp.t, foundInf, o)
	}
}

// ZeroGrad implements Optimizer.
func (s *SGD) ZeroGrad() { s.arena.ZeroGrad() }

// SetLR implements Optimizer. It panics on a negative or non-finite rate.
func (s *SGD) SetLR(lr float64) { s.hyp.setLR(lr) }

// LR implements Optimizer.
func (s *SGD) LR() float64 { return s.hyp.lr }

// StepCount reads the number of steps taken (skipped steps do not count)
// back from the device.
func (s *SGD) StepCount() int { return s.hyp.steps() }

// StateDict implements Optimizer: "lr" and "step" (F64 scalars) and, with
// momentum, "momentum_buffer.<dtype>" per bucket (flat, in arena order).
func (s *SGD) StateDict() map[string]*tensor.Tensor {
	sd := map[string]*tensor.Tensor{}
	s.hyp.stateDict(sd)
	if s.state != nil {
		s.state.stateDict(sd)
	}
	return sd
}

// LoadStateDict implements Optimizer.
func (s *SGD) LoadStateDict(sd map[string]*tensor.Tensor) error {
	lr, step, err := s.hyp.checkStateDict(sd)
	if err != nil {
		return err
	}
	if s.state != nil {
		bufs, err := s.state.check(sd)
		if err != nil {
			return err
		}
		s.state.load(bufs)
	}
	s.hyp.load(lr, step)
	return nil
}

// ResetState implements Optimizer: step 0 and a zero momentum buffer (the
// next step re-initialises it from the gradient). The learning rate is
// kept.
func (s *SGD) ResetState() {
	s.hyp.resetStep()
	if s.state != nil {
		s.state.sync()
		s.state.reset()
	}
}
