package simic

import (
	"errors"
	"fmt"

	"github.com/esper-go/esper/autograd"
	"github.com/esper-go/esper/kasmina"
	"github.com/esper-go/esper/kernels"
	"github.com/esper-go/esper/nn"
	"github.com/esper-go/esper/tensor"
	"github.com/esper-go/esper/tolaria"
)

// fusedValidator evaluates K alpha configurations of a model in one pass
// over the validation batches (G2 fused validation): every batch of B
// samples is repeated K times, each attributed slot gets a per-sample
// alpha override (its current alpha where the configuration has it on,
// 0 where off), and one FusedForward of K·B samples serves all
// configurations; the all-on configuration is the trainer's own
// validation pass, so it is not evaluated again. Everything runs on the
// model's device: the validation batches are copied there, correct
// predictions are counted there into per-batch-size accumulators, which
// are summed there per configuration at the end and read back in one
// copy (the pass's one host sync). The repeated batches, their index and
// the accumulators are kept per K·B, so a pass allocates only the
// forward's activations, the batches' copies and the alpha overrides.
type fusedValidator struct {
	bufs map[int]*fusedBufs // by K·B
}

// fusedBufs are the buffers of one K·B.
type fusedBufs struct {
	b    int
	used bool           // in the running evaluate
	idx  *tensor.Tensor // I64 [K·B]: 0..B−1, K times
	x, y *tensor.Tensor // the batch repeated K times
	acc  *tensor.Tensor // F32 [K·B] correct counts
	// alphas are the per-sample overrides of the running evaluate, by
	// slot id.
	alphas map[string]*autograd.Var
}

func newFusedValidator() *fusedValidator { return &fusedValidator{bufs: map[int]*fusedBufs{}} }

// buffers returns the buffers for k configurations of batch (x, y) (on
// the model's device), allocating them the first time; the running
// evaluate zeroes their accumulator and fills their overrides when it
// first uses them.
func (f *fusedValidator) buffers(k int, x, y *tensor.Tensor) (*fusedBufs, error) {
	b := x.Dim(0)
	kb := k * b
	if fb := f.bufs[kb]; fb != nil && fb.b == b && tensor.SameShape(fb.x.Shape()[1:], x.Shape()[1:]) &&
		fb.x.DType() == x.DType() && fb.y.DType() == y.DType() && fb.x.Device() == x.Device() {
		return fb, nil
	}
	idx := make([]int64, kb)
	for i := range idx {
		idx[i] = int64(i % b)
	}
	xs := append([]int{kb}, x.Shape()[1:]...)
	xk, err := tensor.EmptyOn(x.Device(), x.DType(), xs...)
	if err != nil {
		return nil, err
	}
	yk, err := tensor.EmptyOn(y.Device(), y.DType(), kb)
	if err != nil {
		return nil, err
	}
	acc, err := tensor.EmptyOn(x.Device(), tensor.F32, kb)
	if err != nil {
		return nil, err
	}
	idxd, err := toDevice(tensor.FromSlice(idx, kb), x.Device())
	if err != nil {
		return nil, err
	}
	fb := &fusedBufs{b: b, idx: idxd, x: xk, y: yk, acc: acc}
	f.bufs[kb] = fb
	return fb, nil
}

// evaluate returns the validation accuracy (percent) of each
// configuration: masks[k][i] switches slots[i] on in configuration k.
// When known ≥ 0, configuration known is not evaluated: its accuracy is
// knownAcc (the trainer's validation pass has just measured it), and the
// fused pass runs the other configurations only. It also returns the
// number of configurations the pass evaluated. m is evaluated on its
// device (nn.Device).
func (f *fusedValidator) evaluate(m *kasmina.MorphogeneticModel, val tolaria.Batches, epoch int, slots []*kasmina.Slot, masks [][]bool, known int, knownAcc float64) ([]float64, int, error) {
	if len(masks) == 0 {
		return nil, 0, errors.New("no configurations")
	}
	for _, row := range masks {
		if len(row) != len(slots) {
			return nil, 0, fmt.Errorf("configuration of %d slots for %d slots", len(row), len(slots))
		}
	}
	// cfgs are the configurations the pass evaluates, in order.
	cfgs := make([]int, 0, len(masks))
	for c := range masks {
		if c != known {
			cfgs = append(cfgs, c)
		}
	}
	out := make([]float64, len(masks))
	if known >= 0 && known < len(masks) {
		out[known] = knownAcc
	}
	k := len(cfgs)
	if k == 0 {
		return out, 0, nil
	}
	for _, fb := range f.bufs {
		fb.used = false
	}
	dev, err := nn.Device(m)
	if err != nil {
		return nil, 0, err
	}
	n := 0
	wasTraining := m.Training()
	m.SetTraining(false)
	defer m.SetTraining(wasTraining)
	var ferr error
	for x, y := range val.Batches(epoch) {
		if x, err = toDevice(x, dev); err != nil {
			return nil, 0, err
		}
		if y, err = toDevice(y, dev); err != nil {
			return nil, 0, err
		}
		fb, err := f.buffers(k, x, y)
		if err != nil {
			return nil, 0, err
		}
		be := kernels.For(dev)
		if !fb.used {
			fb.used = true
			zeroTensor(fb.acc)
			if fb.alphas, err = f.overrides(fb, slots, masks, cfgs); err != nil {
				return nil, 0, err
			}
		}
		// The batch repeated K times: plain launches (the labels are
		// integers, which autograd does not index).
		be.IndexSelect(fb.x, x, 0, fb.idx)
		be.IndexSelect(fb.y, y, 0, fb.idx)
		autograd.InferenceMode(func() {
			logits, err := m.FusedForward(autograd.Const(fb.x), fb.alphas)
			if err != nil {
				ferr = err
				return
			}
			kernels.For(fb.acc.Device()).CountCorrect(fb.acc, logits.Value, fb.y)
		})
		if ferr != nil {
			return nil, 0, ferr
		}
		n += fb.b
	}
	if n == 0 {
		return nil, 0, errors.New("empty validation set")
	}
	// Per configuration, the correct counts of every batch size summed on
	// the device (whole numbers, exact in F32 in any order), then the
	// one read.
	var total *autograd.Var
	autograd.NoGrad(func() {
		for _, fb := range f.bufs {
			if !fb.used {
				continue
			}
			s := autograd.Sum(autograd.Const(fb.acc.Reshape(k, fb.b)), []int{1}, false)
			if total == nil {
				total = s
			} else {
				total = autograd.Add(total, s)
			}
		}
	})
	correct, err := hostFloat64s(total.Value)
	if err != nil {
		return nil, 0, err
	}
	for c, cfg := range cfgs {
		out[cfg] = 100 * correct[c] / float64(n)
	}
	return out, k, nil
}

// overrides builds the per-sample alphas of configurations cfgs for fb's
// batch size: slots[i] at its current alpha in the rows of the
// configurations that switch it on, 0 elsewhere; built on the host (the
// alphas are host state) and copied to fb's device.
func (f *fusedValidator) overrides(fb *fusedBufs, slots []*kasmina.Slot, masks [][]bool, cfgs []int) (map[string]*autograd.Var, error) {
	b, kb := fb.b, fb.idx.Numel()
	out := make(map[string]*autograd.Var, len(slots))
	for i, s := range slots {
		alpha := s.Alpha()
		a := make([]float64, kb)
		for c, cfg := range cfgs {
			if masks[cfg][i] {
				for j := 0; j < b; j++ {
					a[c*b+j] = alpha
				}
			}
		}
		shape := []int{kb, 1}
		if s.Topology() == kasmina.TopologyCNN {
			shape = []int{kb, 1, 1, 1}
		}
		t, err := constOn(fb.x.Device(), fb.x.DType(), a, shape...)
		if err != nil {
			return nil, err
		}
		out[s.ID()] = autograd.Const(t)
	}
	return out, nil
}

func zeroTensor(t *tensor.Tensor) {
	kernels.For(t.Device()).Fill(t, 0)
}
