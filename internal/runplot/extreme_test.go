package runplot

import (
	"math"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"gonum.org/v1/plot/plotter"
)

// finishes runs f and fails t if it does not return within d (gonum's
// tick search looped forever on a range of ±1e308).
func finishes(t *testing.T, d time.Duration, f func() error) error {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- f() }()
	select {
	case err := <-done:
		return err
	case <-time.After(d):
		t.Fatalf("did not finish in %v", d)
		return nil
	}
}

// TestPPOPlotSurvivesExtremeFigures: a history of ±1e308, ±Inf, NaN and
// subnormal figures (a forged or diverged run) still plots.
func TestPPOPlotSurvivesExtremeFigures(t *testing.T) {
	vals := []float64{1e308, -1e308, math.Inf(1), math.NaN(), 5e-324, -math.MaxFloat64, 0}
	var h []Round
	for i, v := range vals {
		h = append(h, Round{Round: i + 1, Return: v, KL: v, ExplainedVariance: -v, PolicyLoss: v, ValueLoss: v,
			EnvEpochsPerSec: v, Entropy: []float64{v, -v, 1}})
	}
	err := finishes(t, 20*time.Second, func() error { return WritePPO(filepath.Join(t.TempDir(), "ppo.png"), h) })
	require.NoError(t, err)
}

// TestTrainingPlotsSurviveDivergence: a run whose losses went NaN (esper
// train --lr 1e6 ended in "plotter: NaN data point" with no summary),
// infinite or ±1e308 still writes both plots.
func TestTrainingPlotsSurviveDivergence(t *testing.T) {
	h := History{Title: "diverged", Alphas: map[string]plotter.XYs{
		"s1": {{X: 1, Y: math.NaN()}, {X: 2, Y: 0.5}},
		"s2": {{X: 1, Y: math.Inf(1)}},
	}}
	for i, v := range []float64{2.3, 1e308, -1e308, math.Inf(1), math.NaN(), math.NaN()} {
		h.Epochs = append(h.Epochs, Point{Epoch: i + 1, TrainLoss: v, ValLoss: v, TrainAcc: 10, ValAcc: -v})
	}
	dir := t.TempDir()
	require.NoError(t, finishes(t, 20*time.Second, func() error { return WriteTraining(filepath.Join(dir, "training.png"), h) }))
	require.NoError(t, finishes(t, 20*time.Second, func() error { return WriteAlpha(filepath.Join(dir, "alpha.png"), h) }))
	all := History{Title: "all NaN", Epochs: []Point{{Epoch: 1, TrainLoss: math.NaN(), ValLoss: math.NaN(), TrainAcc: math.NaN(), ValAcc: math.NaN()}}}
	require.NoError(t, finishes(t, 20*time.Second, func() error { return WriteTraining(filepath.Join(dir, "nan.png"), all) }))
}
