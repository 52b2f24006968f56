package optim

import (
	"github.com/esper-go/esper/autograd"
	"github.com/esper-go/esper/kernels"
	"github.com/esper-go/esper/tensor"
)

// LinearCEStep is a whole training step of a linear classifier whose
// weight w [N, K] and bias b [N] (nil: none) are this optimizer's only
// parameters, in that order, on input x [M, K] (no gradient taken for
// it): autograd.LinearCrossEntropyCount of x through w and b against
// target under p (a reduced loss; the loss and correct counts added to
// lossSum and acc), Backward of that loss, and Step — or StepZeroGrad
// with zeroGrad. On a backend with kernels.LinearCESGDStepper that takes
// the sizes (CUDA: one launch where the three take three) it reports
// true with the results those three give on the backend, bit for bit.
// Elsewhere, and where the step would need more (an F32 arena of other
// parameters, autocast, a weight that takes no gradient or has
// post-accumulate hooks), it reports false having done nothing, and the
// caller runs the three itself. The gradients it adds go to w's and b's
// Grad, as Backward's would.
func (s *SGD) LinearCEStep(x *tensor.Tensor, w, b *autograd.Var, target *tensor.Tensor, p kernels.CrossEntropyParams, lossSum, acc *tensor.Tensor, zeroGrad bool) bool {
	be, ok := s.be.(kernels.LinearCESGDStepper)
	if !ok || w == nil || x == nil || p.Reduction == kernels.ReduceNone || autograd.AutocastDType() != 0 {
		return false
	}
	want := []*autograd.Var{w}
	if b != nil {
		want = append(want, b)
	}
	if len(s.arena.buckets) != 1 {
		return false
	}
	bk := s.arena.buckets[0]
	if bk.dtype != tensor.F32 || len(bk.params) != len(want) || x.DType() != tensor.F32 || x.Rank() != 2 || !x.IsContiguous() {
		return false
	}
	for i, v := range want {
		// Backward would skip a weight that takes no gradient and run a
		// weight's hooks: both are left to it.
		if bk.params[i] != v || v.Grad == nil || !v.RequiresGrad() || v.HasPostAccumulateHooks() {
			return false
		}
	}
	s.arena.mustVerify()
	var mom *tensor.Tensor
	if s.state != nil {
		s.state.sync()
		mom = s.state.buf(0, 0)
	}
	m, n := x.Dim(0), w.Value.Dim(0)
	dev := x.Device()
	logits, err := tensor.EmptyOn(dev, tensor.F32, m, n)
	if err != nil {
		return false
	}
	dl, err := tensor.EmptyOn(dev, tensor.F32, m, n)
	if err != nil {
		logits.Storage().Free()
		return false
	}
	loss, err := tensor.EmptyOn(dev, tensor.F32)
	if err != nil {
		logits.Storage().Free()
		dl.Storage().Free()
		return false
	}
	var bv, gb *tensor.Tensor
	if b != nil {
		bv, gb = b.Value, b.Grad
	}
	o := s.kopts
	o.ZeroGrad = zeroGrad
	ok = be.LinearCESGDStep(logits, loss, x, w.Value, bv, target, p, lossSum, acc, dl, w.Grad, gb, bk.flat, bk.grad, mom, s.hyp.t, o)
	// Nothing reads the logits, the loss or their gradient after the
	// step: their memory goes back at once (a device's stream keeps it
	// for the launch, even one a block sequence holds back: later uses
	// of the block come after it; a capture's graph keeps what it
	// captured).
	for _, t := range []*tensor.Tensor{logits, dl, loss} {
		t.Storage().Free()
	}
	return ok
}
