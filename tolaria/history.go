package tolaria

import (
	"encoding/json"
	"fmt"
	"math"
	"strconv"

	"github.com/esper-go/esper/leyline"
)

// A checkpoint keeps the epoch reports of the run so far (the latest
// TrainerOptions.History when set), so that a resumed trainer's Summary
// covers the whole run: a run resumed after its last epoch still reports
// its final figures, and the plots drawn from it start at epoch 1.

// epochRecord is an EpochReport as a checkpoint stores it: the epoch's
// 1-based number, and floats that may be NaN or infinite (a diverged
// loss) as jsonFloat. The embedded report's fields of the same names are
// shadowed, so each is written once.
type epochRecord struct {
	EpochReport
	Epoch                                          int
	TrainLoss, ValLoss, TrainAccuracy, ValAccuracy jsonFloat
	ConflictRatio, TeacherShare                    jsonFloat
	Decision                                       decisionRecord
	Seeds                                          []seedRecord `json:",omitempty"`
}

type decisionRecord struct {
	leyline.Decision
	Confidence jsonFloat
}

type seedRecord struct {
	leyline.SeedReport
	Alpha, AlphaTarget                           jsonFloat
	ImprovementSinceStageStart, TotalImprovement jsonFloat
	Counterfactual                               *jsonFloat `json:",omitempty"`
}

func newEpochRecord(r EpochReport) epochRecord {
	rec := epochRecord{
		EpochReport: r, Epoch: r.Epoch + 1,
		TrainLoss: jsonFloat(r.TrainLoss), ValLoss: jsonFloat(r.ValLoss),
		TrainAccuracy: jsonFloat(r.TrainAccuracy), ValAccuracy: jsonFloat(r.ValAccuracy),
		ConflictRatio: jsonFloat(r.ConflictRatio), TeacherShare: jsonFloat(r.TeacherShare),
		Decision: decisionRecord{Decision: r.Decision, Confidence: jsonFloat(r.Decision.Confidence)},
	}
	rec.EpochReport.Seeds = nil
	for _, s := range r.Seeds {
		sr := seedRecord{
			SeedReport: s, Alpha: jsonFloat(s.Alpha), AlphaTarget: jsonFloat(s.AlphaTarget),
			ImprovementSinceStageStart: jsonFloat(s.ImprovementSinceStageStart), TotalImprovement: jsonFloat(s.TotalImprovement),
		}
		if s.Counterfactual != nil {
			c := jsonFloat(*s.Counterfactual)
			sr.Counterfactual = &c
		}
		rec.Seeds = append(rec.Seeds, sr)
	}
	return rec
}

func (rec epochRecord) report() EpochReport {
	r := rec.EpochReport
	r.Epoch = rec.Epoch - 1
	r.TrainLoss, r.ValLoss = float64(rec.TrainLoss), float64(rec.ValLoss)
	r.TrainAccuracy, r.ValAccuracy = float64(rec.TrainAccuracy), float64(rec.ValAccuracy)
	r.ConflictRatio, r.TeacherShare = float64(rec.ConflictRatio), float64(rec.TeacherShare)
	r.Decision = rec.Decision.Decision
	r.Decision.Confidence = float64(rec.Decision.Confidence)
	r.Seeds = nil
	for _, sr := range rec.Seeds {
		s := sr.SeedReport
		s.Alpha, s.AlphaTarget = float64(sr.Alpha), float64(sr.AlphaTarget)
		s.ImprovementSinceStageStart, s.TotalImprovement = float64(sr.ImprovementSinceStageStart), float64(sr.TotalImprovement)
		s.Counterfactual = nil
		if sr.Counterfactual != nil {
			c := float64(*sr.Counterfactual)
			s.Counterfactual = &c
		}
		r.Seeds = append(r.Seeds, s)
	}
	return r
}

// historyRecords returns the summary's reports, oldest first, as records.
func (t *Trainer) historyRecords() []epochRecord {
	eps := t.Summary().Epochs
	out := make([]epochRecord, len(eps))
	for i, r := range eps {
		out[i] = newEpochRecord(r)
	}
	return out
}

// restoreHistory replaces the summary's reports with recs (the latest
// History of them when History is set).
func (t *Trainer) restoreHistory(recs []epochRecord) {
	if h := t.o.History; h > 0 && len(recs) > h {
		recs = recs[len(recs)-h:]
	}
	eps := make([]EpochReport, len(recs), max(len(recs), t.o.History))
	for i, rec := range recs {
		eps[i] = rec.report()
	}
	t.summary.Epochs, t.histHead = eps, 0
}

// jsonFloat is a float64 whose JSON form is a number, or "NaN",
// "Infinity" or "-Infinity" (leyline's convention for events).
type jsonFloat float64

// MarshalJSON implements json.Marshaler.
func (f jsonFloat) MarshalJSON() ([]byte, error) {
	v := float64(f)
	switch {
	case math.IsNaN(v):
		return []byte(`"NaN"`), nil
	case math.IsInf(v, 1):
		return []byte(`"Infinity"`), nil
	case math.IsInf(v, -1):
		return []byte(`"-Infinity"`), nil
	}
	return strconv.AppendFloat(nil, v, 'g', -1, 64), nil
}

// UnmarshalJSON implements json.Unmarshaler.
func (f *jsonFloat) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err == nil {
		switch s {
		case "NaN":
			*f = jsonFloat(math.NaN())
		case "Infinity":
			*f = jsonFloat(math.Inf(1))
		case "-Infinity":
			*f = jsonFloat(math.Inf(-1))
		default:
			return fmt.Errorf("tolaria: %q is not a number", s)
		}
		return nil
	}
	var v float64
	if err := json.Unmarshal(b, &v); err != nil {
		return err
	}
	*f = jsonFloat(v)
	return nil
}
