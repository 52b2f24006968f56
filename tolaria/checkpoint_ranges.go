package tolaria

import (
	"encoding/json"
	"fmt"
	"math"
	"time"

	"github.com/esper-go/esper/tolaria/rollback"
)

// A checkpoint's checksums prove that its bytes are the ones written, not
// that they make sense: a damaged writer, or a hand, can sign anything.
// So every number the trainer reads back from a checkpoint's metadata is
// checked against what a trainer can have written before any of it is
// used, and a refusal names the field.

// maxCount bounds the counters a checkpoint holds (steps, lifecycle
// counts, capture fallbacks): 2^53, the largest integer telemetry's
// float64 values carry exactly, and far from overflowing when counted on.
const maxCount = 1 << 53

// rangeError is a checkpoint value out of range.
func rangeError(field string, v any, want string) error {
	return fmt.Errorf("checkpoint field %s = %v is out of range (want %s)", field, v, want)
}

// decodeTrainerMeta decodes st's trainer document, checks every number
// in it and in st.Meta, and returns it with the index of the epoch st
// was taken after (see trainerMeta.OneBased).
func decodeTrainerMeta(st rollback.State) (tm trainerMeta, last int, err error) {
	raw, ok := st.Meta.Extra["trainer"]
	if !ok {
		return tm, 0, fmt.Errorf("checkpoint has no trainer state")
	}
	if err := json.Unmarshal(raw, &tm); err != nil {
		return tm, 0, fmt.Errorf("trainer state: %w", err)
	}
	if tm.OneBased {
		if e := st.Meta.Epoch; e < 1 || e > MaxEpochs {
			return tm, 0, rangeError("epoch", e, fmt.Sprintf("1 to %d", MaxEpochs))
		}
		last = st.Meta.Epoch - 1
	} else {
		// Written before epochs were numbered from 1: the index.
		if e := st.Meta.Epoch; e < 0 || e >= MaxEpochs {
			return tm, 0, rangeError("epoch", e, fmt.Sprintf("0 to %d in a checkpoint that numbers epochs from 0", MaxEpochs-1))
		}
		last = st.Meta.Epoch
	}
	if err := tm.check(st.Meta.GlobalStep); err != nil {
		return tm, 0, err
	}
	return tm, last, nil
}

// check checks the trainer document's numbers and the state's global
// step.
func (tm *trainerMeta) check(globalStep int64) error {
	if globalStep < 0 || globalStep > maxCount {
		return rangeError("global_step", globalStep, "0 to 2^53")
	}
	for _, c := range []struct {
		name string
		v    int
	}{
		{"trainer.Germinated", tm.Germinated}, {"trainer.Fossilized", tm.Fossilized}, {"trainer.Pruned", tm.Pruned},
		{"trainer.CaptureFallbacks", tm.CaptureFallbacks}, {"trainer.EpochsFailed", tm.EpochsFailed},
	} {
		if c.v < 0 || c.v > maxCount {
			return rangeError(c.name, c.v, "0 to 2^53")
		}
	}
	for id, stage := range tm.LastSeeds {
		if id == "" || !stage.Valid() {
			return rangeError(fmt.Sprintf("trainer.LastSeeds[%q]", id), stage, "a seed id and a seed stage")
		}
	}
	for i := range tm.History {
		if err := tm.History[i].check(fmt.Sprintf("trainer.History[%d]", i)); err != nil {
			return err
		}
	}
	return nil
}

// check checks an epoch record's numbers; at names it in errors.
func (rec *epochRecord) check(at string) error {
	ints := []struct {
		name   string
		v, lo  int
		hi     int
		expect string
	}{
		{"Epoch", rec.Epoch, 1, MaxEpochs, fmt.Sprintf("1 to %d", MaxEpochs)},
		{"RestoredFrom", rec.EpochReport.RestoredFrom, -1, rec.Epoch - 2, "-1, or an epoch index before the record's epoch"},
		{"Steps", rec.EpochReport.Steps, 0, maxCount, "0 to 2^53"},
		{"AggregatedSteps", rec.EpochReport.AggregatedSteps, 0, rec.EpochReport.Steps, "0 to the epoch's steps"},
	}
	for _, c := range ints {
		if c.v < c.lo || c.v > c.hi {
			return rangeError(at+"."+c.name, c.v, c.expect)
		}
	}
	for _, d := range []struct {
		name string
		v    time.Duration
	}{{"Duration", rec.EpochReport.Duration}, {"StepP50", rec.EpochReport.StepP50}, {"StepP95", rec.EpochReport.StepP95}} {
		if d.v < 0 {
			return rangeError(at+"."+d.name, d.v, "a duration ≥ 0")
		}
	}
	// A diverged epoch's losses are NaN or +Inf, and its accuracies may
	// be NaN; a loss is never negative and an accuracy is a percentage.
	for _, f := range []struct {
		name string
		v    float64
		ok   bool
	}{
		{"TrainLoss", float64(rec.TrainLoss), lossOK(float64(rec.TrainLoss))},
		{"ValLoss", float64(rec.ValLoss), lossOK(float64(rec.ValLoss))},
		{"TrainAccuracy", float64(rec.TrainAccuracy), percentOK(float64(rec.TrainAccuracy))},
		{"ValAccuracy", float64(rec.ValAccuracy), percentOK(float64(rec.ValAccuracy))},
		{"ConflictRatio", float64(rec.ConflictRatio), nonNegOK(float64(rec.ConflictRatio))},
		{"TeacherShare", float64(rec.TeacherShare), nonNegOK(float64(rec.TeacherShare))},
		{"Decision.Confidence", float64(rec.Decision.Confidence), unitOK(float64(rec.Decision.Confidence))},
	} {
		if !f.ok {
			return rangeError(at+"."+f.name, f.v, wantFor(f.name))
		}
	}
	for j, s := range rec.Seeds {
		sat := fmt.Sprintf("%s.Seeds[%d]", at, j)
		switch {
		case !unitOK(float64(s.Alpha)):
			return rangeError(sat+".Alpha", float64(s.Alpha), "NaN or 0 to 1")
		case !unitOK(float64(s.AlphaTarget)):
			return rangeError(sat+".AlphaTarget", float64(s.AlphaTarget), "NaN or 0 to 1")
		case math.IsInf(float64(s.ImprovementSinceStageStart), 0):
			return rangeError(sat+".ImprovementSinceStageStart", float64(s.ImprovementSinceStageStart), "NaN or finite")
		case math.IsInf(float64(s.TotalImprovement), 0):
			return rangeError(sat+".TotalImprovement", float64(s.TotalImprovement), "NaN or finite")
		case s.Counterfactual != nil && math.IsInf(float64(*s.Counterfactual), 0):
			return rangeError(sat+".Counterfactual", float64(*s.Counterfactual), "NaN or finite")
		case s.SeedReport.EpochsInStage < 0 || s.SeedReport.EpochsInStage > MaxEpochs:
			return rangeError(sat+".EpochsInStage", s.SeedReport.EpochsInStage, fmt.Sprintf("0 to %d", MaxEpochs))
		case s.SeedReport.EpochsTotal < 0 || s.SeedReport.EpochsTotal > MaxEpochs:
			return rangeError(sat+".EpochsTotal", s.SeedReport.EpochsTotal, fmt.Sprintf("0 to %d", MaxEpochs))
		case !s.SeedReport.Stage.Valid():
			return rangeError(sat+".Stage", s.SeedReport.Stage, "a seed stage")
		}
	}
	return nil
}

func lossOK(v float64) bool    { return math.IsNaN(v) || v >= 0 }
func percentOK(v float64) bool { return math.IsNaN(v) || (v >= 0 && v <= 100) }
func nonNegOK(v float64) bool  { return math.IsNaN(v) || (v >= 0 && !math.IsInf(v, 0)) }
func unitOK(v float64) bool    { return math.IsNaN(v) || (v >= 0 && v <= 1) }

func wantFor(name string) string {
	switch name {
	case "TrainLoss", "ValLoss":
		return "NaN, +Inf or ≥ 0"
	case "TrainAccuracy", "ValAccuracy":
		return "NaN or 0 to 100"
	case "Decision.Confidence":
		return "NaN or 0 to 1"
	}
	return "NaN or finite and ≥ 0"
}
