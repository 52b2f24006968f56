package runplot

import (
	"image/png"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"
	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/recorder"

	"github.com/esper-go/esper/leyline"
)

func TestPlotsWritePNGs(t *testing.T) {
	dir := t.TempDir()
	h := History{Title: "test run", Alphas: map[string]plotter.XYs{}}
	for e := 0; e < 12; e++ {
		h.Epochs = append(h.Epochs, Point{Epoch: e, TrainLoss: 2.3 / float64(e+1), ValLoss: 2.4 / float64(e+1), TrainAcc: float64(10 + 5*e), ValAcc: float64(9 + 5*e)})
	}
	h.Marks = []Mark{{3, "germinated", "r0c0-conv_light"}, {5, "blending", "r0c0-conv_light"}, {9, "fossilized", "r0c0-conv_light"}, {6, "pruned", "r0c1-norm"}}
	h.Alphas["r0c0-conv_light"] = plotter.XYs{{X: 5, Y: 0}, {X: 6, Y: 0.5}, {X: 7, Y: 1}}

	for _, tc := range []struct {
		name  string
		write func(string, History) error
		w, h  int
	}{{"training.png", WriteTraining, 800, 800}, {"alpha.png", WriteAlpha, 800, 400}} {
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
	require.Error(t, WriteTraining(filepath.Join(dir, "empty.png"), History{}))
	require.NoError(t, WriteAlpha(filepath.Join(dir, "none.png"), History{}))
}

// TestTickLabelsDistinct: tick labels never repeat and say their value
// to a thousandth of the spacing, however narrow the range; an integer
// axis is labelled on whole numbers only.
func TestTickLabelsDistinct(t *testing.T) {
	for _, r := range [][2]float64{
		{2.2991, 2.3448}, // the loss of the repro: "2.3", "2.3" before
		{2.29, 2.35}, {9.0, 11.3}, {0, 100}, {0.1, 0.1003}, {1e-6, 5e-6}, {-0.004, 0.003},
		{12345.1, 12345.3}, {0, 1.05}, {1, 8}, {-1, 1},
	} {
		for _, integer := range []bool{false, true} {
			ticks := distinctTicks{Integer: integer}.Ticks(r[0], r[1])
			var vals []float64
			seen := map[string]bool{}
			for _, tk := range ticks {
				if tk.Label == "" {
					continue
				}
				require.False(t, seen[tk.Label], "%v integer=%v: label %q twice in %v", r, integer, tk.Label, ticks)
				seen[tk.Label] = true
				back, err := strconv.ParseFloat(tk.Label, 64)
				require.NoError(t, err)
				if integer {
					require.Equal(t, math.Round(tk.Value), tk.Value, "%v: %q is not a whole number", r, tk.Label)
				}
				vals = append(vals, tk.Value)
				require.InDelta(t, tk.Value, back, math.Abs(r[1]-r[0])/1000+1e-12, "%v: %q for %v", r, tk.Label, tk.Value)
			}
			if !integer || r[1]-r[0] >= 1 {
				require.GreaterOrEqual(t, len(vals), 2, "%v integer=%v: %v", r, integer, ticks)
			}
		}
	}
	require.Equal(t, []string{"2.30", "2.32", "2.34"}, tickLabels([]float64{2.30, 2.32, 2.34}))
	require.Equal(t, []string{"0", "0.25", "0.50", "0.75"}[1:], tickLabels([]float64{0.25, 0.5, 0.75}))
	require.Equal(t, []string{"0", "50", "100"}, tickLabels([]float64{-1e-15, 50, 100}), "no -0")
	require.Equal(t, []string{"1e-06", "2e-06"}, tickLabels([]float64{1e-6, 2e-6}))
}

// TestPlotColorsDistinct: no two of the first 64 line colours are the
// same (the eight PPO heads repeated colours with a six-colour palette),
// and each differs visibly from the others.
func TestPlotColorsDistinct(t *testing.T) {
	const n = 64
	for i := 0; i < n; i++ {
		for j := 0; j < i; j++ {
			a, b := lineColor(i), lineColor(j)
			d := math.Abs(float64(a.R)-float64(b.R)) + math.Abs(float64(a.G)-float64(b.G)) + math.Abs(float64(a.B)-float64(b.B))
			require.Greater(t, d, 12.0, "colours %d %v and %d %v", i, a, j, b)
		}
	}
}

// TestAlphaPlotEpochAxis: the alpha plot's epoch axis spans the run's
// epochs even when no seed was germinated (it was -1 to 1).
func TestAlphaPlotEpochAxis(t *testing.T) {
	h := History{}
	for e := 1; e <= 8; e++ {
		h.Epochs = append(h.Epochs, Point{Epoch: e})
	}
	lo, hi, ok := epochRange(h)
	require.True(t, ok)
	require.Equal(t, [2]float64{1, 8}, [2]float64{lo, hi})
	lo, hi, ok = epochRange(History{Epochs: []Point{{Epoch: 5}}})
	require.True(t, ok)
	require.Equal(t, [2]float64{4.5, 5.5}, [2]float64{lo, hi})
	_, _, ok = epochRange(History{})
	require.False(t, ok)

	// The drawn plot uses it.
	p, err := alphaPlot(h)
	require.NoError(t, err)
	c := &recorder.Canvas{}
	drawGrid(draw.NewCanvas(c, 800, 400), [][]*plot.Plot{{p}})
	var labels []string
	for _, a := range c.Actions {
		if fs, ok := a.(*recorder.FillString); ok {
			labels = append(labels, fs.String)
		}
	}
	require.NotContains(t, labels, "-1")
	require.Contains(t, labels, "8")
}

// TestLegendOutsideData: every legend is drawn to the right of its
// plot's data area, so it covers no line (the PPO plot's legends sat on
// its lines).
func TestLegendOutsideData(t *testing.T) {
	var rounds []Round
	for r := 1; r <= 12; r++ {
		ent := make([]float64, leyline.NumActionHeads)
		for h := range ent {
			ent[h] = 1 - float64(r*h)/100
		}
		rounds = append(rounds, Round{Round: r, Return: float64(r), Entropy: ent, KL: 1e-3, ExplainedVariance: 0.5, PolicyLoss: -0.01, ValueLoss: 0.2, EnvEpochsPerSec: 30})
	}
	plots, err := ppoPlots(rounds)
	require.NoError(t, err)
	h := History{Title: "t", Alphas: map[string]plotter.XYs{"r0c0-norm": {{X: 1, Y: 0}, {X: 2, Y: 1}}}}
	for e := 1; e <= 3; e++ {
		h.Epochs = append(h.Epochs, Point{Epoch: e, TrainLoss: 2, ValLoss: 2.1, TrainAcc: 10, ValAcc: 11})
	}
	loss, acc, err := trainingPlots(h)
	require.NoError(t, err)

	for _, tc := range []struct {
		grid   [][]*plot.Plot
		legend map[string]bool
	}{
		{plots, map[string]bool{"slot": true, "op": true, "alpha_target": true, "policy": true, "value": true}},
		{[][]*plot.Plot{{loss}, {acc}}, map[string]bool{"train": true, "validation": true}},
	} {
		c := &recorder.Canvas{}
		canvases := drawGrid(draw.NewCanvas(c, 18*vg.Inch, 9*vg.Inch), tc.grid)
		var data []vg.Rectangle
		for r := range tc.grid {
			for col := range tc.grid[r] {
				data = append(data, tc.grid[r][col].DataCanvas(canvases[r][col]).Rectangle)
			}
		}
		found := map[string]bool{}
		for _, a := range c.Actions {
			fs, ok := a.(*recorder.FillString)
			if !ok || !tc.legend[fs.String] {
				continue
			}
			found[fs.String] = true
			for _, d := range data {
				inside := fs.Point.X >= d.Min.X && fs.Point.X <= d.Max.X && fs.Point.Y >= d.Min.Y && fs.Point.Y <= d.Max.Y
				require.False(t, inside, "legend %q at %v is inside the data area %v", fs.String, fs.Point, d)
			}
		}
		require.Equal(t, tc.legend, found, "every legend entry is drawn")
	}
}

// TestWriteEval writes the evaluation plot, NaN points and a missing
// value included, and checks a PNG came out.
func TestWriteEval(t *testing.T) {
	path := filepath.Join(t.TempDir(), "eval.png")
	err := WriteEval(path, []uint64{101, 102, 103}, []EvalSeries{
		{Controller: "heuristic", Accuracy: []float64{27, 26.5, math.NaN()}},
		{Controller: "none", Accuracy: []float64{13.1, 12}},
	})
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(b) < 8 || string(b[1:4]) != "PNG" {
		t.Fatalf("%s is not a PNG", path)
	}
}
