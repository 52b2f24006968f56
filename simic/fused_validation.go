package simic

import (
	"errors"
	"fmt"

	"github.com/esper-go/esper/autograd"
	"github.com/esper-go/esper/kasmina"
	"github.com/esper-go/esper/kernels"
	"github.com/esper-go/esper/tensor"
	"github.com/esper-go/esper/tolaria"
)

// fusedValidator evaluates K alpha configurations of a model in one pass
// over the validation batches (G2 fused validation): every batch of B
// samples is repeated K times, each attributed slot gets a per-sample
// alpha override (its current alpha where the configuration has it on,
// 0 where off), and one FusedForward of K·B samples serves all
// configurations. Correct predictions are counted on the device into
// per-batch-size accumulators that are read once, at the end.
type fusedValidator struct {
	acc map[int]*tensor.Tensor // K·B → F32 [K·B] correct counts
}

func newFusedValidator() *fusedValidator { return &fusedValidator{acc: map[int]*tensor.Tensor{}} }

// evaluate returns the validation accuracy (percent) of each
// configuration: masks[k][i] switches slots[i] on in configuration k.
func (f *fusedValidator) evaluate(m *kasmina.MorphogeneticModel, val tolaria.Batches, epoch int, slots []*kasmina.Slot, masks [][]bool) ([]float64, error) {
	k := len(masks)
	if k == 0 {
		return nil, errors.New("no configurations")
	}
	for _, row := range masks {
		if len(row) != len(slots) {
			return nil, fmt.Errorf("configuration of %d slots for %d slots", len(row), len(slots))
		}
	}
	alphas := make([]float64, len(slots))
	for i, s := range slots {
		alphas[i] = s.Alpha()
	}
	for _, a := range f.acc {
		zeroTensor(a)
	}
	used := map[int]int{} // K·B → B
	n := 0
	wasTraining := m.Training()
	m.SetTraining(false)
	defer m.SetTraining(wasTraining)
	var ferr error
	for x, y := range val.Batches(epoch) {
		b := x.Dim(0)
		kb := k * b
		idx := make([]int64, kb)
		for i := range idx {
			idx[i] = int64(i % b)
		}
		it := tensor.FromSlice(idx, kb)
		overrides := make(map[string]*autograd.Var, len(slots))
		for i, s := range slots {
			a := make([]float64, kb)
			for c := 0; c < k; c++ {
				if masks[c][i] {
					for j := 0; j < b; j++ {
						a[c*b+j] = alphas[i]
					}
				}
			}
			shape := []int{kb, 1}
			if s.Topology() == kasmina.TopologyCNN {
				shape = []int{kb, 1, 1, 1}
			}
			overrides[s.ID()] = autograd.Const(tensor.FromFloat64s(x.DType(), a, shape...))
		}
		acc := f.acc[kb]
		if acc == nil {
			acc = tensor.Zeros(tensor.F32, kb)
			f.acc[kb] = acc
		}
		used[kb] = b
		autograd.InferenceMode(func() {
			xk := autograd.IndexSelect(autograd.Const(x), 0, it)
			yk := autograd.IndexSelect(autograd.Const(y), 0, it)
			logits, err := m.FusedForward(xk, overrides)
			if err != nil {
				ferr = err
				return
			}
			kernels.For(acc.Device()).CountCorrect(acc, logits.Value, yk.Value)
		})
		if ferr != nil {
			return nil, ferr
		}
		n += b
	}
	if n == 0 {
		return nil, errors.New("empty validation set")
	}
	correct := make([]float64, k)
	for kb, b := range used {
		v := f.acc[kb].Float64s() // the one read per batch size
		for c := 0; c < k; c++ {
			for j := 0; j < b; j++ {
				correct[c] += v[c*b+j]
			}
		}
	}
	out := make([]float64, k)
	for c := range out {
		out[c] = 100 * correct[c] / float64(n)
	}
	return out, nil
}

func zeroTensor(t *tensor.Tensor) {
	kernels.For(t.Device()).Fill(t, 0)
}
