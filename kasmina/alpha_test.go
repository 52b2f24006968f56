package kasmina

import (
	"encoding/json"
	"errors"
	"math"
	"strings"
	"testing"

	"github.com/esper-go/esper/leyline"
)

var curves = []leyline.AlphaCurve{leyline.CurveLinear, leyline.CurveCosine, leyline.CurveSigmoid}

func TestEaseProperties(t *testing.T) {
	for _, c := range curves {
		for _, k := range []float64{0.01, 0.1, 1, 6, 12, 24, 1e3, 1e6, 1e300, math.Inf(1)} {
			check(t, Ease(c, 0, k) == 0, "%v k=%g: ease(0) = %g", c, k, Ease(c, 0, k))
			check(t, Ease(c, 1, k) == 1, "%v k=%g: ease(1) = %g", c, k, Ease(c, 1, k))
			check(t, Ease(c, 0.5, k) == 0.5, "%v k=%g: ease(½) = %.17g", c, k, Ease(c, 0.5, k))
			prev := 0.0
			for i := 0; i <= 1000; i++ {
				v := Ease(c, float64(i)/1000, k)
				check(t, !math.IsNaN(v) && v >= 0 && v <= 1, "%v k=%g: ease(%g) = %g outside [0,1]", c, k, float64(i)/1000, v)
				check(t, v >= prev, "%v k=%g: not monotone at %d", c, k, i)
				prev = v
			}
		}
	}
	// Steepness only matters to the sigmoid: 6 is gentler and 24 sharper
	// than the default 12 at t = 0.25.
	g, d, s := Ease(leyline.CurveSigmoid, 0.25, 6), Ease(leyline.CurveSigmoid, 0.25, 12), Ease(leyline.CurveSigmoid, 0.25, 24)
	check(t, g > d && d > s, "sigmoid at 0.25: k=6 %g, 12 %g, 24 %g", g, d, s)
	for _, c := range []leyline.AlphaCurve{leyline.CurveLinear, leyline.CurveCosine} {
		check(t, Ease(c, 0.25, 6) == Ease(c, 0.25, 24), "%v depends on steepness", c)
	}
}

func TestAlphaControllerLinearRamp(t *testing.T) {
	c := NewAlphaController(0)
	check(t, c.Steepness == DefaultSteepness && c.Mode == leyline.AlphaHold, "defaults %+v", c)
	noErr(t, c.Retarget(1, 5, leyline.CurveLinear, 0))
	check(t, c.Mode == leyline.AlphaUp, "mode %v", c.Mode)
	want := []float64{0.2, 0.4, 0.6, 0.8, 1.0}
	for i, w := range want {
		done := c.Step()
		check(t, math.Abs(c.Alpha-w) < 1e-12, "tick %d: alpha %g, want %g", i+1, c.Alpha, w)
		check(t, done == (i == 4), "tick %d: done %v", i+1, done)
	}
	check(t, c.Alpha == 1 && c.Mode == leyline.AlphaHold && c.AtTarget(), "after ramp %+v", c)
	check(t, !c.Step(), "Step in HOLD did something")
}

func TestAlphaControllerMonotoneSnapNoOvershoot(t *testing.T) {
	for _, cv := range curves {
		for _, k := range []float64{0.1, 12, 1e9} {
			for _, ramp := range [][2]float64{{0, 1}, {1, 0}, {0.3, 0.7}, {0.9, 0.2}} {
				c := NewAlphaController(ramp[0])
				noErr(t, c.Retarget(ramp[1], 7, cv, k))
				prev := c.Alpha
				for i := 0; i < 7; i++ {
					c.Step()
					lo, hi := math.Min(ramp[0], ramp[1]), math.Max(ramp[0], ramp[1])
					check(t, c.Alpha >= lo && c.Alpha <= hi, "%v k=%g %v: overshoot %g", cv, k, ramp, c.Alpha)
					if ramp[1] > ramp[0] {
						check(t, c.Alpha >= prev, "not monotone up")
					} else {
						check(t, c.Alpha <= prev, "not monotone down")
					}
					prev = c.Alpha
				}
				check(t, c.Alpha == ramp[1] && c.Mode == leyline.AlphaHold, "%v: no exact snap: %g", cv, c.Alpha)
			}
		}
	}
}

func TestAlphaControllerRetarget(t *testing.T) {
	c := NewAlphaController(0)
	noErr(t, c.Retarget(1, 4, leyline.CurveSigmoid, 0.001))
	check(t, c.Steepness == MinSteepness, "steepness %g not raised to the minimum", c.Steepness)
	c.Step()
	err := c.Retarget(0.5, 2, 0, 0)
	check(t, errors.Is(err, ErrNotHolding), "retarget during a ramp: %v", err)
	for !c.AtTarget() {
		c.Step()
	}
	noErr(t, c.Retarget(0.5, 2, 0, 0))
	check(t, c.Mode == leyline.AlphaDown && c.Curve == leyline.CurveSigmoid, "mode %v curve %v", c.Mode, c.Curve)
	for !c.AtTarget() {
		c.Step()
	}
	// Zero steps jumps; a target above 1 is clamped; equal target holds.
	noErr(t, c.Retarget(2, 0, 0, 0))
	check(t, c.Alpha == 1 && c.Mode == leyline.AlphaHold, "instant retarget %+v", c)
	noErr(t, c.Retarget(1, 3, 0, 0))
	check(t, c.Mode == leyline.AlphaHold && c.Alpha == 1, "retarget to the current alpha %+v", c)
	check(t, c.Retarget(0.5, -1, 0, 0) != nil, "negative steps accepted")
	check(t, c.Retarget(0.5, 1, leyline.AlphaCurve(9), 0) != nil, "bad curve accepted")
}

func TestAlphaControllerJSON(t *testing.T) {
	c := NewAlphaController(0.25)
	noErr(t, c.Retarget(0.75, 4, leyline.CurveCosine, 6))
	c.Step()
	b, err := json.Marshal(c)
	noErr(t, err)
	var got AlphaController
	noErr(t, json.Unmarshal(b, &got))
	check(t, got == *c, "round trip %+v != %+v", got, *c)

	var m map[string]any
	noErr(t, json.Unmarshal(b, &m))
	for _, field := range []string{"alpha", "alpha_start", "alpha_target", "alpha_mode", "alpha_curve", "alpha_steepness", "alpha_steps_total", "alpha_steps_done"} {
		cp := map[string]any{}
		for k, v := range m {
			if k != field {
				cp[k] = v
			}
		}
		bb, _ := json.Marshal(cp)
		var x AlphaController
		err := json.Unmarshal(bb, &x)
		check(t, err != nil && strings.Contains(err.Error(), field), "missing %s: %v", field, err)
	}
	bad := strings.Replace(string(b), `"alpha_steps_done":1`, `"alpha_steps_done":9`, 1)
	check(t, json.Unmarshal([]byte(bad), &got) != nil, "steps done > total accepted")
}
