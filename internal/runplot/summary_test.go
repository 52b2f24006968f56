package runplot

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/esper-go/esper/leyline"
	"github.com/esper-go/esper/tolaria"
)

// TestHistoryMarks: lifecycle marks come from stage changes between
// epochs, a prune included when the seed is already EMBARGOED when the
// epoch reports.
func TestHistoryMarks(t *testing.T) {
	seed := func(stage leyline.SeedStage, alpha float64) []leyline.SeedReport {
		return []leyline.SeedReport{{SeedID: "r0c0-norm", SlotID: "r0c0", Stage: stage, Alpha: alpha}}
	}
	germinate := leyline.Decision{Op: leyline.OpGerminate, SlotID: "r0c0", Blueprint: leyline.BlueprintNorm}
	sum := tolaria.Summary{Epochs: []tolaria.EpochReport{
		{Epoch: 0},
		{Epoch: 1, Seeds: seed(leyline.StageGerminated, 0), Decision: germinate, Applied: tolaria.ApplyApplied},
		{Epoch: 2, Seeds: seed(leyline.StageBlending, 0.5)},
		{Epoch: 3, Seeds: seed(leyline.StageEmbargoed, 0)},
	}}
	h := FromSummary(sum, "t")
	require.Equal(t, []string{"2:germinated", "3:blending", "4:pruned"}, markList(h))
	require.Len(t, h.Alphas["r0c0-norm"], 3)
	require.Len(t, h.Epochs, 4)
}

func markList(h History) []string {
	var kinds []string
	for _, m := range h.Marks {
		kinds = append(kinds, fmt.Sprintf("%d:%s", m.Epoch, m.Kind))
	}
	return kinds
}

// TestHistoryAfterResume: a resumed run's history starts with seeds it
// has not seen germinate; none of them is marked germinated (the false
// marker at the first epoch after a resume), a seed the first epoch's
// decision moved is marked with its new stage, and a germination after
// the resume is marked where the GERMINATE took effect.
func TestHistoryAfterResume(t *testing.T) {
	rep := func(slot, seed string, stage leyline.SeedStage) leyline.SeedReport {
		return leyline.SeedReport{SeedID: seed, SlotID: slot, Stage: stage}
	}
	sum := tolaria.Summary{Epochs: []tolaria.EpochReport{
		// The checkpoint's seeds: r0c0 germinated in the epoch before the
		// resume (still GERMINATED), r0c1 is training, r1c0 blends in
		// now through this epoch's ADVANCE.
		{Epoch: 20, Seeds: []leyline.SeedReport{rep("r0c0", "a", leyline.StageGerminated), rep("r0c1", "b", leyline.StageTraining), rep("r1c0", "c", leyline.StageBlending)},
			Decision: leyline.Decision{Op: leyline.OpAdvance, SlotID: "r1c0"}, Applied: tolaria.ApplyApplied},
		// A refused GERMINATE marks nothing.
		{Epoch: 21, Seeds: []leyline.SeedReport{rep("r0c0", "a", leyline.StageTraining), rep("r0c1", "b", leyline.StageTraining), rep("r1c0", "c", leyline.StageBlending)},
			Decision: leyline.Decision{Op: leyline.OpGerminate, SlotID: "r0c1"}, Applied: tolaria.ApplyRejected},
		{Epoch: 22, Seeds: []leyline.SeedReport{rep("r0c0", "a", leyline.StageTraining), rep("r0c1", "b", leyline.StageTraining), rep("r1c0", "c", leyline.StageBlending), rep("r1c1", "d", leyline.StageGerminated)},
			Decision: leyline.Decision{Op: leyline.OpGerminate, SlotID: "r1c1"}, Applied: tolaria.ApplyApplied},
	}}
	var marks []string
	for _, m := range FromSummary(sum, "resumed").Marks {
		marks = append(marks, fmt.Sprintf("%d:%s:%s", m.Epoch, m.Kind, m.Seed))
	}
	require.Equal(t, []string{"21:blending:c", "23:germinated:d"}, marks)
}
