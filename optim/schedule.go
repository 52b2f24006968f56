package optim

import (
	"fmt"
	"math"
)

// Schedule maps an epoch (or step: whatever the caller counts, from 0) to
// a learning rate. Schedules are pure closed forms, so resuming at any
// epoch gives the same rate as running up to it.
type Schedule interface {
	LR(epoch int) float64
}

// Apply sets o's learning rate to s.LR(epoch). It writes the optimizer's
// device-resident learning rate in place and is not captured: call it
// between steps (or replays), and the next one sees the new rate.
func Apply(o Optimizer, s Schedule, epoch int) { o.SetLR(s.LR(epoch)) }

// ValidateSchedule checks a schedule's fields (recursively through
// Warmup). Schedules are plain values; call it once where one is
// configured. Errors wrap ErrOptions.
func ValidateSchedule(s Schedule) error {
	if v, ok := s.(interface{ validate() error }); ok {
		if err := v.validate(); err != nil {
			return fmt.Errorf("%w: %v", ErrOptions, err)
		}
	}
	return nil
}

// Constant keeps the learning rate at Base.
type Constant struct {
	Base float64
}

// LR implements Schedule.
func (c Constant) LR(int) float64 { return c.Base }

func (c Constant) validate() error { return checkRate("Constant.Base", c.Base) }

// DefaultStepGamma is the decay StepLR.Gamma = 0 selects (PyTorch's).
const DefaultStepGamma = 0.1

// StepLR decays the rate by Gamma every StepSize epochs, like
// torch.optim.lr_scheduler.StepLR: Base·Gamma^⌊epoch/StepSize⌋.
type StepLR struct {
	Base float64
	// StepSize is the decay period in epochs, > 0.
	StepSize int
	// Gamma is the multiplicative decay, in (0, 1]; 0 means
	// DefaultStepGamma.
	Gamma float64
}

// LR implements Schedule. A non-positive StepSize never decays.
func (s StepLR) LR(epoch int) float64 {
	g := s.Gamma
	if g == 0 {
		g = DefaultStepGamma
	}
	if s.StepSize <= 0 {
		return s.Base
	}
	return s.Base * math.Pow(g, float64(max(epoch, 0)/s.StepSize))
}

func (s StepLR) validate() error {
	if s.StepSize <= 0 {
		return fmt.Errorf("StepLR.StepSize = %d must be positive", s.StepSize)
	}
	if !(s.Gamma >= 0 && s.Gamma <= 1) {
		return fmt.Errorf("StepLR.Gamma = %v must lie in (0, 1]", s.Gamma)
	}
	return checkRate("StepLR.Base", s.Base)
}

// Cosine anneals from Base to Min over TMax epochs with the closed form of
// torch.optim.lr_scheduler.CosineAnnealingLR:
// Min + (Base−Min)·(1+cos(π·epoch/TMax))/2. Past TMax it follows the
// cosine back up, as PyTorch's closed form does.
type Cosine struct {
	Base, Min float64
	// TMax is the half period in epochs, > 0.
	TMax int
}

// LR implements Schedule. A non-positive TMax gives Base.
func (c Cosine) LR(epoch int) float64 {
	if c.TMax <= 0 {
		return c.Base
	}
	return c.Min + (c.Base-c.Min)*(1+math.Cos(math.Pi*float64(max(epoch, 0))/float64(c.TMax)))/2
}

func (c Cosine) validate() error {
	if c.TMax <= 0 {
		return fmt.Errorf("Cosine.TMax = %d must be positive", c.TMax)
	}
	if err := checkRate("Cosine.Base", c.Base); err != nil {
		return err
	}
	return checkRate("Cosine.Min", c.Min)
}

// Warmup defaults, as in torch.optim.lr_scheduler.LinearLR.
const (
	DefaultWarmupSteps       = 5
	DefaultWarmupStartFactor = 1.0 / 3
)

// Warmup multiplies an inner schedule by a factor rising linearly from
// StartFactor at epoch 0 to 1 at epoch Steps (and 1 afterwards), like
// chaining torch.optim.lr_scheduler.LinearLR with the inner scheduler.
type Warmup struct {
	Inner Schedule
	// Steps is the warm-up length; 0 means DefaultWarmupSteps.
	Steps int
	// StartFactor is the initial factor in (0, 1]; 0 means
	// DefaultWarmupStartFactor.
	StartFactor float64
}

// LR implements Schedule.
func (w Warmup) LR(epoch int) float64 {
	steps, f0 := w.Steps, w.StartFactor
	if steps == 0 {
		steps = DefaultWarmupSteps
	}
	if f0 == 0 {
		f0 = DefaultWarmupStartFactor
	}
	f := 1.0
	if e := max(epoch, 0); steps > 0 && e < steps {
		f = f0 + (1-f0)*float64(e)/float64(steps)
	}
	return w.Inner.LR(epoch) * f
}

func (w Warmup) validate() error {
	if w.Inner == nil {
		return fmt.Errorf("Warmup.Inner is nil")
	}
	if w.Steps < 0 {
		return fmt.Errorf("Warmup.Steps = %d must not be negative", w.Steps)
	}
	if !(w.StartFactor >= 0 && w.StartFactor <= 1) {
		return fmt.Errorf("Warmup.StartFactor = %v must lie in (0, 1]", w.StartFactor)
	}
	if v, ok := w.Inner.(interface{ validate() error }); ok {
		return v.validate()
	}
	return nil
}

func checkRate(name string, v float64) error {
	if !(v >= 0) || math.IsInf(v, 0) {
		return fmt.Errorf("%s = %v must be finite and non-negative", name, v)
	}
	return nil
}
