package kasmina

import (
	"math"

	"github.com/esper-go/esper/autograd"
	"github.com/esper-go/esper/nn"
	"github.com/esper-go/esper/tensor"
)

// Gradient health thresholds (esper-reference §5.8).
const (
	// VanishingGradNorm: a parameter whose gradient norm is below it is
	// vanishing.
	VanishingGradNorm = 1e-7
	// ExplodingGradNorm: a parameter whose gradient norm is above it (or
	// not finite) is exploding.
	ExplodingGradNorm = 10.0
	// MaxGradientNormRatio caps SeedMetrics.SeedGradientNormRatio (G2
	// capture_gradient_telemetry min(10, ratio)).
	MaxGradientNormRatio = 10.0
	// gradNormEMADecay is the decay of SeedMetrics.GradientNormAvg (G2
	// gradient EMA decay 0.9).
	gradNormEMADecay = 0.9
	// hostNormFloor: below it the host gradient counts as zero and the
	// ratio as 0 (G2 1e-8).
	hostNormFloor = 1e-8
)

// GradientHealth summarises the gradients of a set of parameters.
type GradientHealth struct {
	// Params is the number of parameters that had a gradient.
	Params int
	// Norm is the global L2 norm over all of them (overflow-safe: a
	// gradient of 1e20 does not overflow to Inf).
	Norm float64
	// VanishingRatio and ExplodingRatio are the fractions of parameters
	// whose gradient norm is below VanishingGradNorm, and above
	// ExplodingGradNorm or not finite.
	VanishingRatio, ExplodingRatio float64
	// HasVanishing and HasExploding report any such parameter.
	HasVanishing, HasExploding bool
	// Health is clamp(1 − 0.5·vanishing − 0.8·exploding, 0, 1), and 0
	// when the global norm is not finite.
	Health float64
}

// MeasureGradientHealth reads the gradients of params (parameters
// without a gradient are skipped) and returns their health; ok is false
// when none had a gradient, meaning "not measured". It reads values on
// the host, outside any captured region: gradients on a device are
// gathered there and copied to the host at once (nn.HostCopies, one host
// sync).
func MeasureGradientHealth(params []*autograd.Var) (h GradientHealth, ok bool) {
	grads, err := nn.HostCopies(gradsOf(params))
	if err != nil {
		return GradientHealth{Norm: math.NaN()}, true
	}
	return gradientHealth(grads)
}

// gradsOf returns the gradients of params (nil where a parameter, or its
// gradient, is missing).
func gradsOf(params []*autograd.Var) []*tensor.Tensor {
	out := make([]*tensor.Tensor, len(params))
	for i, p := range params {
		if p != nil {
			out[i] = p.Grad
		}
	}
	return out
}

// gradientHealth is MeasureGradientHealth over host gradients (nil ones
// skipped).
func gradientHealth(grads []*tensor.Tensor) (h GradientHealth, ok bool) {
	var scale, ssq float64 = 0, 1
	vanish, explode := 0, 0
	finite := true
	for _, g := range grads {
		if g == nil {
			continue
		}
		h.Params++
		n := tensorNorm(g)
		switch {
		case math.IsNaN(n) || math.IsInf(n, 0):
			explode++
			finite = false
			continue
		case n > ExplodingGradNorm:
			explode++
		case n < VanishingGradNorm:
			vanish++
		}
		scale, ssq = accumulateNorm(scale, ssq, n)
	}
	if h.Params == 0 {
		return GradientHealth{}, false
	}
	h.Norm = scale * math.Sqrt(ssq)
	if !finite {
		h.Norm = math.NaN()
	}
	h.VanishingRatio = float64(vanish) / float64(h.Params)
	h.ExplodingRatio = float64(explode) / float64(h.Params)
	h.HasVanishing, h.HasExploding = vanish > 0, explode > 0
	if finite {
		h.Health = clamp01(1 - 0.5*h.VanishingRatio - 0.8*h.ExplodingRatio)
	}
	return h, true
}

// GradNorm is the global L2 norm of the gradients of params (those with
// one), overflow-safe; NaN if any element is not finite. Gradients on a
// device are copied to the host at once (nn.HostCopies, one host sync).
func GradNorm(params []*autograd.Var) float64 {
	grads, err := nn.HostCopies(gradsOf(params))
	if err != nil {
		return math.NaN()
	}
	return gradNorm(grads)
}

// gradNorm is GradNorm over host gradients (nil ones skipped).
func gradNorm(grads []*tensor.Tensor) float64 {
	var scale, ssq float64 = 0, 1
	for _, g := range grads {
		if g == nil {
			continue
		}
		n := tensorNorm(g)
		if math.IsNaN(n) || math.IsInf(n, 0) {
			return math.NaN()
		}
		scale, ssq = accumulateNorm(scale, ssq, n)
	}
	return scale * math.Sqrt(ssq)
}

// tensorNorm is the L2 norm of t's elements (a host tensor), scaled
// LAPACK-style (dnrm2) so that large values do not overflow; Inf or NaN
// if any element is.
func tensorNorm(t *tensor.Tensor) float64 {
	var scale, ssq float64 = 0, 1
	for _, v := range t.Float64s() {
		if math.IsNaN(v) || math.IsInf(v, 0) {
			return math.Inf(1)
		}
		scale, ssq = accumulateNorm(scale, ssq, v)
	}
	return scale * math.Sqrt(ssq)
}

// accumulateNorm adds x to a scaled sum of squares (norm = scale·√ssq).
func accumulateNorm(scale, ssq, x float64) (float64, float64) {
	a := math.Abs(x)
	if a == 0 {
		return scale, ssq
	}
	if scale < a {
		r := scale / a
		return a, 1 + ssq*r*r
	}
	r := a / scale
	return scale, ssq + r*r
}
