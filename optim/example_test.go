package optim_test

import (
	"fmt"

	"github.com/esper-go/esper/autograd"
	"github.com/esper-go/esper/kernels"
	"github.com/esper-go/esper/nn"
	"github.com/esper-go/esper/optim"
	"github.com/esper-go/esper/tensor"
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

// Minimise (w−3)² by gradient descent. NewSGD moves w into the optimizer's
// arena, on w's device; the model keeps using w as before.
func ExampleNewSGD() {
	w := autograd.Param(toDevice(tensor.Scalar(tensor.F32, 0)))
	opt, err := optim.NewSGD([]*autograd.Var{w}, optim.SGDOptions{LR: 0.1, Momentum: 0.5})
	if err != nil {
		panic(err)
	}
	for step := 0; step < 60; step++ {
		opt.ZeroGrad()
		d := autograd.AddScalar(w, -3)
		autograd.Backward(autograd.Mul(d, d))
		opt.Step()
	}
	fmt.Printf("w = %.4f after %d steps\n", onHost(w.Value).Item(), opt.StepCount())
	// Output: w = 3.0000 after 60 steps
}

// The same descent with the gradient zeroed by each step itself: one
// ZeroGrad before the loop, and a step that needs none (on CUDA the
// zeroing is in the step's own launch, one launch fewer per step).
// Nothing may read the gradient between the steps.
func ExampleSGD_StepZeroGrad() {
	w := autograd.Param(toDevice(tensor.Scalar(tensor.F32, 0)))
	opt, err := optim.NewSGD([]*autograd.Var{w}, optim.SGDOptions{LR: 0.1, Momentum: 0.5})
	if err != nil {
		panic(err)
	}
	opt.ZeroGrad()
	for step := 0; step < 60; step++ {
		d := autograd.AddScalar(w, -3)
		autograd.Backward(autograd.Mul(d, d))
		opt.StepZeroGrad(nil) // nil: no found-inf flag
	}
	fmt.Printf("w = %.4f, gradient %v\n", onHost(w.Value).Item(), onHost(w.Grad).Item())
	// Output: w = 3.0000, gradient 0
}

// Zeroing an arena's gradients together with other buffers in one launch
// (kernels.ZeroManyer, which the CPU, sim and CUDA backends have): what
// ZeroGrad does, joined with, here, a loss accumulator.
func ExampleArena_AppendGradBuffers() {
	w := autograd.Param(toDevice(tensor.FromSlice([]float32{1, 2}, 2)))
	opt, err := optim.NewSGD([]*autograd.Var{w}, optim.SGDOptions{LR: 0.1})
	if err != nil {
		panic(err)
	}
	autograd.Backward(autograd.SumAll(autograd.Mul(w, w))) // gradient 2w
	lossSum := toDevice(tensor.FromSlice([]float32{7}, 1))
	bufs := opt.Arena().AppendGradBuffers([]*tensor.Tensor{lossSum})
	kernels.For(lossSum.Device()).(kernels.ZeroManyer).ZeroMany(bufs)
	fmt.Println(onHost(w.Grad).F32(), onHost(lossSum).F32())
	// Output: [0 0] [0]
}

// A linear classifier's whole SGD step in one call: its counted loss,
// Backward and Step together (one launch on a GPU). The loss and the
// correct count are added to the caller's running metrics.
func ExampleSGD_LinearCEStep() {
	lin, err := nn.NewLinear(tensor.NewRNG(4), nn.LinearOptions{In: 2, Out: 2})
	if err != nil {
		panic(err)
	}
	sgd, err := optim.NewSGD(lin.Parameters(), optim.SGDOptions{LR: 0.5})
	if err != nil {
		panic(err)
	}
	x := tensor.FromSlice([]float32{1, 0, 0, 1}, 2, 2)
	y := tensor.FromSlice([]int64{0, 1}, 2)
	lossSum, acc := tensor.Zeros(tensor.F32, 1), tensor.Zeros(tensor.F32, 2)
	for range 20 {
		if !sgd.LinearCEStep(x, lin.Weight, lin.Bias, y, kernels.CrossEntropyParams{}, lossSum, acc, true) {
			panic("not a linear classifier's step")
		}
	}
	fmt.Println(sgd.StepCount(), acc.F32())
	// Output:
	// 20 [18 20]
}
