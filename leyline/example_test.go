package leyline_test

import (
	"fmt"

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
