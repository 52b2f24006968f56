package tolaria

import (
	"context"
	"math"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/esper-go/esper/internal/testdevice"
	"github.com/esper-go/esper/tensor"
)

// TestTrainerRefusesBadArguments (issue 20, point 7): options and
// arguments that used to pass silently are refused up front, each with
// an error that names what is wrong.
func TestTrainerRefusesBadArguments(t *testing.T) {
	d := toyData(t, 1, 1, 4)
	for name, mg := range map[string]float64{"NaN": math.NaN(), "+Inf": math.Inf(1), "-Inf": math.Inf(-1)} {
		_, err := NewTrainer(TrainerOptions{Model: trainerModel(t), Train: d, Val: d, Epochs: 1, MaxGradNorm: mg})
		require.ErrorIs(t, err, ErrOptions, "MaxGradNorm %s", name)
		require.ErrorContains(t, err, "MaxGradNorm")
	}
	_, err := NewTrainer(TrainerOptions{Model: trainerModel(t), Train: d, Val: d, Epochs: MaxEpochs + 1})
	require.ErrorIs(t, err, ErrOptions)
	require.ErrorContains(t, err, "Epochs")

	tr, err := NewTrainer(TrainerOptions{Model: trainerModel(t), Train: d, Val: d, Epochs: 1})
	require.NoError(t, err)
	for _, e := range []int{-5, -1, MaxEpochs} {
		_, err := tr.RunEpoch(context.Background(), e)
		require.ErrorContains(t, err, "RunEpoch: epoch index", "RunEpoch(ctx, %d)", e)
	}
	require.Empty(t, tr.Summary().Epochs, "a refused RunEpoch runs nothing")
}

// TestTrainerRefusesBadBatches (issue 20, point 7): nil batch tensors
// and 0-row batches, in training or validation, fail the epoch with a
// message that says which batch and what is wrong, instead of a
// recovered nil dereference or integer division by zero.
func TestTrainerRefusesBadBatches(t *testing.T) {
	good := toyData(t, 1, 1, 4)
	zeros := func(d tensor.DType, shape ...int) *tensor.Tensor { return testdevice.To(t, tensor.Zeros(d, shape...)) }
	empty := fixedBatches{x: []*tensor.Tensor{zeros(tensor.F32, 0, 1, 8, 8)}, y: []*tensor.Tensor{zeros(tensor.I64, 0)}}
	for _, c := range []struct {
		name       string
		train, val fixedBatches
		want       string
	}{
		{"nil images", fixedBatches{x: []*tensor.Tensor{nil}, y: good.y}, good, "training batch 1: nil images"},
		{"nil labels", fixedBatches{x: good.x, y: []*tensor.Tensor{nil}}, good, "training batch 1: nil labels"},
		{"0 rows", empty, good, "training batch 1 has no rows"},
		{"rows differ", fixedBatches{x: good.x, y: []*tensor.Tensor{zeros(tensor.I64, 3)}}, good, "4 images but 3 labels"},
		{"labels not a vector", fixedBatches{x: good.x, y: []*tensor.Tensor{zeros(tensor.I64, 4, 1)}}, good, "labels of shape [4 1]"},
		{"float labels", fixedBatches{x: good.x, y: []*tensor.Tensor{zeros(tensor.F32, 4)}}, good, "labels of dtype f32"},
		{"nil validation images", good, fixedBatches{x: []*tensor.Tensor{nil}, y: good.y}, "validation batch 1: nil images"},
		{"0-row validation batch", good, empty, "validation batch 1 has no rows"},
		{"no validation batches", good, fixedBatches{}, "validation batches of epoch 1 are empty"},
	} {
		t.Run(c.name, func(t *testing.T) {
			tr, err := NewTrainer(TrainerOptions{Model: trainerModel(t), Train: c.train, Val: c.val, Epochs: 1})
			require.NoError(t, err)
			_, err = tr.Fit(context.Background())
			require.Error(t, err)
			require.Contains(t, err.Error(), c.want)
			require.NotContains(t, strings.ToLower(err.Error()), "runtime error")
		})
	}
}
