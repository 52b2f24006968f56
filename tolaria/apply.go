package tolaria

import (
	"errors"
	"fmt"
	"math/rand/v2"

	"github.com/esper-go/esper/kasmina"
	"github.com/esper-go/esper/leyline"
)

// ApplyStatus says what ApplyDecision did.
type ApplyStatus int

// Apply statuses.
const (
	// ApplyNoop: the decision was WAIT; nothing to do.
	ApplyNoop ApplyStatus = iota
	// ApplyApplied: the op took effect.
	ApplyApplied
	// ApplyRejected: the op was well formed but Kasmina declined it (a
	// gate failed, the slot was busy or empty, an alpha ramp was
	// running, the transition is not allowed from the seed's stage).
	// This is an outcome, not an error.
	ApplyRejected
)

// String returns "noop", "applied" or "rejected".
func (s ApplyStatus) String() string {
	switch s {
	case ApplyNoop:
		return "noop"
	case ApplyApplied:
		return "applied"
	case ApplyRejected:
		return "rejected"
	}
	return fmt.Sprintf("ApplyStatus(%d)", int(s))
}

// ApplyResult is what ApplyDecision did.
type ApplyResult struct {
	Op     leyline.LifecycleOp
	SlotID string
	Status ApplyStatus
	// Reason explains a rejection ("" otherwise).
	Reason string
	// Gate is the gate evaluation of ADVANCE and FOSSILIZE, when one
	// ran.
	Gate *kasmina.GateResult
}

// Applied reports whether the op took effect.
func (r ApplyResult) Applied() bool { return r.Status == ApplyApplied }

// ApplyOptions configure ApplyDecision. The zero value acts for the
// policy with reproducible germination.
type ApplyOptions struct {
	// Initiator of prunes and alpha changes; zero means "policy".
	Initiator string
	// PruneReason is the reason recorded for PRUNE; zero means the
	// decision's Reason, or "policy_prune" when that is empty too.
	PruneReason string
	// RNG initialises germinated seeds; nil means an RNG seeded from the
	// seed id (kasmina's default).
	RNG *rand.Rand
}

// ApplyDecision carries out a controller's decision on the model:
//
//   - WAIT: nothing (ApplyNoop).
//   - GERMINATE: germinates d.Blueprint in d.SlotID with the style's
//     blend id and alpha algorithm, the tempo's epochs and the alpha
//     target's value; d.SeedID names the seed when set.
//   - ADVANCE: moves the seed to its next stage through that gate.
//   - FOSSILIZE: moves a HOLDING seed to FOSSILIZED through G5.
//   - PRUNE: at once when the speed is INSTANT, otherwise a scheduled
//     prune ramping alpha down over the speed's ticks along the curve.
//   - SET_ALPHA_TARGET: retargets alpha to the target's value over the
//     speed's ticks along the curve, with the style's alpha algorithm.
//
// An unknown op or slot, or a head value out of range for the op, is an
// error, as is a Kasmina failure (an unknown blueprint for the host's
// topology, for instance). A gate that fails, a busy or empty slot or a
// stage the op does not apply to is not an error: the result says
// ApplyRejected, with the reason.
func ApplyDecision(m *kasmina.MorphogeneticModel, d leyline.Decision, o ApplyOptions) (ApplyResult, error) {
	res := ApplyResult{Op: d.Op, SlotID: d.SlotID}
	if m == nil {
		return res, errors.New("tolaria: ApplyDecision: nil model")
	}
	if !d.Op.Valid() {
		return res, fmt.Errorf("tolaria: ApplyDecision: unknown op %v", d.Op)
	}
	if d.Op == leyline.OpWait {
		res.Status = ApplyNoop
		return res, nil
	}
	s, err := m.Slot(d.SlotID)
	if err != nil {
		return res, fmt.Errorf("tolaria: ApplyDecision %v: %w", d.Op, err)
	}
	reject := func(format string, args ...any) (ApplyResult, error) {
		res.Status, res.Reason = ApplyRejected, fmt.Sprintf(format, args...)
		return res, nil
	}
	applied := func() (ApplyResult, error) {
		res.Status = ApplyApplied
		return res, nil
	}
	initiator := o.Initiator
	if initiator == "" {
		initiator = kasmina.InitiatorPolicy
	}
	switch d.Op {
	case leyline.OpGerminate:
		switch {
		case !d.Blueprint.Valid():
			return res, fmt.Errorf("tolaria: ApplyDecision GERMINATE %s: invalid blueprint %v", d.SlotID, d.Blueprint)
		case !d.Style.Valid():
			return res, fmt.Errorf("tolaria: ApplyDecision GERMINATE %s: invalid style %v", d.SlotID, d.Style)
		case !d.Tempo.Valid():
			return res, fmt.Errorf("tolaria: ApplyDecision GERMINATE %s: invalid tempo %v", d.SlotID, d.Tempo)
		case !d.AlphaTarget.Valid():
			return res, fmt.Errorf("tolaria: ApplyDecision GERMINATE %s: invalid alpha target %v", d.SlotID, d.AlphaTarget)
		}
		err := s.Germinate(kasmina.GerminateOptions{
			Blueprint:        d.Blueprint.ID(),
			SeedID:           d.SeedID,
			BlendAlgorithmID: d.Style.BlendID(),
			AlphaAlgorithm:   d.Style.Algorithm(),
			Tempo:            d.Tempo.Epochs(),
			AlphaTarget:      d.AlphaTarget.Value(),
			RNG:              o.RNG,
		})
		if errors.Is(err, kasmina.ErrSlotUnavailable) {
			return reject("%v", err)
		}
		if err != nil {
			return res, fmt.Errorf("tolaria: ApplyDecision: %w", err)
		}
		return applied()

	case leyline.OpAdvance, leyline.OpFossilize:
		target := leyline.StageUnknown // the next stage
		if d.Op == leyline.OpFossilize {
			target = leyline.StageFossilized
		}
		if s.State() == nil {
			return reject("slot %s holds no seed", s.ID())
		}
		gate, err := s.AdvanceStage(target)
		if errors.Is(err, kasmina.ErrInvalidTransition) {
			return reject("%v", err)
		}
		if err != nil {
			return res, fmt.Errorf("tolaria: ApplyDecision: %w", err)
		}
		res.Gate = &gate
		if !gate.Passed {
			if gate.Message == "" {
				return reject("%v failed", gate.Gate)
			}
			return reject("%s", gate.Message) // "G2 failed: insufficient_epochs_in_stage"
		}
		return applied()

	case leyline.OpPrune:
		ramp, err := rampFor(d, initiator)
		if err != nil {
			return res, err
		}
		reason := o.PruneReason
		if reason == "" {
			reason = d.Reason
		}
		if reason == "" {
			reason = "policy_prune"
		}
		var ok bool
		if ramp.Steps == 0 {
			ok = s.Prune(reason, initiator)
		} else {
			ok = s.SchedulePrune(reason, ramp)
		}
		if !ok {
			return reject("cannot prune slot %s (%v, alpha mode %v)", s.ID(), s.Stage(), alphaMode(s))
		}
		return applied()

	case leyline.OpSetAlphaTarget:
		if !d.AlphaTarget.Valid() {
			return res, fmt.Errorf("tolaria: ApplyDecision SET_ALPHA_TARGET %s: invalid alpha target %v", d.SlotID, d.AlphaTarget)
		}
		if !d.Style.Valid() {
			return res, fmt.Errorf("tolaria: ApplyDecision SET_ALPHA_TARGET %s: invalid style %v", d.SlotID, d.Style)
		}
		ramp, err := rampFor(d, initiator)
		if err != nil {
			return res, err
		}
		ok, err := s.SetAlphaTarget(d.AlphaTarget.Value(), d.Style.Algorithm(), ramp)
		if err != nil {
			return res, fmt.Errorf("tolaria: ApplyDecision: %w", err)
		}
		if !ok {
			return reject("cannot retarget alpha of slot %s (%v, alpha mode %v)", s.ID(), s.Stage(), alphaMode(s))
		}
		return applied()
	}
	return res, fmt.Errorf("tolaria: ApplyDecision: unhandled op %v", d.Op)
}

// rampFor turns the decision's speed and curve heads into a ramp.
func rampFor(d leyline.Decision, initiator string) (kasmina.RampOptions, error) {
	if !d.AlphaSpeed.Valid() {
		return kasmina.RampOptions{}, fmt.Errorf("tolaria: ApplyDecision %v %s: invalid alpha speed %v", d.Op, d.SlotID, d.AlphaSpeed)
	}
	if !d.AlphaCurve.Valid() {
		return kasmina.RampOptions{}, fmt.Errorf("tolaria: ApplyDecision %v %s: invalid alpha curve %v", d.Op, d.SlotID, d.AlphaCurve)
	}
	return kasmina.RampOptions{
		Steps:     d.AlphaSpeed.Ticks(),
		Curve:     d.AlphaCurve.Curve(),
		Steepness: d.AlphaCurve.Steepness(),
		Initiator: initiator,
	}, nil
}

// alphaMode names the slot's alpha controller mode, for rejections.
func alphaMode(s *kasmina.Slot) string {
	st := s.State()
	if st == nil || st.AlphaController == nil {
		return "none"
	}
	return st.AlphaController.Mode.String()
}
