package tamiyo

import (
	"errors"
	"fmt"

	"github.com/esper-go/esper/leyline"
)

// EncodeOptions configure EncodeState. Layers is required; the zero
// values of the rest are the defaults.
type EncodeOptions struct {
	// Layers are the host's blocks (with their norms where measured).
	// Slots a block lists that are not in the state's slot configuration
	// are ignored.
	Layers []LayerState
	// LastOp is the op of the previous decision (WAIT before the first).
	LastOp leyline.LifecycleOp
	// LastActionFailed reports that the previous decision did not take
	// effect (a rejected or vetoed op); the zero value reports a success,
	// which is what the inference service assumes.
	LastActionFailed bool
	// MaxEpochs scales the epoch counts (default
	// leyline.DefaultEpisodeLength).
	MaxEpochs int
	// MaxSeeds caps the live seeds for the germination mask (0 =
	// unlimited).
	MaxSeeds int
}

// EncodeState turns one environment's epoch state (signals as a
// SignalTracker derives them, seeds, slots, topology) into the policy's
// graph and action masks. The inference service and Simic's training
// environments both encode through it, so a policy is trained on exactly
// the input it is deployed on. Errors wrap ErrServiceInput.
func EncodeState(st leyline.EpochState, o EncodeOptions) (*Graph, leyline.ActionMasks, error) {
	bad := func(err error) error {
		return fmt.Errorf("tamiyo: EncodeState: %w: %w", ErrServiceInput, err)
	}
	if o.MaxEpochs == 0 {
		o.MaxEpochs = leyline.DefaultEpisodeLength
	}
	ids := st.Slots.IDs()
	if len(ids) == 0 {
		return nil, leyline.ActionMasks{}, bad(errors.New("no slots"))
	}
	obsStates := make(map[string]*leyline.ObsSlotState, len(ids))
	maskStates := make(map[string]*leyline.MaskSlotState, len(ids))
	for _, id := range ids {
		obsStates[id], maskStates[id] = nil, nil
	}
	live := 0
	for _, r := range st.Seeds {
		if isEmptySlotStage(r.Stage) {
			continue
		}
		if !st.Slots.Contains(r.SlotID) {
			return nil, leyline.ActionMasks{}, bad(fmt.Errorf("seed %q is in slot %q, which is not in the slot configuration %v", r.SeedID, r.SlotID, ids))
		}
		if obsStates[r.SlotID] != nil {
			return nil, leyline.ActionMasks{}, bad(fmt.Errorf("two seeds in slot %q", r.SlotID))
		}
		if !leyline.IsFailureStage(r.Stage) {
			live++
		}
		obsStates[r.SlotID] = &leyline.ObsSlotState{
			Stage: r.Stage, BlueprintID: r.BlueprintID, Alpha: r.Alpha,
			CounterfactualContribution: r.Counterfactual,
			AlphaTarget:                r.AlphaTarget, AlphaMode: r.AlphaMode,
			// A SeedReport does not carry the blend algorithm: encoded
			// as ADD, the G2 default.
			AlphaAlgorithm: leyline.BlendAdd,
			EpochsInStage:  r.EpochsInStage, EpochsTotal: r.EpochsTotal,
		}
		maskStates[r.SlotID] = &leyline.MaskSlotState{Stage: r.Stage, SeedAgeEpochs: r.EpochsTotal, AlphaMode: r.AlphaMode}
	}
	masks, err := leyline.ComputeActionMasks(leyline.MaskInput{
		Slots: st.Slots, EnabledSlots: ids, SlotStates: maskStates,
		TotalSeeds: live, MaxSeeds: o.MaxSeeds, Topology: st.Topology,
	})
	if err != nil {
		return nil, leyline.ActionMasks{}, bad(err)
	}
	layers := make([]LayerState, 0, len(o.Layers))
	for _, l := range o.Layers {
		l.Block.Slots = keepSlots(l.Block.Slots, st.Slots)
		layers = append(layers, l)
	}
	g, err := BuildGraph(GraphInput{
		Obs: leyline.ObsInput{
			Signals: st.Signals, MaxEpochs: o.MaxEpochs,
			LastActionSuccess: !o.LastActionFailed, LastOp: o.LastOp,
			Slots: st.Slots, SlotStates: obsStates,
		},
		Layers: layers,
	})
	if err != nil {
		return nil, leyline.ActionMasks{}, bad(err)
	}
	return g, masks, nil
}
