package autograd_test

import (
	"fmt"

	"github.com/esper-go/esper/autograd"
	"github.com/esper-go/esper/kernels"
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

// A residual branch with a learned per-channel output scale,
// x + g⊙branch, in one op: here the branch is 2x, the scale 0.5 for
// channel 0 and 0 for channel 1 (a branch that starts switched off).
func ExampleChannelAxpy() {
	x := autograd.Const(tensor.FromSlice([]float32{1, 2, 3, 4}, 1, 2, 2, 1))
	g := autograd.Param(tensor.FromSlice([]float32{0.5, 0}, 1, 2, 1, 1))
	y := autograd.ChannelAxpy(x, g, autograd.MulScalar(x, 2))
	fmt.Println(y.Value.F32())
	// The scale's gradient is Σ branch per channel: 2·(1+2), 2·(3+4).
	autograd.Backward(autograd.SumAll(y))
	fmt.Println(g.Grad.F32())
	// Output:
	// [2 4 3 4]
	// [6 14]
}

// StraightThrough trains a seed on the host's errors without changing
// the host's output: the value is the host's, the gradient reaches both.
func ExampleStraightThrough() {
	host := autograd.Param(tensor.FromSlice([]float32{1, 2}, 1, 2))
	seed := autograd.Param(tensor.FromSlice([]float32{10, 20}, 1, 2))
	y := autograd.StraightThrough(host, seed)
	fmt.Println(y.Value.F32())
	autograd.Backward(autograd.SumAll(autograd.MulScalar(y, 3)))
	fmt.Println(host.Grad.F32(), seed.Grad.F32())
	// Output:
	// [1 2]
	// [3 3] [3 3]
}

// GroupNormRelu normalises each group of channels and clips the result
// at zero in the same pass.
func ExampleGroupNormRelu() {
	x := autograd.Const(tensor.FromSlice([]float32{1, 2, 3, 4}, 1, 1, 4))
	y := autograd.GroupNormRelu(x, nil, nil, 1, 1e-5)
	fmt.Printf("%.3f\n", y.Value.Float64s())
	// Output: [0.000 0.000 0.447 1.342]
}

// Batch norm's evaluation-mode affine map, the per-channel scale and
// shift an inference CNN block folds into its convolution: one launch on
// a backend that fuses it (the CPU's, CUDA's), the same values as the
// elementwise ops otherwise.
func ExampleBatchNormEvalAffine() {
	w := autograd.Param(tensor.FromSlice([]float32{2, 1}, 2))
	b := autograd.Param(tensor.FromSlice([]float32{0, 0.5}, 2))
	mean := tensor.FromSlice([]float32{1, -2}, 2)
	variance := tensor.FromSlice([]float32{4, 0.25}, 2)
	scale, shift := autograd.BatchNormEvalAffine(w, b, mean, variance, 0)
	fmt.Printf("scale %.3f shift %.3f\n", scale.Value.F32(), shift.Value.F32())
	// Output:
	// scale [1.000 2.000] shift [-1.000 4.500]
}

// A training loop's running loss and accuracy kept on the device with
// the loss itself: CrossEntropyCount adds the batch's mean loss to
// lossSum and 1 to acc for each row whose argmax is its target, in the
// loss's own launch on CUDA, and the loss backpropagates as
// CrossEntropy's does.
func ExampleCrossEntropyCount() {
	logits := autograd.Param(tensor.FromSlice([]float32{2, 0, 0, 1, 3, 0}, 2, 3))
	target := tensor.FromSlice([]int64{0, 2}, 2) // row 0 right, row 1 wrong
	lossSum := tensor.FromSlice([]float32{0}, 1)
	acc := tensor.FromSlice([]float32{0, 0}, 2)
	for range 2 { // two batches, the same one twice
		loss := autograd.CrossEntropyCount(logits, target, kernels.CrossEntropyParams{}, lossSum, acc)
		autograd.Backward(loss)
	}
	fmt.Printf("loss sum %.4f, correct per row %v\n", lossSum.Item(), acc.F32())
	// Output: loss sum 3.4094, correct per row [2 0]
}

// A classifier head and its loss in one call: the same values and
// gradients as CrossEntropyCount(Linear(x, w, b), …), and on CUDA, for
// a small batch, the logits, the loss, the metrics and the logits'
// gradient in one launch.
func ExampleLinearCrossEntropyCount() {
	x := autograd.Const(tensor.FromSlice([]float32{1, 0, 0, 1}, 2, 2))       // two samples
	w := autograd.Param(tensor.FromSlice([]float32{2, 0, 0, 2, 1, 1}, 3, 2)) // three classes
	b := autograd.Param(tensor.FromSlice([]float32{0, 0, 0}, 3))
	target := tensor.FromSlice([]int64{0, 2}, 2) // row 0 right, row 1 wrong
	lossSum := tensor.FromSlice([]float32{0}, 1)
	acc := tensor.FromSlice([]float32{0, 0}, 2)
	loss := autograd.LinearCrossEntropyCount(x, w, b, target, kernels.CrossEntropyParams{}, lossSum, acc)
	autograd.Backward(loss)
	fmt.Printf("loss %.4f, correct per row %v\n", loss.Item(), acc.F32())
	fmt.Printf("bias gradient %.4f\n", b.Grad.F32())
	// Output:
	// loss 0.9076, correct per row [1 0]
	// bias gradient [-0.1224 0.3776 -0.2553]
}

// A graph layer's inputs side by side: each node's own features beside
// the mean of its neighbours' (a CSR built with kernels.BuildCSR). In
// inference on a GPU it is one launch; with gradients, the pieces' ops.
func ExampleGatherConcat() {
	x := autograd.Const(tensor.FromSlice([]float32{1, 2, 3, 4, 5, 6}, 3, 2)) // three nodes
	src, dst := []int64{1, 2, 0}, []int64{0, 0, 1}                           // 1→0, 2→0, 0→1
	rowPtr, order, err := kernels.BuildCSR(dst, 3)
	if err != nil {
		panic(err)
	}
	e := &autograd.GraphEdges{Src: tensor.FromSlice(src, 3), Dst: tensor.FromSlice(dst, 3),
		RowPtr: tensor.FromSlice(rowPtr, 4), Order: tensor.FromSlice(order, 3), NumDst: 3}
	var y *autograd.Var
	autograd.InferenceMode(func() {
		y = autograd.GatherConcat([]autograd.GatherPiece{{X: x}, {X: x, Edges: e}})
	})
	fmt.Println(y.Shape(), y.Value.F32())
	// Output:
	// [3 4] [1 2 4 5 3 4 1 2 5 6 0 0]
}

// Two small heads of one hidden width on one input, each relu(x·W1ᵀ +
// B1)·W2ᵀ + B2: a policy's action heads. On a GPU in inference they run
// as two batched products for all the heads; the values are the same.
func ExampleReluHeads() {
	x := autograd.Const(tensor.FromSlice([]float32{1, -1}, 1, 2))
	head := func(w1, w2 []float32, out int) autograd.ReluHead {
		return autograd.ReluHead{
			W1: autograd.Param(tensor.FromSlice(w1, 2, 2)), B1: autograd.Param(tensor.FromSlice([]float32{0, 0}, 2)),
			W2: autograd.Param(tensor.FromSlice(w2, out, 2)), B2: autograd.Param(tensor.Zeros(tensor.F32, out)),
		}
	}
	outs := autograd.ReluHeads(x, []autograd.ReluHead{
		head([]float32{1, 0, 0, 1}, []float32{1, 1}, 1),         // relu([1, -1]) = [1, 0] → 1
		head([]float32{-1, 0, 0, -1}, []float32{1, 0, 0, 2}, 2), // relu([-1, 1]) = [0, 1] → [0, 2]
	})
	fmt.Println(outs[0].Value.F32(), outs[1].Value.F32())
	// Output:
	// [1] [0 2]
}

// Stacks of weights for several joined products, all made together:
// each group's weights along their first axis, a group of one weight
// that weight itself. On a GPU in inference it is one launch for every
// group.
func ExampleStackRows() {
	a := autograd.Const(tensor.FromSlice([]float32{1, 2}, 1, 2))
	b := autograd.Const(tensor.FromSlice([]float32{3, 4, 5, 6}, 2, 2))
	c := autograd.Const(tensor.FromSlice([]float32{7, 8, 9}, 3))
	st := autograd.StackRows([][]*autograd.Var{{a, b}, {c}})
	fmt.Println(st[0].Shape(), st[0].Value.F32(), st[1] == c)
	// Output:
	// [3 2] [1 2 3 4 5 6] true
}

// Two linear sums of one row count in one call, here a node's own
// features and a bias: x·W1ᵀ + B and x·W2ᵀ. On a GPU in inference the
// stacked weights of both are made in one launch (kernels.ConcatManyer).
func ExampleLinearSums() {
	x := autograd.Const(tensor.FromSlice([]float32{1, 2}, 1, 2))
	w1 := autograd.Const(tensor.FromSlice([]float32{1, 1}, 1, 2))
	w2 := autograd.Const(tensor.FromSlice([]float32{1, 0, 0, 1}, 2, 2))
	bias := autograd.Const(tensor.FromSlice([]float32{10}, 1))
	sums := autograd.LinearSums([][]autograd.LinearTerm{
		{{X: x, W: w1, B: bias}},
		{{X: x, W: w2}, {X: x, W: w2}},
	})
	fmt.Println(sums[0].Value.F32(), sums[1].Value.F32())
	// Output:
	// [13] [2 4]
}

// A GraphSAGE-style layer over one node type: each node's neighbours'
// mean through one weight plus its own features through another, a bias,
// ReLU and the input added back. On a GPU in inference the features go
// through both weights in one product and the means, sums, ReLU and
// residual take one launch; here, on the CPU, LinearSums and
// ScaleActAdd compute it.
func ExampleLinearSumsAct() {
	x := autograd.Const(tensor.FromSlice([]float32{1, 2, 3, 4, 5, 6}, 3, 2)) // three nodes
	src, dst := []int64{1, 2, 0}, []int64{0, 0, 1}                           // 1→0, 2→0, 0→1
	rowPtr, order, err := kernels.BuildCSR(dst, 3)
	if err != nil {
		panic(err)
	}
	e := &autograd.GraphEdges{Src: tensor.FromSlice(src, 3), Dst: tensor.FromSlice(dst, 3),
		RowPtr: tensor.FromSlice(rowPtr, 4), Order: tensor.FromSlice(order, 3), NumDst: 3}
	neighbours := autograd.Const(tensor.FromSlice([]float32{1, 0, 0, 1}, 2, 2)) // identity
	own := autograd.Const(tensor.FromSlice([]float32{0, 1, 1, 0}, 2, 2))        // swaps the features
	bias := autograd.Const(tensor.FromSlice([]float32{1, -10}, 2))
	var out []*autograd.Var
	autograd.InferenceMode(func() {
		out = autograd.LinearSumsAct([][]autograd.LinearTerm{{
			{X: x, Edges: e, W: neighbours, B: bias},
			{X: x, W: own},
		}}, []float64{1}, kernels.Relu, []*autograd.Var{x})
	})
	fmt.Println(out[0].Shape(), out[0].Value.F32())
	// Output:
	// [3 2] [8 2 9 4 12 6]
}

// The weight groups LinearSumsAct stacks: one per distinct input, in the
// order the terms name them. A layer that lays each group out one after
// another in one tensor has its stacks read in place (StackRows: a view,
// no copy).
func ExampleSumsStacks() {
	a := autograd.Const(tensor.Zeros(tensor.F32, 3, 2)) // one node type's features
	b := autograd.Const(tensor.Zeros(tensor.F32, 4, 2)) // another's
	all := tensor.Zeros(tensor.F32, 8, 2)               // three [2, 2] weights and one more, laid out in a row
	w := func(i int) *autograd.Var { return autograd.Const(all.Narrow(0, 2*i, 2)) }
	groups := autograd.SumsStacks([][]autograd.LinearTerm{
		{{X: a, W: w(0)}, {X: b, W: w(2)}}, // into a: a's own and b's
		{{X: a, W: w(1)}, {X: b, W: w(3)}}, // into b
	})
	for _, g := range groups {
		fmt.Print(len(g), " ")
	}
	var stacks []*autograd.Var
	autograd.InferenceMode(func() { stacks = autograd.StackRows(groups) })
	fmt.Println(stacks[0].Shape(), stacks[0].Value.Storage() == all.Storage(), stacks[1].Value.Storage() == all.Storage())
	// Output:
	// 2 2 [4 2] true true
}

// An encoder: a linear layer, GELU and a layer norm over each row. In
// inference on a GPU it is one launch; the values are those of the ops.
func ExampleLinearActLayerNorm() {
	x := autograd.Const(tensor.FromSlice([]float32{1, 2, 3, 4}, 2, 2))
	w := autograd.Const(tensor.FromSlice([]float32{1, 0, 0, 1, 1, 1}, 3, 2))
	var y *autograd.Var
	autograd.InferenceMode(func() {
		y = autograd.LinearActLayerNorm(x, w, nil, kernels.Relu, nil, nil, 1e-5)
	})
	v := y.Value.F32()
	fmt.Printf("%v %.3f %.3f %.3f\n", y.Shape(), v[0], v[1], v[2])
	// Output:
	// [2 3] -1.225 0.000 1.225
}

// A policy's heads on three inputs — two action heads on a context, a
// pointer head on the slots, a value head — each relu(x·W1ᵀ + B1)·W2ᵀ
// + B2. On a GPU in inference every head of every group is one launch;
// elsewhere each group is ReluHeads.
func ExampleReluHeadGroups() {
	c := func(v []float32, shape ...int) *autograd.Var { return autograd.Const(tensor.FromSlice(v, shape...)) }
	id := c([]float32{1, 0, 0, 1}, 2, 2)
	head := func(w2 []float32, out int) autograd.ReluHead {
		return autograd.ReluHead{W1: id, W2: c(w2, out, 2)}
	}
	ctx := c([]float32{1, -1}, 1, 2)         // one environment
	slots := c([]float32{2, 3, -1, 4}, 2, 2) // its two slots
	glob := c([]float32{0.5, 0.5}, 1, 2)
	var outs [][]*autograd.Var
	autograd.InferenceMode(func() {
		outs = autograd.ReluHeadGroups([]autograd.ReluHeadGroup{
			{X: ctx, Heads: []autograd.ReluHead{head([]float32{1, 1}, 1), head([]float32{1, 0, 0, 1}, 2)}},
			{X: slots, Heads: []autograd.ReluHead{head([]float32{1, -1}, 1)}},
			{X: glob, Heads: []autograd.ReluHead{head([]float32{2, 2}, 1)}},
		})
	})
	fmt.Println(outs[0][0].Value.F32(), outs[0][1].Value.F32(), outs[1][0].Value.F32(), outs[2][0].Value.F32())
	// Output:
	// [1] [1 0] [-1 -4] [2]
}

// A heterogeneous graph's node encoders, one per node type, each a
// linear layer, its activation and a layer norm over each row. On a GPU
// in inference the three are one launch; the values are each
// LinearActLayerNorm's.
func ExampleLinearActLayerNorms() {
	c := func(v []float32, shape ...int) *autograd.Var { return autograd.Const(tensor.FromSlice(v, shape...)) }
	w := c([]float32{1, 0, 0, 1, 1, 1}, 3, 2)
	var ys []*autograd.Var
	autograd.InferenceMode(func() {
		ys = autograd.LinearActLayerNorms([]autograd.LinearActLayerNormCall{
			{X: c([]float32{1, 2}, 1, 2), W: w, Act: kernels.Relu, Eps: 1e-5},
			{X: c([]float32{3, 4, 0, 0}, 2, 2), W: w, Act: kernels.Relu, Eps: 1e-5},
		})
	})
	for _, y := range ys {
		v := y.Value.F32()
		fmt.Printf("%v %.3f %.3f %.3f\n", y.Shape(), v[0], v[1], v[2])
	}
	// Output:
	// [1 3] -1.225 0.000 1.225
	// [2 3] -0.981 -0.392 1.373
}

// A captured step's device work run again, with nothing copied in: a
// benchmark times the device's share of a step this way.
func ExampleCaptured_ReplayLast() {
	w := autograd.Param(tensor.FromSlice([]float32{2}, 1))
	step := autograd.Capture(func(in []*tensor.Tensor) []*tensor.Tensor {
		var y *autograd.Var
		autograd.InferenceMode(func() { y = autograd.Mul(autograd.Const(in[0]), w) })
		return []*tensor.Tensor{y.Value}
	}, autograd.CaptureOptions{})
	x := tensor.FromSlice([]float32{3}, 1)
	fmt.Println(step.ReplayLast() != nil) // nothing captured yet
	var out []*tensor.Tensor
	for range 2 { // the warm-up, then the capture and its replay
		out, _ = step.Run(x)
	}
	w.Value.F32()[0] = 4 // the graph reads the weight where it lies
	fmt.Println(step.ReplayLast(), out[0].F32())
	// Output:
	// true
	// <nil> [12]
}
