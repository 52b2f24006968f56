package kasmina

import (
	"fmt"
	"math"

	"github.com/esper-go/esper/autograd"
	"github.com/esper-go/esper/kernels"
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

// MeasureGradientHealth measures the gradients of params (parameters
// without a gradient are skipped) and returns their health; ok is false
// when none had a gradient, meaning "not measured". Call it outside any
// captured region: the per-parameter norms are computed where the
// gradients are and read back at once (TensorNorms, one host sync on a
// device).
func MeasureGradientHealth(params []*autograd.Var) (h GradientHealth, ok bool) {
	norms, err := TensorNorms(gradsOf(params))
	if err != nil {
		return GradientHealth{Norm: math.NaN()}, true
	}
	return gradientHealth(norms)
}

// TensorNorms returns the L2 norm of each tensor of ts in float64, -1
// for a nil one, computed where the tensors are: per device one
// kernels.Backend ForeachNorm into a float64 vector, read back in one
// copy (one host sync on a device; the tensors themselves never cross),
// the same kernel on the CPU, so that a device and the CPU agree bit for
// bit (sim). A tensor holding a NaN has a NaN norm, one holding an Inf
// (or, where the device sums squares in float32, an element beyond
// ~1.8e19) an infinite one. If a device's kernel refuses the tensors
// (a dtype it does not reduce), their norms are taken on the host from
// one gathered copy instead.
func TensorNorms(ts []*tensor.Tensor) ([]float64, error) {
	out := make([]float64, len(ts))
	type group struct {
		dev tensor.Device
		idx []int
		ts  []*tensor.Tensor
	}
	var groups []*group
	for i, t := range ts {
		out[i] = -1
		if t == nil {
			continue
		}
		var g *group
		for _, c := range groups {
			if c.dev == t.Device() {
				g = c
			}
		}
		if g == nil {
			g = &group{dev: t.Device()}
			groups = append(groups, g)
		}
		g.idx, g.ts = append(g.idx, i), append(g.ts, t.Contiguous())
	}
	for _, g := range groups {
		norms, err := deviceNorms(g.dev, g.ts)
		if err != nil {
			if norms, err = hostNorms(g.ts); err != nil {
				return nil, err
			}
		}
		for k, i := range g.idx {
			out[i] = norms[k]
		}
	}
	return out, nil
}

// deviceNorms is TensorNorms over tensors of one device, with its
// backend's ForeachNorm.
func deviceNorms(dev tensor.Device, ts []*tensor.Tensor) ([]float64, error) {
	dst, err := queueNorms(dev, ts)
	if err != nil {
		return nil, err
	}
	if !dev.IsCPU() {
		if dst, err = dst.ToDevice(tensor.CPU); err != nil {
			return nil, err
		}
	}
	return dst.Float64s(), nil
}

// queueNorms queues the backend's ForeachNorm of ts, contiguous tensors
// of dev, into a new F64 vector on dev and returns it unread; a kernel
// that refuses the tensors is an error.
func queueNorms(dev tensor.Device, ts []*tensor.Tensor) (dst *tensor.Tensor, err error) {
	be, err := kernels.Lookup(dev)
	if err != nil {
		return nil, err
	}
	if dst, err = tensor.EmptyOn(dev, tensor.F64, len(ts)); err != nil {
		return nil, err
	}
	defer func() {
		if r := recover(); r != nil {
			dst, err = nil, fmt.Errorf("kasmina: norms on %v: %v", dev, r)
		}
	}()
	be.ForeachNorm(dst, ts)
	return dst, nil
}

// hostNorms is TensorNorms's fallback: the tensors copied to the host at
// once (nn.HostCopies) and their norms taken there.
func hostNorms(ts []*tensor.Tensor) ([]float64, error) {
	hs, err := nn.HostCopies(ts)
	if err != nil {
		return nil, err
	}
	out := make([]float64, len(hs))
	for i, h := range hs {
		out[i] = tensorNorm(h)
	}
	return out, nil
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

// gradientHealth is MeasureGradientHealth over per-parameter norms
// (TensorNorms; negative ones, the missing gradients, skipped).
func gradientHealth(norms []float64) (h GradientHealth, ok bool) {
	var scale, ssq float64 = 0, 1
	vanish, explode := 0, 0
	finite := true
	for _, n := range norms {
		if n < 0 {
			continue
		}
		h.Params++
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
// one), overflow-safe over the per-parameter norms; NaN if any is not
// finite. The norms are computed where the gradients are (TensorNorms,
// one host sync on a device).
func GradNorm(params []*autograd.Var) float64 {
	norms, err := TensorNorms(gradsOf(params))
	if err != nil {
		return math.NaN()
	}
	return gradNorm(norms)
}

// gradNorm is GradNorm over per-parameter norms (negative ones skipped).
func gradNorm(norms []float64) float64 {
	var scale, ssq float64 = 0, 1
	for _, n := range norms {
		if n < 0 {
			continue
		}
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
