package tolaria

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/esper-go/esper/kasmina"
	"github.com/esper-go/esper/nn"
	"github.com/esper-go/esper/tensor"
)

// linearRun trains a linear classifier over its input (a
// kasmina.LinearHost, W1's shape) on dev for 4 epochs of 4 batches,
// captured or not, with clip (-1: none) as MaxGradNorm, and returns the
// trainer, the summary and the final parameters.
func linearRun(t *testing.T, dev tensor.Device, capture bool, clip float64) (*Trainer, Summary, map[string][]float32) {
	t.Helper()
	rng := tensor.NewRNG(5)
	lin, err := nn.NewLinear(rng, nn.LinearOptions{In: 16, Out: 4})
	require.NoError(t, err)
	host, err := kasmina.NewLinearHost(lin)
	require.NoError(t, err)
	m, err := kasmina.NewMorphogeneticModel(host, kasmina.ModelOptions{Slots: []string{kasmina.LinearHostSlot}})
	require.NoError(t, err)
	require.NoError(t, nn.To(m, dev))
	x, y := tensor.Normal(rng, tensor.F32, 0, 1, 16, 16), tensor.RandInt(rng, 4, 16)
	if !dev.IsCPU() {
		x, err = x.ToDevice(dev)
		require.NoError(t, err)
		y, err = y.ToDevice(dev)
		require.NoError(t, err)
	}
	data, err := NewFixed(x, y, FixedOptions{Size: 4})
	require.NoError(t, err)
	tr, err := NewTrainer(TrainerOptions{
		Model: m, Train: data, Val: data, Epochs: 4, HostLR: 0.05, HostMomentum: 0.9,
		GradientTelemetryStride: -1, Capture: capture, MaxGradNorm: clip,
	})
	require.NoError(t, err)
	sum, err := tr.Fit(context.Background())
	require.NoError(t, err)
	return tr, sum, params(t, m)
}

// TestLinearClassifierStepsWhole: a model that is a linear classifier
// over its input trains with each step taken whole
// (optim.SGD.LinearCEStep), eagerly and captured (the epoch graph), on
// the CPU and on sim — with the reports and parameters of the step run
// as forward, backward and update, bit for bit (a clip far above the
// gradients' norm sends the trainer down that path and scales by
// exactly one).
func TestLinearClassifierStepsWhole(t *testing.T) {
	for _, dev := range []tensor.Device{tensor.CPU, tensor.Sim(0)} {
		for _, capture := range []bool{false, true} {
			tr, whole, wp := linearRun(t, dev, capture, -1)
			require.Positive(t, tr.step.whole, "%v capture %v: steps taken whole", dev, capture)
			ref, parts, pp := linearRun(t, dev, capture, 1e30)
			require.Zero(t, ref.step.whole, "%v capture %v: clipping takes the step apart", dev, capture)
			require.Equal(t, pp, wp, "%v capture %v: final parameters", dev, capture)
			for _, s := range []*Summary{&whole, &parts} {
				for i := range s.Epochs {
					s.Epochs[i].Captured, s.Epochs[i].EpochCaptured = false, false
				}
			}
			sameReports(t, parts.Epochs, whole.Epochs)
		}
	}
}
