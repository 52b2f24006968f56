package tamiyo

// MaskedCategorical, the G2 masked distribution of one head, with its
// probability floors: what Act and Evaluate compute in batches over
// tensors, for one row of host logits.

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"

	"github.com/esper-go/esper/leyline"
)

// ProbabilityFloorPerHead is each head's default probability floor, in
// leyline.HeadNames order (G2 PROBABILITY_FLOOR_PER_HEAD: op .15, slot .05,
// blueprint .12, style .08, tempo .12, alpha_target .08, alpha_speed .06,
// alpha_curve .06). A floor keeps every valid option explorable.
var ProbabilityFloorPerHead = [leyline.NumActionHeads]float32{
	leyline.HeadSlot: 0.05, leyline.HeadBlueprint: 0.12, leyline.HeadStyle: 0.08, leyline.HeadTempo: 0.12,
	leyline.HeadAlphaTarget: 0.08, leyline.HeadAlphaSpeed: 0.06, leyline.HeadAlphaCurve: 0.06, leyline.HeadOp: 0.15,
}

// InvalidStateMachineError reports a mask with no valid option: the
// lifecycle state machine offered the policy nothing to do, which is a
// bug upstream (WAIT is always valid).
type InvalidStateMachineError struct {
	// Row is the batch row of the mask, or -1 for a single distribution.
	Row int
	// Size is the mask's length.
	Size int
}

// Error implements error.
func (e *InvalidStateMachineError) Error() string {
	if e.Row >= 0 {
		return fmt.Sprintf("tamiyo: invalid state machine: mask row %d has no valid action (of %d)", e.Row, e.Size)
	}
	return fmt.Sprintf("tamiyo: invalid state machine: mask has no valid action (of %d)", e.Size)
}

// ErrNonFiniteLogits is wrapped when logits hold NaN or ±Inf, a sign that
// the network has diverged.
var ErrNonFiniteLogits = errors.New("non-finite logits")

// MaskedCategorical is a categorical distribution over a head's options
// with invalid options masked out and an optional probability floor on
// the valid ones (G2 MaskedCategorical with _apply_floor_to_logits).
// Probabilities, log-probabilities, samples and the entropy all come from
// the floored distribution. Values are float32; exponentials and sums run
// in float64 and are rounded once.
type MaskedCategorical struct {
	logits   []float32 // floored, masked logits
	logProbs []float32
	probs    []float32
	mask     []bool
	numValid int
}

// NewMaskedCategorical builds the distribution for one row of logits.
// mask[i] = true marks option i valid. minProb is the probability floor
// (0 disables it; see ProbabilityFloorPerHead); the effective floor is
// min(minProb, 0.99/numValid).
//
// The reference applies the floor in one pass, which can push an option
// that was just above the floor below it when the others are rescaled
// (0.60/0.31/0.09 with a 0.3 floor leaves about 0.24). Here the pass
// repeats until no valid option is under the floor, so every valid
// option really has at least the effective floor; when one pass is
// enough (the usual case) the result is exactly the reference's.
//
// Errors: lengths differ or are zero; a logit is NaN or ±Inf (wraps
// ErrNonFiniteLogits, with min/max and counts); no option is valid
// (*InvalidStateMachineError); minProb is negative or not finite.
func NewMaskedCategorical(logits []float32, mask []bool, minProb float32) (*MaskedCategorical, error) {
	return newMaskedCategorical(logits, mask, minProb, -1)
}

// NewMaskedCategoricalBatch builds one distribution per row of a [B][n]
// batch, all with the same floor. An error names the failing row.
func NewMaskedCategoricalBatch(logits [][]float32, masks [][]bool, minProb float32) ([]*MaskedCategorical, error) {
	if len(logits) != len(masks) {
		return nil, fmt.Errorf("tamiyo: MaskedCategorical batch: %d logit rows but %d mask rows", len(logits), len(masks))
	}
	out := make([]*MaskedCategorical, len(logits))
	for i := range logits {
		d, err := newMaskedCategorical(logits[i], masks[i], minProb, i)
		if err != nil {
			var ism *InvalidStateMachineError
			if errors.As(err, &ism) {
				return nil, err
			}
			return nil, fmt.Errorf("row %d: %w", i, err)
		}
		out[i] = d
	}
	return out, nil
}

func newMaskedCategorical(logits []float32, mask []bool, minProb float32, row int) (*MaskedCategorical, error) {
	n := len(logits)
	if n == 0 || len(mask) != n {
		return nil, fmt.Errorf("tamiyo: MaskedCategorical: %d logits and %d mask entries (need the same, non-zero)", n, len(mask))
	}
	if !(minProb >= 0) || math.IsInf(float64(minProb), 0) {
		return nil, fmt.Errorf("tamiyo: MaskedCategorical: probability floor %g must be finite and >= 0", minProb)
	}
	if err := checkFiniteLogits(logits); err != nil {
		return nil, err
	}
	numValid := 0
	for _, v := range mask {
		if v {
			numValid++
		}
	}
	if numValid == 0 {
		return nil, &InvalidStateMachineError{Row: row, Size: n}
	}

	masked := make([]float32, n)
	for i, v := range mask {
		if v {
			masked[i] = logits[i]
		} else {
			masked[i] = leyline.MaskedLogitValue
		}
	}
	d := &MaskedCategorical{mask: append([]bool(nil), mask...), numValid: numValid}
	if minProb > 0 {
		masked = floorLogits(masked, mask, numValid, minProb)
	}
	d.logits = masked
	d.logProbs, d.probs = logSoftmax(masked)
	return d, nil
}

// checkFiniteLogits returns an error with the row's statistics when any
// logit is NaN or ±Inf.
func checkFiniteLogits(logits []float32) error {
	nan, inf := 0, 0
	lo, hi := math.Inf(1), math.Inf(-1)
	for _, v := range logits {
		f := float64(v)
		switch {
		case math.IsNaN(f):
			nan++
		case math.IsInf(f, 0):
			inf++
		}
		if !math.IsNaN(f) {
			lo = math.Min(lo, f)
			hi = math.Max(hi, f)
		}
	}
	if nan == 0 && inf == 0 {
		return nil
	}
	return fmt.Errorf("tamiyo: MaskedCategorical: %w (network instability): min=%.4g max=%.4g nan_count=%d inf_count=%d of %d",
		ErrNonFiniteLogits, lo, hi, nan, inf, len(logits))
}

// logSoftmax returns log-probabilities and probabilities of logits.
func logSoftmax(logits []float32) (logp, p []float32) {
	mx := math.Inf(-1)
	for _, v := range logits {
		mx = math.Max(mx, float64(v))
	}
	var sum float64
	for _, v := range logits {
		sum += math.Exp(float64(v) - mx)
	}
	lse := mx + math.Log(sum)
	logp = make([]float32, len(logits))
	p = make([]float32, len(logits))
	for i, v := range logits {
		l := float64(v) - lse
		logp[i] = float32(l)
		p[i] = float32(math.Exp(l))
	}
	return logp, p
}

// floorLogits applies the probability floor (G2 _apply_floor_to_logits):
// floor_eff = min(minProb, 0.99/numValid); valid options under floor_eff
// are raised to it and the others rescaled by
// max(1 − n_under·floor_eff, 1e-8) / max(Σ p_over, 1e-8); the new logits
// are log(max(p, 1e-8)) for valid options and leyline.MaskedLogitValue for the
// rest.
//
// The reference applies this once. One pass can push an option that was
// just over the floor below it; this port repeats the pass, with the
// options already raised held at the floor, until none is under. When the
// first pass leaves none under (the usual case) the result is the
// reference's exactly.
func floorLogits(masked []float32, mask []bool, numValid int, minProb float32) []float32 {
	_, p0 := logSoftmax(masked)
	floor := math.Min(float64(minProb), 0.99/float64(numValid))
	n := len(masked)
	under := make([]bool, n)
	p := make([]float64, n)
	for {
		nUnder := 0
		var sumOver float64
		for i := range p {
			if !mask[i] {
				continue
			}
			if under[i] {
				nUnder++
			} else {
				sumOver += float64(p0[i])
			}
		}
		scale := math.Max(1-float64(nUnder)*floor, probFloorEps) / math.Max(sumOver, probFloorEps)
		changed := false
		for i := range p {
			switch {
			case !mask[i]:
				p[i] = 0
			case under[i]:
				p[i] = floor
			default:
				p[i] = float64(p0[i]) * scale
				// The first pass compares the softmax itself, as the
				// reference does; later passes compare the rescaled value.
				q := p[i]
				if nUnder == 0 {
					q = float64(p0[i])
				}
				if q < floor {
					under[i] = true
					changed = true
				}
			}
		}
		if !changed {
			break
		}
	}
	out := make([]float32, n)
	for i := range out {
		if mask[i] {
			out[i] = float32(math.Log(math.Max(p[i], probFloorEps)))
		} else {
			out[i] = leyline.MaskedLogitValue
		}
	}
	return out
}

// FlooredLogits returns the masked logits after the probability floor,
// the logits the distribution samples from.
func (d *MaskedCategorical) FlooredLogits() []float32 { return append([]float32(nil), d.logits...) }

// Probs returns the probabilities of every option (masked ones ≈ 0).
func (d *MaskedCategorical) Probs() []float32 { return append([]float32(nil), d.probs...) }

// Mask returns the validity mask.
func (d *MaskedCategorical) Mask() []bool { return append([]bool(nil), d.mask...) }

// NumValid returns the number of valid options.
func (d *MaskedCategorical) NumValid() int { return d.numValid }

// LogProb returns the log-probability of action under the floored
// distribution. An action out of range or masked is an error: a policy
// must never take it.
func (d *MaskedCategorical) LogProb(action int) (float32, error) {
	if action < 0 || action >= len(d.probs) {
		return 0, fmt.Errorf("tamiyo: MaskedCategorical.LogProb: action %d outside [0, %d)", action, len(d.probs))
	}
	if !d.mask[action] {
		return 0, fmt.Errorf("tamiyo: MaskedCategorical.LogProb: action %d is masked", action)
	}
	return d.logProbs[action], nil
}

// Sample draws an option from the floored distribution using r. Masked
// options are never drawn.
func (d *MaskedCategorical) Sample(r *rand.Rand) int {
	u := r.Float64()
	var acc float64
	last := -1
	for i, p := range d.probs {
		if !d.mask[i] {
			continue
		}
		last = i
		acc += float64(p)
		if u < acc {
			return i
		}
	}
	return last // rounding left u above the total
}

// Mode returns the most probable valid option (the lowest index on a
// tie): the deterministic action.
func (d *MaskedCategorical) Mode() int {
	best := -1
	for i, p := range d.probs {
		if d.mask[i] && (best < 0 || p > d.probs[best]) {
			best = i
		}
	}
	return best
}

// Entropy returns the entropy over the valid options divided by
// ln(NumValid), in [0, 1]; exactly 0 when only one option is valid.
func (d *MaskedCategorical) Entropy() float32 {
	if d.numValid <= 1 {
		return 0
	}
	var h float64
	for i, p := range d.probs {
		if d.mask[i] && p > 0 {
			h -= float64(p) * float64(d.logProbs[i])
		}
	}
	h /= math.Log(float64(d.numValid))
	return float32(math.Min(math.Max(h, 0), 1))
}

// RawEntropy returns the entropy in nats over the valid options, not
// normalised.
func (d *MaskedCategorical) RawEntropy() float32 {
	var h float64
	for i, p := range d.probs {
		if d.mask[i] && p > 0 {
			h -= float64(p) * float64(d.logProbs[i])
		}
	}
	return float32(math.Max(h, 0))
}
