package runplot

import (
	"fmt"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
)

// EvalSeries is one controller's final validation accuracy per seed, in
// the order of the seeds of the plot.
type EvalSeries struct {
	Controller string
	Accuracy   []float64
}

// WriteEval draws each controller's final validation accuracy per seed
// (one marker series per controller, the seeds along the x axis) and
// writes it as a PNG atomically.
func WriteEval(path string, seeds []uint64, series []EvalSeries) error {
	p := newPlot("final validation accuracy per seed", "seed", "accuracy (%)")
	labels := make([]string, len(seeds))
	for i, s := range seeds {
		labels[i] = fmt.Sprint(s)
	}
	p.NominalX(labels...)
	shapes := []draw.GlyphDrawer{draw.CircleGlyph{}, draw.SquareGlyph{}, draw.TriangleGlyph{}, draw.PlusGlyph{}, draw.CrossGlyph{}, draw.RingGlyph{}}
	for i, s := range series {
		var xy plotter.XYs
		for j, v := range s.Accuracy {
			if j >= len(seeds) {
				break
			}
			if y, ok := value(v); ok {
				xy = append(xy, plotter.XY{X: float64(j), Y: y})
			}
		}
		if len(xy) == 0 {
			continue
		}
		sc, err := plotter.NewScatter(xy)
		if err != nil {
			return fmt.Errorf("plot %s: %w", path, err)
		}
		sc.GlyphStyle.Color = lineColor(i)
		sc.GlyphStyle.Shape = shapes[i%len(shapes)]
		sc.GlyphStyle.Radius = vg.Points(3.5)
		p.Add(sc)
		p.Legend.Add(s.Controller, sc)
	}
	w := max(8*vg.Inch, vg.Length(len(seeds))*0.45*vg.Inch+3*vg.Inch)
	return savePNG(path, [][]*plot.Plot{{p}}, w, 5*vg.Inch)
}
