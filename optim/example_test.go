package optim_test

import (
	"fmt"

	"github.com/esper-go/esper/optim"
)

// A cosine schedule with a linear warm-up over the first 3 epochs, applied
// once per epoch with optim.Apply(opt, s, epoch).
func ExampleWarmup() {
	s := optim.Warmup{Inner: optim.Cosine{Base: 0.1, Min: 0.001, TMax: 10}, Steps: 3, StartFactor: 0.1}
	if err := optim.ValidateSchedule(s); err != nil {
		panic(err)
	}
	for epoch := 0; epoch <= 10; epoch += 2 {
		fmt.Printf("epoch %2d: lr %.4f\n", epoch, s.LR(epoch))
	}
	// Output:
	// epoch  0: lr 0.0100
	// epoch  2: lr 0.0634
	// epoch  4: lr 0.0658
	// epoch  6: lr 0.0352
	// epoch  8: lr 0.0105
	// epoch 10: lr 0.0010
}
