// Package runplot draws the PNG plots of a run directory: esper train's
// training.png (losses and accuracies per epoch with the seeds'
// lifecycle events) and alpha.png (each seed's alpha), and esper ppo's
// ppo.png (the figures of every round). The plots survive any figures:
// NaN and infinities are left out, finite values clamped, and tick
// labels never repeat.
package runplot

import (
	"bytes"
	"fmt"
	"image/color"
	"math"
	"sort"

	"github.com/esper-go/esper/internal/atomicfile"
	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
)

// Point is one epoch of a training run, as the plots need it.
type Point struct {
	Epoch              int
	TrainLoss, ValLoss float64
	TrainAcc, ValAcc   float64 // percent
}

// Mark is a seed lifecycle event, drawn as a vertical line.
type Mark struct {
	Epoch int
	Kind  string // "germinated", "blending", "fossilized", "pruned"
	Seed  string
}

// History is everything the plots of one training run show.
type History struct {
	Title  string
	Epochs []Point
	Marks  []Mark
	// Alphas holds each seed's alpha per epoch (seed id → points).
	Alphas map[string]plotter.XYs
}

var markColors = map[string]color.RGBA{
	"germinated": {R: 0x1f, G: 0x77, B: 0xb4, A: 0xff},
	"blending":   {R: 0xff, G: 0x7f, B: 0x0e, A: 0xff},
	"fossilized": {R: 0x2c, G: 0xa0, B: 0x2c, A: 0xff},
	"pruned":     {R: 0xd6, G: 0x27, B: 0x28, A: 0xff},
}

// WriteTraining draws loss (top) and accuracy (bottom) per epoch with
// the lifecycle events as vertical lines, and writes it as a PNG
// atomically. A history without epochs is an error.
func WriteTraining(path string, h History) error {
	loss, acc, err := trainingPlots(h)
	if err != nil {
		return fmt.Errorf("plot %s: %w", path, err)
	}
	return savePNG(path, [][]*plot.Plot{{loss}, {acc}}, 800, 800)
}

// plotLimit bounds the values drawn: a range of ±1e308 overflows to an
// infinite span, in which gonum's tick search never ends.
const plotLimit = 1e300

// value returns v as drawn and whether it is drawn at all: NaN and
// infinities (a diverged run) are left out, finite values are clamped to
// ±plotLimit.
func value(v float64) (float64, bool) {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return 0, false
	}
	return max(-plotLimit, min(plotLimit, v)), true
}

// trainingPlots builds WriteTraining's two plots.
func trainingPlots(h History) (loss, acc *plot.Plot, err error) {
	if len(h.Epochs) == 0 {
		return nil, nil, fmt.Errorf("no epochs to draw")
	}
	loss = newPlot(h.Title, "", "loss")
	acc = newPlot("", "epoch", "accuracy %")
	series := func(p *plot.Plot, name string, dash bool, y func(Point) float64) error {
		var xys plotter.XYs
		for _, e := range h.Epochs {
			if v, ok := value(y(e)); ok {
				xys = append(xys, plotter.XY{X: float64(e.Epoch), Y: v})
			}
		}
		if len(xys) == 0 { // a diverged run: nothing finite to draw
			return nil
		}
		l, err := plotter.NewLine(xys)
		if err != nil {
			return err
		}
		l.Width = vg.Points(1.5)
		if dash {
			l.Dashes = []vg.Length{vg.Points(4), vg.Points(2)}
		}
		p.Add(l)
		p.Legend.Add(name, l)
		return nil
	}
	for _, s := range []struct {
		p    *plot.Plot
		name string
		dash bool
		y    func(Point) float64
	}{
		{loss, "train", true, func(e Point) float64 { return e.TrainLoss }},
		{loss, "validation", false, func(e Point) float64 { return e.ValLoss }},
		{acc, "train", true, func(e Point) float64 { return e.TrainAcc }},
		{acc, "validation", false, func(e Point) float64 { return e.ValAcc }},
	} {
		if err := series(s.p, s.name, s.dash, s.y); err != nil {
			return nil, nil, err
		}
	}
	lLo, lHi, aLo, aHi := math.Inf(1), math.Inf(-1), math.Inf(1), math.Inf(-1)
	for _, e := range h.Epochs {
		lLo, lHi = math.Min(lLo, math.Min(e.TrainLoss, e.ValLoss)), math.Max(lHi, math.Max(e.TrainLoss, e.ValLoss))
		aLo, aHi = math.Min(aLo, math.Min(e.TrainAcc, e.ValAcc)), math.Max(aHi, math.Max(e.TrainAcc, e.ValAcc))
	}
	for _, m := range []struct {
		p      *plot.Plot
		lo, hi float64
	}{{loss, lLo, lHi}, {acc, aLo, aHi}} {
		if err := addMarks(m.p, h.Marks, m.lo, m.hi); err != nil {
			return nil, nil, err
		}
	}
	return loss, acc, nil
}

// addMarks draws each lifecycle event as a vertical line from lo to hi
// (the data's range), with one legend entry per kind.
func addMarks(p *plot.Plot, marks []Mark, lo, hi float64) error {
	if len(marks) == 0 {
		return nil
	}
	if !(hi > lo) || math.IsInf(lo, 0) || math.IsInf(hi, 0) || math.IsNaN(lo) || math.IsNaN(hi) {
		lo, hi = 0, 1
	}
	seen := map[string]bool{}
	for _, m := range marks {
		c, ok := markColors[m.Kind]
		if !ok {
			c = color.RGBA{A: 0xff}
		}
		l, err := plotter.NewLine(plotter.XYs{{X: float64(m.Epoch), Y: lo}, {X: float64(m.Epoch), Y: hi}})
		if err != nil {
			return err
		}
		l.Color = c
		l.Dashes = []vg.Length{vg.Points(2), vg.Points(2)}
		p.Add(l)
		if !seen[m.Kind] {
			seen[m.Kind] = true
			p.Legend.Add(m.Kind, l)
		}
	}
	return nil
}

// WriteAlpha draws each seed's alpha per epoch and writes a PNG. The
// epoch axis spans the run's epochs, seeds or not.
func WriteAlpha(path string, h History) error {
	p, err := alphaPlot(h)
	if err != nil {
		return fmt.Errorf("plot %s: %w", path, err)
	}
	return savePNG(path, [][]*plot.Plot{{p}}, 800, 400)
}

// alphaPlot builds WriteAlpha's plot.
func alphaPlot(h History) (*plot.Plot, error) {
	p := newPlot("seed alpha", "epoch", "alpha")
	p.Y.Min, p.Y.Max = 0, 1.05
	if lo, hi, ok := epochRange(h); ok {
		p.X.Min, p.X.Max = lo, hi
	}
	ids := make([]string, 0, len(h.Alphas))
	for id := range h.Alphas {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	if len(ids) == 0 {
		// An empty plot still says so rather than failing the run.
		p.Title.Text = "seed alpha (no seeds were germinated)"
	}
	for i, id := range ids {
		var xys plotter.XYs
		for _, xy := range h.Alphas[id] {
			if v, ok := value(xy.Y); ok {
				xys = append(xys, plotter.XY{X: xy.X, Y: v})
			}
		}
		if len(xys) == 0 {
			continue
		}
		l, err := plotter.NewLine(xys)
		if err != nil {
			return nil, fmt.Errorf("seed %s: %w", id, err)
		}
		l.Width = vg.Points(1.5)
		l.Color = lineColor(i)
		p.Add(l)
		p.Legend.Add(id, l)
	}
	return p, nil
}

// epochRange is the span of the run's epochs for an epoch axis (one
// epoch gets half an epoch either side); ok is false with no epochs.
func epochRange(h History) (lo, hi float64, ok bool) {
	if len(h.Epochs) == 0 {
		return 0, 0, false
	}
	lo, hi = math.Inf(1), math.Inf(-1)
	for _, e := range h.Epochs {
		lo, hi = math.Min(lo, float64(e.Epoch)), math.Max(hi, float64(e.Epoch))
	}
	if lo == hi {
		lo, hi = lo-0.5, hi+0.5
	}
	return lo, hi, true
}

// newPlot is a plot with our tick labels: whole numbers on the x axis
// (epochs, rounds), and on both axes labels that never repeat.
func newPlot(title, x, y string) *plot.Plot {
	p := plot.New()
	p.Title.Text = title
	p.X.Label.Text = x
	p.Y.Label.Text = y
	p.X.Tick.Marker = distinctTicks{Integer: true}
	p.Y.Tick.Marker = distinctTicks{}
	return p
}

// palette holds the first line colours: ten hues far apart, so a seed
// or a head keeps its colour across runs. lineColor makes more.
var palette = []color.RGBA{
	{R: 0x1f, G: 0x77, B: 0xb4, A: 0xff}, {R: 0xff, G: 0x7f, B: 0x0e, A: 0xff},
	{R: 0x2c, G: 0xa0, B: 0x2c, A: 0xff}, {R: 0xd6, G: 0x27, B: 0x28, A: 0xff},
	{R: 0x94, G: 0x67, B: 0xbd, A: 0xff}, {R: 0x8c, G: 0x56, B: 0x4b, A: 0xff},
	{R: 0xe3, G: 0x77, B: 0xc2, A: 0xff}, {R: 0x7f, G: 0x7f, B: 0x7f, A: 0xff},
	{R: 0xbc, G: 0xbd, B: 0x22, A: 0xff}, {R: 0x17, G: 0xbe, B: 0xcf, A: 0xff},
}

// lineColor returns the i-th line colour: the palette, then colours
// whose hues step by the golden angle (each far from its neighbours)
// with the lightness cycling over three levels, so no two lines of a
// plot share a colour.
func lineColor(i int) color.RGBA {
	if i < len(palette) {
		return palette[i]
	}
	k := i - len(palette)
	hue := math.Mod(float64(k)*0.6180339887498949+0.1, 1)
	light := []float64{0.45, 0.30, 0.60}[k%3]
	return hsl(hue, 0.75, light)
}

// hsl converts a colour from hue, saturation and lightness (all in
// [0, 1]) to RGB.
func hsl(h, s, l float64) color.RGBA {
	c := (1 - math.Abs(2*l-1)) * s
	hp := h * 6
	x := c * (1 - math.Abs(math.Mod(hp, 2)-1))
	var r, g, b float64
	switch int(hp) % 6 {
	case 0:
		r, g = c, x
	case 1:
		r, g = x, c
	case 2:
		g, b = c, x
	case 3:
		g, b = x, c
	case 4:
		r, b = x, c
	default:
		r, b = c, x
	}
	m := l - c/2
	to8 := func(v float64) uint8 { return uint8(math.Round(255 * math.Min(1, math.Max(0, v+m)))) }
	return color.RGBA{R: to8(r), G: to8(g), B: to8(b), A: 0xff}
}

// legendGap separates a legend from the plot's data area.
const legendGap = vg.Length(8)

// drawGrid lays the plots out on a grid of tiles on dc and draws them,
// each legend to the right of its plot's data area so that it never
// covers a line: every plot of a column gives up the width of the
// column's widest legend (the x axes of a column stay aligned). It
// returns the canvas each plot was drawn on.
func drawGrid(dc draw.Canvas, plots [][]*plot.Plot) [][]draw.Canvas {
	tiles := draw.Tiles{Rows: len(plots), Cols: len(plots[0]), PadTop: vg.Points(4), PadBottom: vg.Points(4), PadLeft: vg.Points(4), PadRight: vg.Points(4), PadX: vg.Points(8), PadY: vg.Points(8)}
	canvases := plot.Align(plots, tiles, dc)
	for c := range plots[0] {
		var w vg.Length
		for r := range plots {
			w = max(w, plots[r][c].Legend.Rectangle(canvases[r][c]).Size().X)
		}
		if w == 0 {
			continue
		}
		for r := range plots {
			l := &plots[r][c].Legend
			l.Top, l.Left, l.XOffs = true, false, w+legendGap
			canvases[r][c] = draw.Crop(canvases[r][c], 0, -(w + legendGap), 0, 0)
		}
	}
	for r := range plots {
		for c := range plots[r] {
			plots[r][c].Draw(canvases[r][c])
		}
	}
	return canvases
}

// savePNG lays plots out on a grid and writes the PNG atomically.
func savePNG(path string, plots [][]*plot.Plot, w, h vg.Length) error {
	img := vgimg.New(w, h)
	drawGrid(draw.New(img), plots)
	var buf bytes.Buffer
	if _, err := (vgimg.PngCanvas{Canvas: img}).WriteTo(&buf); err != nil {
		return fmt.Errorf("plot %s: %w", path, err)
	}
	return atomicfile.WriteBytes(path, buf.Bytes())
}
