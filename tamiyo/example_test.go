package tamiyo_test

import (
	"fmt"
	"math/rand/v2"

	"github.com/esper-go/esper/bench"
	"github.com/esper-go/esper/leyline"
	"github.com/esper-go/esper/tamiyo"
)

// Eight epochs of a host that improves fast, then levels off. The tracker
// latches host stabilisation after three epochs of < 3% loss
// improvement; once the accuracy has plateaued for three epochs and the
// fifth epoch is reached, the heuristic germinates the first blueprint of
// the rotation in the first empty slot and then walks the new seed
// through its stages. The tracker is run by hand here to show the
// signals, and Decide takes them as they are; a trainer just calls the
// heuristic's EvaluateEpoch with the raw figures, and the heuristic's own
// tracker derives the same signals.
func Example() {
	tracker, err := tamiyo.NewSignalTracker(tamiyo.TrackerOptions{})
	if err != nil {
		panic(err)
	}
	ctrl, err := tamiyo.NewHeuristic(tamiyo.HeuristicOptions{Topology: leyline.TopologyCNN})
	if err != nil {
		panic(err)
	}
	slots := leyline.DefaultSlotConfig()

	valLoss := []float64{2.0, 1.2, 1.19, 1.18, 1.175, 1.17, 1.168, 1.166}
	valAcc := []float64{40, 60, 60.3, 60.5, 60.6, 60.7, 60.8, 60.9}
	var seeds []leyline.SeedReport // what Kasmina would report

	for epoch := range valLoss {
		sig, err := tracker.Update(tamiyo.EpochResult{
			Epoch: epoch, ValLoss: valLoss[epoch], ValAccuracy: valAcc[epoch],
			Seeds: seeds, AvailableSlots: slots.Len() - len(seeds),
		})
		if err != nil {
			panic(err)
		}
		d := ctrl.Decide(leyline.EpochState{
			Signals: sig, Seeds: seeds, Slots: slots, Topology: leyline.TopologyCNN,
		})
		fmt.Printf("epoch %d stabilized=%d plateau=%d: %v\n", epoch+1, sig.Metrics.HostStabilized, sig.Metrics.PlateauEpochs, d)

		// Stand-in for Kasmina applying the decision.
		switch d.Op {
		case leyline.OpGerminate:
			seeds = []leyline.SeedReport{{SeedID: "seed-1", SlotID: d.SlotID, BlueprintID: d.Blueprint.ID(), Stage: leyline.StageGerminated}}
		case leyline.OpAdvance:
			seeds[0].Stage, _ = leyline.NextStage(seeds[0].Stage)
		}
	}
	// Output:
	// epoch 1 stabilized=0 plateau=0: WAIT (Host not stabilized)
	// epoch 2 stabilized=0 plateau=0: WAIT (Host not stabilized)
	// epoch 3 stabilized=0 plateau=1: WAIT (Host not stabilized)
	// epoch 4 stabilized=0 plateau=2: WAIT (Host not stabilized)
	// epoch 5 stabilized=1 plateau=3: WAIT (Too early (epoch 5 ≤ 5))
	// epoch 6 stabilized=1 plateau=4: GERMINATE r0c0 conv_light (Plateau detected (4 epochs))
	// epoch 7 stabilized=1 plateau=5: ADVANCE r0c0 (Advance to TRAINING)
	// epoch 8 stabilized=1 plateau=6: ADVANCE r0c0 (Advance to BLENDING (improvement +0.00%))
}

// Sampling the op head with its default probability floor: masked ops
// get no probability and every valid op keeps at least the floor.
func ExampleMaskedCategorical() {
	logits := []float32{4, 0, -3, 1, -8, 0}
	mask := []bool{true, false, false, true, true, false}
	d, err := tamiyo.NewMaskedCategorical(logits, mask, tamiyo.ProbabilityFloorPerHead[leyline.HeadOp])
	if err != nil {
		panic(err)
	}
	for i, p := range d.Probs() {
		fmt.Printf("%-16s %.3f\n", leyline.OpNames[i], p)
	}
	fmt.Println("mode:", leyline.OpNames[d.Mode()])
	fmt.Printf("entropy: %.3f\n", d.Entropy())
	r := rand.New(rand.NewPCG(1, 2))
	fmt.Println("sample is valid:", mask[d.Sample(r)])
	// Output:
	// WAIT             0.700
	// GERMINATE        0.000
	// SET_ALPHA_TARGET 0.000
	// PRUNE            0.150
	// FOSSILIZE        0.150
	// ADVANCE          0.000
	// mode: WAIT
	// entropy: 0.745
	// sample is valid: true
}

// An Inference times the host's part of each forward: building and
// uploading the graph's tensors, running (or, on a GPU, enqueuing) the
// captured forward, and reading the logits back. Here, on the CPU, after
// an eager warm-up and the capture, the third forward is a replay.
func ExampleInference_LastPhases() {
	p, err := tamiyo.NewPolicy(tamiyo.PolicyOptions{Seed: 1, NoDropout: true})
	if err != nil {
		panic(err)
	}
	in, err := tamiyo.NewInference(p, tamiyo.InferenceOptions{})
	if err != nil {
		panic(err)
	}
	g, err := bench.W2Graph(4) // four environments' graphs in one batch
	if err != nil {
		panic(err)
	}
	var lg *tamiyo.Logits
	for i := 0; i < 3; i++ {
		if lg, err = in.Forward(g); err != nil {
			panic(err)
		}
	}
	ph := in.LastPhases()
	fmt.Println(len(lg.Values), "values; every phase timed:", ph.Upload > 0 && ph.Run > 0 && ph.Read > 0)
	fmt.Println("captured:", in.Stats().Captures, "graph")
	// Output:
	// 4 values; every phase timed: true
	// captured: 1 graph
}
