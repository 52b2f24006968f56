package autograd

import (
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/esper-go/esper/kernels"
	"github.com/esper-go/esper/tensor"
)

// binaryCounter counts Binary launches over a backend and hands
// kernels.ParamGradAccumulator through when pa is set.
type binaryCounter struct {
	kernels.Backend
	binary int
}

func (b *binaryCounter) Binary(op kernels.BinaryOp, dst, x, y *tensor.Tensor) {
	b.binary++
	b.Backend.Binary(op, dst, x, y)
}

// ForeachAxpy counts each of its additions as one Binary: on a device
// Backward adds the leaves' gradients into their Grads with one
// ForeachAxpy where it would launch an Add each.
func (b *binaryCounter) ForeachAxpy(ys, xs []*tensor.Tensor, alpha float64) {
	b.binary += len(ys)
	b.Backend.ForeachAxpy(ys, xs, alpha)
}

type binaryCounterPA struct {
	*binaryCounter
	pa kernels.ParamGradAccumulator
}

func (b *binaryCounterPA) Conv2dBackwardWeightAdd(dw, x, dy *tensor.Tensor, p kernels.Conv2dParams) {
	b.pa.Conv2dBackwardWeightAdd(dw, x, dy, p)
}
func (b *binaryCounterPA) BatchNormBackwardAdd(dx, dw, db, dy, x, m, r, w *tensor.Tensor, training bool) {
	b.pa.BatchNormBackwardAdd(dx, dw, db, dy, x, m, r, w, training)
}
func (b *binaryCounterPA) BatchNormReluBackwardAdd(dx, dw, db, dy, x, sh, m, r, w *tensor.Tensor, training bool) {
	b.pa.BatchNormReluBackwardAdd(dx, dw, db, dy, x, sh, m, r, w, training)
}
func (b *binaryCounterPA) BatchNormReluMaxPool2x2BackwardAdd(dx, dw, db, g, am, x, sh, m, r, w *tensor.Tensor, training bool) {
	b.pa.BatchNormReluMaxPool2x2BackwardAdd(dx, dw, db, g, am, x, sh, m, r, w, training)
}

func (b *binaryCounterPA) GroupNormBackwardAdd(dx, dw, db, dy, x, m, r, w *tensor.Tensor, groups int) {
	b.pa.GroupNormBackwardAdd(dx, dw, db, dy, x, m, r, w, groups)
}
func (b *binaryCounterPA) GroupNormReluBackwardAdd(dx, dw, db, dy, x, sh, m, r, w *tensor.Tensor, groups int) {
	b.pa.GroupNormReluBackwardAdd(dx, dw, db, dy, x, sh, m, r, w, groups)
}

// The fused norm ops need these of the wrapped backend too.
func (b *binaryCounterPA) BatchNormRelu(y, sm, sr, x, w, sh, rm, rv *tensor.Tensor, training bool, mom, eps float64) {
	b.Backend.(kernels.BatchNormReluer).BatchNormRelu(y, sm, sr, x, w, sh, rm, rv, training, mom, eps)
}
func (b *binaryCounterPA) BatchNormReluBackward(dx, dw, db, dy, x, sh, m, r, w *tensor.Tensor, training bool) {
	b.Backend.(kernels.BatchNormReluer).BatchNormReluBackward(dx, dw, db, dy, x, sh, m, r, w, training)
}
func (b *binaryCounterPA) BatchNormReluMaxPool2x2(p, am, sm, sr, x, w, sh, rm, rv *tensor.Tensor, training bool, mom, eps float64) {
	b.Backend.(kernels.BatchNormReluPooler).BatchNormReluMaxPool2x2(p, am, sm, sr, x, w, sh, rm, rv, training, mom, eps)
}
func (b *binaryCounterPA) BatchNormReluMaxPool2x2Backward(dx, dw, db, g, am, x, sh, m, r, w *tensor.Tensor, training bool) {
	b.Backend.(kernels.BatchNormReluPooler).BatchNormReluMaxPool2x2Backward(dx, dw, db, g, am, x, sh, m, r, w, training)
}

// TestParamGradsAddedInPlace: a conv → batch norm + ReLU + pool → batch
// norm block whose parameters already have a Grad (an arena's, say) gets
// its weight gradients added in the launches that compute them on a
// backend with kernels.ParamGradAccumulator (sim): five Binary launches
// fewer per backward (the conv weight and both norms' weight and bias),
// and every gradient bit for bit what the same backend without the
// capability and the CPU give, over two backwards accumulating onto
// Grads that start non-zero.
func TestParamGradsAddedInPlace(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	vals := func(n int) []float32 { return randVals(rng, n) }
	xs, ws := vals(2*3*6*6), vals(4*3*3*3)
	g1w, g1b, g2w, g2b := vals(4), vals(4), vals(4), vals(4)
	grad0 := [][]float32{vals(4 * 3 * 3 * 3), vals(4), vals(4), vals(4), vals(4)} // the Grads' starting values
	plain, fused := paramGradAdds(t, tensor.Sim(6), func(on func([]float32, ...int) *tensor.Tensor) ([]*Var, func() *Var) {
		x := Const(on(xs, 2, 3, 6, 6))
		w := Param(on(ws, 4, 3, 3, 3))
		n1w, n1b, n2w, n2b := Param(on(g1w, 4)), Param(on(g1b, 4)), Param(on(g2w, 4)), Param(on(g2b, 4))
		params := []*Var{w, n1w, n1b, n2w, n2b}
		for i, p := range params { // Grads that exist and are not zero
			p.Grad = on(grad0[i], p.Shape()...)
		}
		rm1, rv1 := on(make([]float32, 4), 4), on([]float32{1, 1, 1, 1}, 4)
		rm2, rv2 := on(make([]float32, 4), 4), on([]float32{1, 1, 1, 1}, 4)
		return params, func() *Var {
			h := Conv2d(x, w, nil, kernels.Conv2dParams{PadH: 1, PadW: 1})
			h = BatchNormReluMaxPool(h, n1w, n1b, rm1, rv1, true, 0.1, 1e-5)
			h = BatchNorm(h, n2w, n2b, rm2, rv2, true, 0.1, 1e-5)
			return SumAll(Mul(h, h))
		}
	})
	require.Equal(t, plain-2*5, fused, "five Binary adds fewer per backward")
}

// paramGradAdds runs a model twice on dev's backend without and with
// kernels.ParamGradAccumulator (sim, wrapped to count Binary launches)
// and on the CPU: build makes its Vars with on (a device copy of host
// values) and returns the Vars whose gradients to compare and the
// forward giving the loss, whose Backward runs twice per run. It
// requires the gradients bit for bit the same in all three runs and
// returns the Binary launches of the plain and of the accumulating run.
func paramGradAdds(t *testing.T, dev tensor.Device, build func(on func([]float32, ...int) *tensor.Tensor) ([]*Var, func() *Var)) (plain, fused int) {
	t.Helper()
	orig := kernels.For(dev)
	t.Cleanup(func() { kernels.Register(orig) })
	run := func(d tensor.Device) ([][]float32, int) {
		on := func(v []float32, shape ...int) *tensor.Tensor {
			h, err := tensor.FromSlice(append([]float32(nil), v...), shape...).ToDevice(d)
			require.NoError(t, err)
			return h
		}
		vars, forward := build(on)
		binary := 0
		for range 2 {
			loss := forward()
			before := countBinary(d)
			Backward(loss)
			binary += countBinary(d) - before
		}
		var out [][]float32
		for _, p := range vars {
			g, err := p.Grad.ToDevice(tensor.CPU)
			require.NoError(t, err)
			out = append(out, append([]float32(nil), g.F32()...))
		}
		return out, binary
	}
	kernels.Register(&binaryCounter{Backend: orig})
	want, plain := run(dev)
	kernels.Register(&binaryCounterPA{binaryCounter: &binaryCounter{Backend: orig}, pa: orig.(kernels.ParamGradAccumulator)})
	got, fused := run(dev)
	kernels.Register(orig)
	require.Equal(t, want, got)
	cpu, _ := run(tensor.CPU)
	require.Equal(t, cpu, got)
	return plain, fused
}

// countBinary reads the Binary count of the backend registered for d,
// when it counts (0 otherwise).
func countBinary(d tensor.Device) int {
	switch b := kernels.For(d).(type) {
	case *binaryCounter:
		return b.binary
	case *binaryCounterPA:
		return b.binary
	}
	return 0
}

// TestGroupNormGradsAddedInPlace: a group norm whose weight and bias
// already have a Grad gets both gradients added in the backward's own
// launch on a backend with kernels.ParamGradAccumulator (sim): two Binary
// launches fewer per backward, and the gradients bit for bit those of the
// backend without the capability and of the CPU, over two backwards
// accumulating onto Grads that start non-zero.
func TestGroupNormGradsAddedInPlace(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	vals := func(n int) []float32 { return randVals(rng, n) }
	xs, ws, bs := vals(2*6*3*3), vals(6), vals(6)
	grad0 := [][]float32{vals(6), vals(6)}
	plain, fused := paramGradAdds(t, tensor.Sim(6), func(on func([]float32, ...int) *tensor.Tensor) ([]*Var, func() *Var) {
		x := Param(on(xs, 2, 6, 3, 3))
		w, b := Param(on(ws, 6)), Param(on(bs, 6))
		for i, p := range []*Var{w, b} {
			p.Grad = on(grad0[i], 6)
		}
		return []*Var{x, w, b}, func() *Var {
			h := GroupNorm(x, w, b, 3, 1e-5)
			return SumAll(Mul(h, h))
		}
	})
	require.Equal(t, plain-2*2, fused, "two Binary adds fewer per backward")
}
