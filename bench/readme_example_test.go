package bench_test

import (
	"fmt"

	"github.com/esper-go/esper/autograd"
	"github.com/esper-go/esper/kernels"
	"github.com/esper-go/esper/nn"
	"github.com/esper-go/esper/optim"
	"github.com/esper-go/esper/tensor"
)

// Example_readme is the README's library example: an MLP trained with
// SGD-momentum on random data.
func Example_readme() {
	rng := tensor.NewRNG(1)
	model := nn.MustMLP(rng, nn.MLPOptions{Sizes: []int{8, 16, 4}}) // Linear → ReLU → Linear
	opt, err := optim.NewSGD(model.Parameters(), optim.SGDOptions{LR: 0.1, Momentum: 0.9})
	if err != nil {
		panic(err)
	}
	x := autograd.Const(tensor.Normal(rng, tensor.F32, 0, 1, 32, 8))
	y := tensor.RandInt(rng, 4, 32)
	var first, last float64
	for step := 0; step < 100; step++ {
		opt.ZeroGrad()
		loss := autograd.CrossEntropy(model.Forward(x), y, kernels.CrossEntropyParams{})
		autograd.Backward(loss)
		opt.Step()
		if step == 0 {
			first = loss.Item()
		}
		last = loss.Item()
	}
	fmt.Println("loss fell by more than half:", last < first/2)
	// Output: loss fell by more than half: true
}
