package kasmina

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"

	"github.com/esper-go/esper/leyline"
)

// DefaultSteepness is the sigmoid curve's default steepness (G2
// AlphaController steepness 12).
const DefaultSteepness = 12.0

// MinSteepness is the smallest steepness a controller keeps; smaller
// values are raised to it (G2 AlphaController, steepness ≥ 0.1).
const MinSteepness = 0.1

// alphaEps is the tolerance for "alpha reached its target" (G2 1e-6).
const alphaEps = 1e-6

// ErrNotHolding is returned by AlphaController.Retarget while a ramp is
// still running: a new target is only accepted from HOLD.
var ErrNotHolding = errors.New("alpha controller is not in HOLD")

// AlphaController ramps a seed's blend weight alpha from Start to Target
// over StepsTotal ticks along an easing curve, one Step per epoch. All
// values are kept in [0, 1]. Build one with NewAlphaController; the
// fields are exported for inspection and serialisation, and Retarget,
// Step and Snap keep them consistent.
type AlphaController struct {
	// Alpha is the current blend weight.
	Alpha float64
	// Start is alpha when the current ramp began.
	Start float64
	// Target is where the current ramp ends.
	Target float64
	// Mode is UP, DOWN, or HOLD once the target is reached.
	Mode leyline.AlphaMode
	// Curve is the easing of the ramp.
	Curve leyline.AlphaCurve
	// Steepness of the SIGMOID curve (≥ MinSteepness).
	Steepness float64
	// StepsTotal is the ramp length in ticks; StepsDone ≤ StepsTotal the
	// ticks taken.
	StepsTotal, StepsDone int
}

// NewAlphaController returns a controller holding at alpha (clamped to
// [0, 1]) with the LINEAR curve and the default steepness.
func NewAlphaController(alpha float64) *AlphaController {
	a := clamp01(alpha)
	return &AlphaController{
		Alpha: a, Start: a, Target: a, Mode: leyline.AlphaHold,
		Curve: leyline.CurveLinear, Steepness: DefaultSteepness,
	}
}

// Retarget starts a ramp from the current alpha to target (clamped to
// [0, 1]) over steps ticks. A zero curve or steepness keeps the current
// one; steepness is raised to MinSteepness. A target equal to alpha, or
// steps = 0, jumps straight to the target and holds there. It is an error
// (wrapping ErrNotHolding) unless the controller is in HOLD, and for a
// negative step count or an invalid curve.
func (c *AlphaController) Retarget(target float64, steps int, curve leyline.AlphaCurve, steepness float64) error {
	if c.Mode != leyline.AlphaHold {
		return fmt.Errorf("kasmina: retarget to %g: %w (mode %v, %d of %d steps done)", target, ErrNotHolding, c.Mode, c.StepsDone, c.StepsTotal)
	}
	if steps < 0 {
		return fmt.Errorf("kasmina: retarget over %d steps (want ≥ 0)", steps)
	}
	if curve != 0 && !curve.Valid() {
		return fmt.Errorf("kasmina: retarget with invalid curve %v", curve)
	}
	if math.IsNaN(target) || math.IsNaN(steepness) {
		return errors.New("kasmina: retarget with NaN target or steepness")
	}
	if curve != 0 {
		c.Curve = curve
	}
	if steepness != 0 {
		c.Steepness = math.Max(steepness, MinSteepness)
	}
	c.Start = c.Alpha
	c.Target = clamp01(target)
	c.StepsTotal = steps
	c.StepsDone = 0
	switch {
	case c.Target > c.Alpha:
		c.Mode = leyline.AlphaUp
	case c.Target < c.Alpha:
		c.Mode = leyline.AlphaDown
	default:
		c.Mode = leyline.AlphaHold
		c.Alpha = c.Target
	}
	if steps == 0 {
		c.Alpha = c.Target
		c.Mode = leyline.AlphaHold
	}
	return nil
}

// Step advances the ramp by one tick and reports whether this tick
// reached the target (the controller then holds at exactly Target). In
// HOLD, or with no ramp, it does nothing and returns false.
func (c *AlphaController) Step() bool {
	if c.Mode == leyline.AlphaHold || c.StepsTotal == 0 {
		return false
	}
	c.StepsDone++
	if c.StepsDone >= c.StepsTotal {
		c.StepsDone = c.StepsTotal
		c.Alpha = c.Target
		c.Mode = leyline.AlphaHold
		return true
	}
	t := float64(c.StepsDone) / float64(c.StepsTotal)
	a := c.Start + (c.Target-c.Start)*Ease(c.Curve, t, c.Steepness)
	if c.Mode == leyline.AlphaUp {
		a = math.Min(math.Max(a, c.Start), c.Target)
	} else {
		a = math.Min(math.Max(a, c.Target), c.Start)
	}
	c.Alpha = a
	return false
}

// Snap sets alpha to v (clamped) and holds there with no ramp: start,
// target and alpha all equal v.
func (c *AlphaController) Snap(v float64) {
	v = clamp01(v)
	c.Alpha, c.Start, c.Target = v, v, v
	c.Mode = leyline.AlphaHold
	c.StepsTotal, c.StepsDone = 0, 0
}

// AtTarget reports whether the controller holds at its target.
func (c *AlphaController) AtTarget() bool {
	return c.Mode == leyline.AlphaHold && math.Abs(c.Alpha-c.Target) <= alphaEps
}

// TimeToTarget is the number of ticks left in the ramp (0 in HOLD).
func (c *AlphaController) TimeToTarget() int {
	if c.Mode == leyline.AlphaHold {
		return 0
	}
	return c.StepsTotal - c.StepsDone
}

// Velocity is the average change of alpha per tick over the ramp
// ((Target − Start)/StepsTotal), 0 in HOLD.
func (c *AlphaController) Velocity() float64 {
	if c.Mode == leyline.AlphaHold || c.StepsTotal == 0 {
		return 0
	}
	return (c.Target - c.Start) / float64(c.StepsTotal)
}

// Ease maps progress t ∈ [0, 1] to eased progress along curve: LINEAR t,
// COSINE (1 − cos πt)/2, SIGMOID the logistic σ(k(t − ½)) rescaled so that
// it passes through 0, ½ and 1 at t = 0, ½ and 1 (k = steepness, raised
// to MinSteepness). Every curve is monotone and stays in [0, 1]; LINEAR
// and COSINE ignore steepness; an invalid curve is LINEAR.
func Ease(curve leyline.AlphaCurve, t, steepness float64) float64 {
	switch {
	case t <= 0:
		return 0
	case t >= 1:
		return 1
	case t == 0.5:
		// Every curve is point-symmetric about (½, ½); return the exact
		// value rather than cos(π/2)'s rounding error.
		return 0.5
	}
	switch curve {
	case leyline.CurveCosine:
		return clamp01((1 - math.Cos(math.Pi*t)) / 2)
	case leyline.CurveSigmoid:
		k := math.Max(steepness, MinSteepness)
		lo := sigmoid(-k / 2)
		// σ(k/2) − σ(−k/2) = 1 − 2σ(−k/2).
		den := 1 - 2*lo
		if den == 0 {
			return t
		}
		return clamp01((sigmoid(k*(t-0.5)) - lo) / den)
	default:
		return t
	}
}

// sigmoid is 1/(1+e^−x) without overflow for large |x|.
func sigmoid(x float64) float64 {
	if x >= 0 {
		return 1 / (1 + math.Exp(-x))
	}
	e := math.Exp(x)
	return e / (1 + e)
}

func clamp01(v float64) float64 {
	switch {
	case v < 0:
		return 0
	case v > 1:
		return 1
	case math.IsNaN(v):
		return 0
	}
	return v
}

// alphaControllerJSON is the serialised form; every field is required on
// load (pointers tell absent from zero).
type alphaControllerJSON struct {
	Alpha      *float64 `json:"alpha"`
	Start      *float64 `json:"alpha_start"`
	Target     *float64 `json:"alpha_target"`
	Mode       *int     `json:"alpha_mode"`
	Curve      *int     `json:"alpha_curve"`
	Steepness  *float64 `json:"alpha_steepness"`
	StepsTotal *int     `json:"alpha_steps_total"`
	StepsDone  *int     `json:"alpha_steps_done"`
}

// MarshalJSON writes the controller's eight fields.
func (c *AlphaController) MarshalJSON() ([]byte, error) {
	mode, curve := int(c.Mode), int(c.Curve)
	return json.Marshal(alphaControllerJSON{
		Alpha: &c.Alpha, Start: &c.Start, Target: &c.Target, Mode: &mode, Curve: &curve,
		Steepness: &c.Steepness, StepsTotal: &c.StepsTotal, StepsDone: &c.StepsDone,
	})
}

// UnmarshalJSON reads the controller; a missing field, an invalid mode
// or curve, a value outside its range or an inconsistent step count is an
// error and leaves c unchanged.
func (c *AlphaController) UnmarshalJSON(b []byte) error {
	var j alphaControllerJSON
	if err := json.Unmarshal(b, &j); err != nil {
		return fmt.Errorf("kasmina: alpha controller: %w", err)
	}
	for _, f := range []struct {
		name    string
		missing bool
	}{
		{"alpha", j.Alpha == nil}, {"alpha_start", j.Start == nil}, {"alpha_target", j.Target == nil},
		{"alpha_mode", j.Mode == nil}, {"alpha_curve", j.Curve == nil}, {"alpha_steepness", j.Steepness == nil},
		{"alpha_steps_total", j.StepsTotal == nil}, {"alpha_steps_done", j.StepsDone == nil},
	} {
		if f.missing {
			return fmt.Errorf("kasmina: alpha controller: required field %q is missing", f.name)
		}
	}
	out := AlphaController{
		Alpha: *j.Alpha, Start: *j.Start, Target: *j.Target,
		Mode: leyline.AlphaMode(*j.Mode), Curve: leyline.AlphaCurve(*j.Curve),
		Steepness: *j.Steepness, StepsTotal: *j.StepsTotal, StepsDone: *j.StepsDone,
	}
	if err := out.validate(); err != nil {
		return err
	}
	*c = out
	return nil
}

func (c *AlphaController) validate() error {
	in01 := func(v float64) bool { return v >= 0 && v <= 1 }
	switch {
	case !in01(c.Alpha) || !in01(c.Start) || !in01(c.Target):
		return fmt.Errorf("kasmina: alpha controller: alpha %g, start %g, target %g must be in [0, 1]", c.Alpha, c.Start, c.Target)
	case !c.Mode.Valid():
		return fmt.Errorf("kasmina: alpha controller: invalid mode %d", int(c.Mode))
	case !c.Curve.Valid():
		return fmt.Errorf("kasmina: alpha controller: invalid curve %d", int(c.Curve))
	case !(c.Steepness >= MinSteepness) || math.IsInf(c.Steepness, 0):
		return fmt.Errorf("kasmina: alpha controller: steepness %g (want finite, ≥ %g)", c.Steepness, MinSteepness)
	case c.StepsTotal < 0 || c.StepsDone < 0 || c.StepsDone > c.StepsTotal:
		return fmt.Errorf("kasmina: alpha controller: steps done %d of %d", c.StepsDone, c.StepsTotal)
	}
	return nil
}
