package autograd_test

import (
	"fmt"

	"github.com/esper-go/esper/autograd"
	"github.com/esper-go/esper/tensor"
)

// One gradient-descent step of a linear regression y = x·wᵀ + b: forward,
// Backward, then read the gradients.
func Example() {
	x := autograd.Const(tensor.FromSlice([]float32{1, 2, 3, 4}, 4, 1))
	y := autograd.Const(tensor.FromSlice([]float32{3, 5, 7, 9}, 4, 1)) // y = 2x + 1
	w := autograd.Param(tensor.FromSlice([]float32{0.5}, 1, 1))
	b := autograd.Param(tensor.FromSlice([]float32{0}, 1))

	pred := autograd.Linear(x, w, b)
	loss := autograd.MeanAll(autograd.Square(autograd.Sub(pred, y)))
	autograd.Backward(loss)

	fmt.Printf("loss %.4f\n", loss.Item())
	fmt.Printf("dL/dw %.4f, dL/db %.4f\n", w.Grad.Item(), b.Grad.Item())
	// Output:
	// loss 25.3750
	// dL/dw -27.5000, dL/db -9.5000
}
