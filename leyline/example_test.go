package leyline_test

import (
	"fmt"
	"math/rand/v2"

	"github.com/esper-go/esper/leyline"
)

// A HOLDING seed in r0c0, an empty r0c1 and a TRAINING seed in r0c2:
// the TRAINING seed blocks germination ("sequential development").
func ExampleComputeActionMasks() {
	slots := leyline.DefaultSlotConfig()
	m, err := leyline.ComputeActionMasks(leyline.MaskInput{
		Slots:        slots,
		EnabledSlots: slots.IDs(),
		SlotStates: map[string]*leyline.MaskSlotState{
			"r0c0": {Stage: leyline.StageHolding, SeedAgeEpochs: 12, AlphaMode: leyline.AlphaHold},
			"r0c1": nil,
			"r0c2": {Stage: leyline.StageTraining, SeedAgeEpochs: 2, AlphaMode: leyline.AlphaHold},
		},
		Topology: leyline.TopologyCNN,
	})
	if err != nil {
		panic(err)
	}
	for op, ok := range m.Op() {
		if ok {
			fmt.Println(leyline.OpNames[op], m.SlotByOp[op])
		}
	}
	// Output:
	// WAIT [true true true]
	// SET_ALPHA_TARGET [true false false]
	// PRUNE [true false false]
	// FOSSILIZE [true false false]
	// ADVANCE [false false true]
}

// Sampling the op head with its default probability floor: masked ops
// get no probability and every valid op keeps at least the floor.
func ExampleMaskedCategorical() {
	logits := []float32{4, 0, -3, 1, -8, 0}
	mask := []bool{true, false, false, true, true, false}
	d, err := leyline.NewMaskedCategorical(logits, mask, leyline.ProbabilityFloorPerHead[leyline.HeadOp])
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
