package main

import (
	"fmt"
	"image/png"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
	"gonum.org/v1/plot/plotter"

	"github.com/esper-go/esper/leyline"
	"github.com/esper-go/esper/tolaria"
)

func TestPlotsWritePNGs(t *testing.T) {
	dir := t.TempDir()
	h := runHistory{Title: "test run", Alphas: map[string]plotter.XYs{}}
	for e := 0; e < 12; e++ {
		h.Epochs = append(h.Epochs, epochPoint{Epoch: e, TrainLoss: 2.3 / float64(e+1), ValLoss: 2.4 / float64(e+1), TrainAcc: float64(10 + 5*e), ValAcc: float64(9 + 5*e)})
	}
	h.Marks = []lifecycleMark{{3, "germinated", "r0c0-conv_light"}, {5, "blending", "r0c0-conv_light"}, {9, "fossilized", "r0c0-conv_light"}, {6, "pruned", "r0c1-norm"}}
	h.Alphas["r0c0-conv_light"] = plotter.XYs{{X: 5, Y: 0}, {X: 6, Y: 0.5}, {X: 7, Y: 1}}

	for _, tc := range []struct {
		name  string
		write func(string, runHistory) error
		w, h  int
	}{{"training.png", writeTrainingPlot, 800, 800}, {"alpha.png", writeAlphaPlot, 800, 400}} {
		path := filepath.Join(dir, tc.name)
		require.NoError(t, tc.write(path, h))
		f, err := os.Open(path)
		require.NoError(t, err)
		img, err := png.Decode(f)
		f.Close()
		require.NoError(t, err, tc.name)
		// vgimg renders at 96 dpi from sizes in points (rounded).
		require.InDelta(t, float64(tc.w)*96/72, img.Bounds().Dx(), 1, tc.name)
		require.InDelta(t, float64(tc.h)*96/72, img.Bounds().Dy(), 1, tc.name)
	}
	matches, _ := filepath.Glob(filepath.Join(dir, ".*"))
	require.Empty(t, matches, "no temporary files left behind")
	require.Error(t, writeTrainingPlot(filepath.Join(dir, "empty.png"), runHistory{}))
	require.NoError(t, writeAlphaPlot(filepath.Join(dir, "none.png"), runHistory{}))
}

// TestHistoryMarks: lifecycle marks come from stage changes between
// epochs, a prune included when the seed is already EMBARGOED when the
// epoch reports.
func TestHistoryMarks(t *testing.T) {
	seed := func(stage leyline.SeedStage, alpha float64) []leyline.SeedReport {
		return []leyline.SeedReport{{SeedID: "r0c0-norm", SlotID: "r0c0", Stage: stage, Alpha: alpha}}
	}
	sum := tolaria.Summary{Epochs: []tolaria.EpochReport{
		{Epoch: 0},
		{Epoch: 1, Seeds: seed(leyline.StageGerminated, 0)},
		{Epoch: 2, Seeds: seed(leyline.StageBlending, 0.5)},
		{Epoch: 3, Seeds: seed(leyline.StageEmbargoed, 0)},
	}}
	h := history(sum, "t")
	var kinds []string
	for _, m := range h.Marks {
		kinds = append(kinds, fmt.Sprintf("%d:%s", m.Epoch, m.Kind))
	}
	require.Equal(t, []string{"2:germinated", "3:blending", "4:pruned"}, kinds)
	require.Len(t, h.Alphas["r0c0-norm"], 3)
	require.Len(t, h.Epochs, 4)
}
