package runplot

import (
	"gonum.org/v1/plot/plotter"

	"github.com/esper-go/esper/leyline"
	"github.com/esper-go/esper/tolaria"
)

// FromSummary turns a trainer's epoch reports into what the plots draw. A
// germination is marked where the epoch's GERMINATE decision took
// effect, not where a seed is first seen: a resumed run's first epoch
// sees seeds that germinated before the resume. The other marks come
// from stage changes between epochs (and, for a seed the history has
// not seen yet, from the epoch's decision that moved it).
func FromSummary(sum tolaria.Summary, title string) History {
	h := History{Title: title, Alphas: map[string]plotter.XYs{}}
	prev := map[string]leyline.SeedStage{}
	for _, r := range sum.Epochs {
		e := r.Epoch + 1
		h.Epochs = append(h.Epochs, Point{Epoch: e, TrainLoss: r.TrainLoss, ValLoss: r.ValLoss, TrainAcc: r.TrainAccuracy, ValAcc: r.ValAccuracy})
		acted := "" // the slot the epoch's decision changed
		if r.Applied == tolaria.ApplyApplied {
			acted = r.Decision.SlotID
		}
		for _, s := range r.Seeds {
			p, seen := prev[s.SeedID]
			if !seen && s.SlotID == acted {
				// Unseen but changed by this epoch's decision: a
				// germination, or (the first epoch of a resumed run) a
				// move to the stage it is in now.
				p, seen = leyline.StageUnknown, true
			}
			switch {
			case !seen:
				// There before the history starts (a resumed run): no
				// stage to compare with.
			case p == leyline.StageUnknown && r.Decision.Op == leyline.OpGerminate:
				h.Marks = append(h.Marks, Mark{Epoch: e, Kind: "germinated", Seed: s.SeedID})
			case s.Stage != p && s.Stage == leyline.StageBlending:
				h.Marks = append(h.Marks, Mark{Epoch: e, Kind: "blending", Seed: s.SeedID})
			case s.Stage != p && s.Stage == leyline.StageFossilized:
				h.Marks = append(h.Marks, Mark{Epoch: e, Kind: "fossilized", Seed: s.SeedID})
			case s.Stage != p && leyline.IsFailureStage(s.Stage) && !leyline.IsFailureStage(p):
				// Pruned: the slot's epoch tick may already have moved it
				// on to EMBARGOED by the time the epoch reports.
				h.Marks = append(h.Marks, Mark{Epoch: e, Kind: "pruned", Seed: s.SeedID})
			}
			prev[s.SeedID] = s.Stage
			h.Alphas[s.SeedID] = append(h.Alphas[s.SeedID], plotter.XY{X: float64(e), Y: s.Alpha})
		}
	}
	return h
}
