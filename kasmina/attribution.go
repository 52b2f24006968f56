package kasmina

import (
	"github.com/esper-go/esper/leyline"
	"github.com/esper-go/esper/tensor"
)

// AttributeBatch splits the credit for a batch among the seeds (G1
// Kasmina attribute_batch, with its intended rule): uniformly over the
// seeds in TRAINING or BLENDING if there are any, else uniformly over
// every seed the model holds a module for (GERMINATED, HOLDING,
// FOSSILIZED), and an empty map when there is none. The weights sum to 1.
// inputs and targets are accepted for interface compatibility with
// attribution rules that look at the batch; this rule does not read them
// (so it never synchronises with a device).
func (m *MorphogeneticModel) AttributeBatch(inputs, targets *tensor.Tensor) map[string]float64 {
	_, _ = inputs, targets
	var learning, all []string
	for _, s := range m.slots {
		if s.state == nil || s.seed == nil {
			continue
		}
		all = append(all, s.state.SeedID)
		if st := s.state.Stage; st == leyline.StageTraining || st == leyline.StageBlending {
			learning = append(learning, s.state.SeedID)
		}
	}
	ids := learning
	if len(ids) == 0 {
		ids = all
	}
	out := make(map[string]float64, len(ids))
	for _, id := range ids {
		out[id] = 1 / float64(len(ids))
	}
	return out
}

// SeedExport is one seed's exported state (G1 Kasmina
// export_seed_states, adapted to G2 slots).
type SeedExport struct {
	SeedID string
	SlotID string
	Stage  leyline.SeedStage
	// AgeEpochs is the seed's age, SeedMetrics.EpochsTotal (G1 used the
	// manager's global epoch; a G2 slot counts per seed).
	AgeEpochs int
	// Metrics holds "alpha", "alpha_steps" (the controller's steps done),
	// "alpha_total_steps" (its ramp length; G1's fixed 20),
	// "alpha_steepness" (G1's alpha_temperature has no G2 counterpart)
	// and "blend_allowed" (1 in BLENDING, HOLDING and FOSSILIZED, else 0).
	Metrics map[string]float64
}

// ExportSeedStates returns one SeedExport per slot that holds a seed
// state (failure-path states included), in timeline order.
func (m *MorphogeneticModel) ExportSeedStates() []SeedExport {
	var out []SeedExport
	for _, s := range m.slots {
		st := s.state
		if st == nil {
			continue
		}
		blend := 0.0
		switch st.Stage {
		case leyline.StageBlending, leyline.StageHolding, leyline.StageFossilized:
			blend = 1
		}
		c := st.AlphaController
		out = append(out, SeedExport{
			SeedID: st.SeedID, SlotID: s.id, Stage: st.Stage, AgeEpochs: st.Metrics.EpochsTotal,
			Metrics: map[string]float64{
				"alpha":             st.Alpha,
				"alpha_steps":       float64(c.StepsDone),
				"alpha_total_steps": float64(c.StepsTotal),
				"alpha_steepness":   c.Steepness,
				"blend_allowed":     blend,
			},
		})
	}
	return out
}
