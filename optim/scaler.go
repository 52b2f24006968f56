package optim

import (
	"fmt"

	"github.com/esper-go/esper/autograd"
	"github.com/esper-go/esper/kernels"
	"github.com/esper-go/esper/tensor"
)

// GradScaler defaults (ARCHITECTURE.md "Precision", torch.amp.GradScaler).
const (
	DefaultInitScale      = 65536.0 // 2^16
	DefaultGrowthFactor   = 2.0
	DefaultBackoffFactor  = 0.5
	DefaultGrowthInterval = 2000
)

// GradScalerOptions configure a GradScaler; zero values select the
// defaults above.
type GradScalerOptions struct {
	// InitScale is the initial loss scale, > 0.
	InitScale float64
	// GrowthFactor (> 1) multiplies the scale after GrowthInterval
	// consecutive steps without inf/NaN gradients.
	GrowthFactor float64
	// BackoffFactor (in (0, 1)) multiplies the scale after a step with
	// inf/NaN gradients, which is skipped.
	BackoffFactor float64
	// GrowthInterval is the number of clean steps before growth, > 0.
	GrowthInterval int
	// Device holds the scaler's tensors; it must be the parameters'
	// device (the zero value is the CPU).
	Device tensor.Device
	// Disabled turns the scaler into a pass-through (for bf16 or fp32
	// runs that share the fp16 code path): Scale returns the loss,
	// Step is a plain optimizer step, Update does nothing.
	Disabled bool
}

func (o GradScalerOptions) withDefaults() (GradScalerOptions, error) {
	if o.InitScale == 0 {
		o.InitScale = DefaultInitScale
	}
	if o.GrowthFactor == 0 {
		o.GrowthFactor = DefaultGrowthFactor
	}
	if o.BackoffFactor == 0 {
		o.BackoffFactor = DefaultBackoffFactor
	}
	if o.GrowthInterval == 0 {
		o.GrowthInterval = DefaultGrowthInterval
	}
	for _, f := range []struct {
		name string
		v    float64
	}{{"InitScale", o.InitScale}, {"GrowthFactor", o.GrowthFactor}, {"BackoffFactor", o.BackoffFactor}} {
		if err := checkFinite(f.name, f.v); err != nil {
			return o, fmt.Errorf("%w: GradScaler %v", ErrOptions, err)
		}
	}
	switch {
	case o.InitScale <= 0:
		return o, fmt.Errorf("%w: GradScaler InitScale = %v must be positive", ErrOptions, o.InitScale)
	case o.GrowthFactor <= 1:
		return o, fmt.Errorf("%w: GradScaler GrowthFactor = %v must exceed 1", ErrOptions, o.GrowthFactor)
	case o.BackoffFactor <= 0 || o.BackoffFactor >= 1:
		return o, fmt.Errorf("%w: GradScaler BackoffFactor = %v must lie in (0, 1)", ErrOptions, o.BackoffFactor)
	case o.GrowthInterval < 0:
		return o, fmt.Errorf("%w: GradScaler GrowthInterval = %d must be positive", ErrOptions, o.GrowthInterval)
	}
	return o, nil
}

// GradScaler is dynamic loss scaling for fp16 training, the state machine
// of torch.amp.GradScaler with its state on the device:
//
//	loss := scaler.Scale(loss)   // loss·scale
//	autograd.Backward(loss)
//	scaler.Unscale(opt)          // optional: before clipping
//	optim.ClipGradNorm(opt.Arena(), 1)
//	scaler.Step(opt)             // unscales if needed; skips on inf/NaN
//	scaler.Update()              // grow or back off the scale
//
// Scale, Unscale, Step and Update only launch kernels and never read a
// value back, so the sequence can be captured and replayed; whether a step
// is skipped is decided on the device at run time. One iteration must call
// them in this order; Unscale at most once.
type GradScaler struct {
	opts     GradScalerOptions
	be       kernels.Backend
	scale    *tensor.Tensor // F32 [1]
	invScale *tensor.Tensor // F32 [1]
	tracker  *tensor.Tensor // I32 [1]: consecutive clean steps
	foundInf *tensor.Tensor // F32 [1]
	scale0   *tensor.Tensor // shape [] view of scale, the factor Scale multiplies by
	// Host bookkeeping of the current iteration (the same on every call
	// of a captured step, so replays follow it).
	unscaled bool
}

// Keys of the GradScaler state dict.
const (
	keyScale   = "scale"
	keyTracker = "growth_tracker"
)

// NewGradScaler validates o and allocates the scaler's tensors on
// o.Device.
func NewGradScaler(o GradScalerOptions) (*GradScaler, error) {
	o, err := o.withDefaults()
	if err != nil {
		return nil, err
	}
	be, err := kernels.Lookup(o.Device)
	if err != nil {
		return nil, fmt.Errorf("%w: GradScaler: %v", ErrOptions, err)
	}
	s := &GradScaler{
		opts:     o,
		be:       be,
		scale:    emptyOn(o.Device, tensor.F32, 1),
		invScale: emptyOn(o.Device, tensor.F32, 1),
		tracker:  emptyOn(o.Device, tensor.I32, 1),
		foundInf: emptyOn(o.Device, tensor.F32, 1),
	}
	s.scale0 = s.scale.Reshape()
	writeScalar(s.scale, 0, o.InitScale)
	return s, nil
}

// Options returns the options in effect (defaults filled in).
func (s *GradScaler) Options() GradScalerOptions { return s.opts }

// Enabled reports whether the scaler scales (Options.Disabled unset).
func (s *GradScaler) Enabled() bool { return !s.opts.Disabled }

// Scale returns loss multiplied by the current scale (a differentiable
// op, so Backward produces scaled gradients). The loss is a scalar; its
// dtype is kept.
func (s *GradScaler) Scale(loss *autograd.Var) *autograd.Var {
	if s.opts.Disabled {
		return loss
	}
	f := s.scale0
	if dt := loss.DType(); dt != f.DType() {
		// A loss in F64 (tests) or a half type: multiply by the scale in
		// the loss's own dtype, converted on the device.
		f = emptyOn(s.opts.Device, dt)
		s.be.Copy(f, s.scale0)
	}
	return autograd.Mul(loss, autograd.NewVar(f))
}

// Unscale divides every gradient in opt's arena by the scale in place and
// records in FoundInf whether any is inf or NaN. Call it before clipping
// or inspecting gradients; Step calls it otherwise. It panics when called
// twice in one iteration (the gradients would be divided twice).
func (s *GradScaler) Unscale(opt Optimizer) {
	if s.opts.Disabled {
		return
	}
	if s.unscaled {
		panic("optim: GradScaler.Unscale called twice before Update")
	}
	s.be.BinaryScalar(kernels.Div, s.invScale, s.scale, 1, true)
	s.be.Fill(s.foundInf, 0)
	s.be.UnscaleCheck(opt.Arena().grads, s.invScale, s.foundInf)
	s.unscaled = true
}

// Step unscales the gradients (unless Unscale already did) and steps opt,
// unless a gradient was inf or NaN, in which case parameters, optimizer
// state and step counter stay unchanged.
func (s *GradScaler) Step(opt Optimizer) {
	if s.opts.Disabled {
		opt.Step()
		return
	}
	if !s.unscaled {
		s.Unscale(opt)
	}
	opt.StepSkipIf(s.foundInf)
}

// Update advances the state machine after Step: on inf/NaN the scale is
// multiplied by BackoffFactor and the tracker reset, otherwise the tracker
// counts up and after GrowthInterval clean steps the scale grows by
// GrowthFactor. It panics when the iteration did not unscale.
func (s *GradScaler) Update() {
	if s.opts.Disabled {
		return
	}
	if !s.unscaled {
		panic("optim: GradScaler.Update without Unscale or Step in this iteration")
	}
	s.be.ScalerUpdate(s.scale, s.tracker, s.foundInf, s.opts.GrowthFactor, s.opts.BackoffFactor, s.opts.GrowthInterval)
	s.unscaled = false
}

// ScaleTensor is the device-resident scale (F32, one element). It is
// updated in place.
func (s *GradScaler) ScaleTensor() *tensor.Tensor { return s.scale }

// FoundInf is the device-resident found-inf flag (F32, one element, 1
// when the last Unscale saw an inf or NaN). It is updated in place.
func (s *GradScaler) FoundInf() *tensor.Tensor { return s.foundInf }

// CurrentScale reads the scale back to the host (a device read; for
// tests and logging, never inside a captured step).
func (s *GradScaler) CurrentScale() float64 { return readScalar(s.scale) }

// GrowthTracker reads the number of consecutive clean steps back to the
// host (a device read).
func (s *GradScaler) GrowthTracker() int { return int(readScalar(s.tracker)) }

// StateDict returns copies of "scale" (F32 [1]) and "growth_tracker"
// (I32 [1]).
func (s *GradScaler) StateDict() map[string]*tensor.Tensor {
	return map[string]*tensor.Tensor{keyScale: cloneTensor(s.scale), keyTracker: cloneTensor(s.tracker)}
}

// LoadStateDict copies a state saved by StateDict into the scaler in
// place, after checking that the scale is positive and finite and the
// tracker a non-negative integer.
func (s *GradScaler) LoadStateDict(sd map[string]*tensor.Tensor) error {
	for _, k := range []string{keyScale, keyTracker} {
		t, ok := sd[k]
		if !ok || t == nil {
			return fmt.Errorf("optim: GradScaler state dict has no %q", k)
		}
		if t.Numel() != 1 {
			return fmt.Errorf("optim: GradScaler state dict %q has shape %v, want one element", k, t.Shape())
		}
	}
	sc, tr := readScalar(sd[keyScale]), readScalar(sd[keyTracker])
	if err := checkFinite("scale", sc); err != nil || sc <= 0 {
		return fmt.Errorf("optim: GradScaler state dict scale %v must be finite and positive", sc)
	}
	if !(tr >= 0) || tr != float64(int64(tr)) || tr > 1<<31-1 {
		return fmt.Errorf("optim: GradScaler state dict growth_tracker %v must be a non-negative integer", tr)
	}
	writeScalar(s.scale, 0, sc)
	writeScalar(s.tracker, 0, tr)
	return nil
}
