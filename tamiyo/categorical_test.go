package tamiyo

import (
	"errors"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/esper-go/esper/leyline"
)

func sum32(p []float32) float64 {
	var s float64
	for _, v := range p {
		s += float64(v)
	}
	return s
}

func TestMaskedCategoricalMasking(t *testing.T) {
	logits := []float32{5, 1, 8, -2}
	mask := []bool{true, false, false, true}
	d, err := NewMaskedCategorical(logits, mask, 0)
	require.NoError(t, err)
	p := d.Probs()
	assert.Less(t, p[1], float32(1e-30))
	assert.Less(t, p[2], float32(1e-30))
	assert.InDelta(t, 1, sum32(p), 1e-6)
	// Without a floor: softmax over the valid logits only.
	want0 := 1 / (1 + math.Exp(-7))
	assert.InDelta(t, want0, p[0], 1e-6)
	assert.Equal(t, 0, d.Mode())
	_, err = d.LogProb(2)
	assert.ErrorContains(t, err, "masked")
	_, err = d.LogProb(4)
	assert.Error(t, err)
	lp, err := d.LogProb(3)
	require.NoError(t, err)
	assert.InDelta(t, math.Log(1-want0), lp, 1e-5)
	fl := d.FlooredLogits()
	assert.Equal(t, leyline.MaskedLogitValue, fl[1])
	assert.Equal(t, leyline.MaskedLogitValue, fl[2])
}

func TestMaskedCategoricalErrors(t *testing.T) {
	nan := float32(math.NaN())
	inf := float32(math.Inf(1))
	for _, logits := range [][]float32{{0, nan, 1}, {0, inf, 1}, {0, -inf, 1}} {
		_, err := NewMaskedCategorical(logits, []bool{true, true, true}, 0.1)
		require.Error(t, err)
		assert.True(t, errors.Is(err, ErrNonFiniteLogits))
		assert.Contains(t, err.Error(), "nan_count")
		assert.Contains(t, err.Error(), "min=")
	}
	_, err := NewMaskedCategorical([]float32{1, 2}, []bool{false, false}, 0.1)
	var ism *InvalidStateMachineError
	require.True(t, errors.As(err, &ism))
	assert.Equal(t, -1, ism.Row)

	_, err = NewMaskedCategoricalBatch([][]float32{{1, 2}, {1, 2}}, [][]bool{{true, false}, {false, false}}, 0)
	require.True(t, errors.As(err, &ism))
	assert.Equal(t, 1, ism.Row)

	_, err = NewMaskedCategorical([]float32{1, 2}, []bool{true}, 0)
	assert.Error(t, err)
	_, err = NewMaskedCategorical(nil, nil, 0)
	assert.Error(t, err)
	_, err = NewMaskedCategorical([]float32{1, 2}, []bool{true, true}, -0.1)
	assert.Error(t, err)
	_, err = NewMaskedCategoricalBatch([][]float32{{1}}, nil, 0)
	assert.Error(t, err)
	_, err = NewMaskedCategoricalBatch([][]float32{{1, 2}, {nan, 0}}, [][]bool{{true, true}, {true, true}}, 0)
	assert.ErrorContains(t, err, "row 1")
}

func TestProbabilityFloorMatchesReference(t *testing.T) {
	// One valid action far below the floor, the rest comfortable: the
	// single-pass reference formula applies unchanged.
	logits := []float32{2, 2, -6, 0}
	mask := []bool{true, true, true, false}
	floor := float32(0.15)
	d, err := NewMaskedCategorical(logits, mask, floor)
	require.NoError(t, err)
	// Reference: p = softmax over valid; under = {2}; scale = (1 − f)/(p0+p1).
	e2, em6 := math.Exp(2), math.Exp(-6)
	z := 2*e2 + em6
	p0 := e2 / z
	scale := (1 - 0.15) / (2 * p0)
	p := d.Probs()
	assert.InDelta(t, 0.15, p[2], 1e-6)
	assert.InDelta(t, p0*scale, p[0], 1e-6)
	assert.InDelta(t, p0*scale, p[1], 1e-6)
	assert.Less(t, p[3], float32(1e-30))
	assert.InDelta(t, 1, sum32(p), 1e-6)
	lp, err := d.LogProb(2)
	require.NoError(t, err)
	assert.InDelta(t, math.Log(0.15), lp, 1e-5, "log_prob uses the floored distribution")
}

func TestProbabilityFloorHolds(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for trial := range 300 {
		n := 2 + r.IntN(12)
		logits := make([]float32, n)
		mask := make([]bool, n)
		valid := 0
		for i := range n {
			logits[i] = float32(r.NormFloat64() * 6)
			mask[i] = r.IntN(4) != 0
			if mask[i] {
				valid++
			}
		}
		if valid == 0 {
			mask[0] = true
			valid = 1
		}
		floor := ProbabilityFloorPerHead[trial%leyline.NumActionHeads] * float32(1+r.IntN(4))
		d, err := NewMaskedCategorical(logits, mask, floor)
		require.NoError(t, err)
		eff := math.Min(float64(floor), 0.99/float64(valid))
		p := d.Probs()
		for i, v := range p {
			if mask[i] {
				assert.GreaterOrEqual(t, float64(v), eff-1e-6, "trial %d action %d", trial, i)
			} else {
				assert.Less(t, v, float32(1e-30))
			}
		}
		assert.InDelta(t, 1, sum32(p), 1e-5, "trial %d", trial)
		e := d.Entropy()
		assert.GreaterOrEqual(t, e, float32(0))
		assert.LessOrEqual(t, e, float32(1))
	}
}

func TestProbabilityFloorSecondPass(t *testing.T) {
	// p ≈ [0.60, 0.31, 0.09], floor 0.3: one pass would leave the second
	// action at 0.31·0.7/0.91 ≈ 0.238, under the floor.
	logits := []float32{float32(math.Log(0.60)), float32(math.Log(0.31)), float32(math.Log(0.09))}
	d, err := NewMaskedCategorical(logits, []bool{true, true, true}, 0.3)
	require.NoError(t, err)
	p := d.Probs()
	assert.InDelta(t, 0.3, p[1], 1e-6)
	assert.InDelta(t, 0.3, p[2], 1e-6)
	assert.InDelta(t, 0.4, p[0], 1e-6)
}

func TestFloorCappedByValidCount(t *testing.T) {
	// A floor of 0.9 over two valid actions is capped at 0.99/2.
	d, err := NewMaskedCategorical([]float32{10, 0, 3}, []bool{true, false, true}, 0.9)
	require.NoError(t, err)
	p := d.Probs()
	assert.InDelta(t, 0.495, p[2], 1e-6)
	assert.InDelta(t, 0.505, p[0], 1e-6)
}

func TestSampleUsesFlooredDistribution(t *testing.T) {
	logits := []float32{10, -10, -10, 0}
	mask := []bool{true, true, true, false}
	d, err := NewMaskedCategorical(logits, mask, 0.2)
	require.NoError(t, err)
	r := rand.New(rand.NewPCG(7, 7))
	counts := make([]int, 4)
	const n = 40000
	for range n {
		counts[d.Sample(r)]++
	}
	assert.Zero(t, counts[3], "masked action sampled")
	p := d.Probs()
	for i := range 3 {
		assert.InDelta(t, float64(p[i]), float64(counts[i])/n, 0.01, "action %d", i)
	}
	// Without the floor the tiny logits would almost never be drawn.
	assert.Greater(t, counts[1], n/10)
	assert.Equal(t, 0, d.Mode())
}

func TestEntropyNormalised(t *testing.T) {
	d, err := NewMaskedCategorical([]float32{3, 3, 3, 3}, []bool{true, true, true, false}, 0)
	require.NoError(t, err)
	assert.InDelta(t, 1, d.Entropy(), 1e-6, "uniform over valid → 1")
	assert.InDelta(t, math.Log(3), d.RawEntropy(), 1e-6)

	d, err = NewMaskedCategorical([]float32{3, 100, -5}, []bool{false, true, false}, 0.2)
	require.NoError(t, err)
	assert.Equal(t, float32(0), d.Entropy(), "single valid action → exactly 0")
	assert.Equal(t, 1, d.Mode())

	d, err = NewMaskedCategorical([]float32{20, 0, 0}, []bool{true, true, true}, 0)
	require.NoError(t, err)
	assert.Less(t, d.Entropy(), float32(0.01))
	assert.Greater(t, d.Entropy(), float32(0))
}

func TestModeDeterministicTie(t *testing.T) {
	d, err := NewMaskedCategorical([]float32{1, 4, 4, 9}, []bool{true, true, true, false}, 0)
	require.NoError(t, err)
	assert.Equal(t, 1, d.Mode())
}

func TestBatchMaskedCategorical(t *testing.T) {
	ds, err := NewMaskedCategoricalBatch(
		[][]float32{{0, 0}, {5, -5, 0}},
		[][]bool{{true, true}, {false, true, true}}, ProbabilityFloorPerHead[leyline.HeadOp])
	require.NoError(t, err)
	require.Len(t, ds, 2)
	assert.InDelta(t, 0.5, ds[0].Probs()[0], 1e-6)
	assert.Equal(t, 2, ds[1].NumValid())
	assert.Equal(t, 2, ds[1].Mode())
}

func TestProbabilityFloorDefaults(t *testing.T) {
	want := map[string]float32{"op": .15, "slot": .05, "blueprint": .12, "style": .08, "tempo": .12,
		"alpha_target": .08, "alpha_speed": .06, "alpha_curve": .06}
	for name, v := range want {
		assert.Equal(t, v, ProbabilityFloorPerHead[leyline.HeadIndex(name)], name)
	}
}
