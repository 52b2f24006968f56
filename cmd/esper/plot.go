package main

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

// epochPoint is one epoch of a training run, as the plots need it.
type epochPoint struct {
	Epoch              int
	TrainLoss, ValLoss float64
	TrainAcc, ValAcc   float64 // percent
}

// lifecycleMark is a seed event to draw as a vertical line.
type lifecycleMark struct {
	Epoch int
	Kind  string // "germinated", "blending", "fossilized", "pruned"
	Seed  string
}

// runHistory is everything the plots of one run show.
type runHistory struct {
	Title  string
	Epochs []epochPoint
	Marks  []lifecycleMark
	// Alphas holds each seed's alpha per epoch (seed id → points).
	Alphas map[string]plotter.XYs
}

var markColors = map[string]color.RGBA{
	"germinated": {R: 0x1f, G: 0x77, B: 0xb4, A: 0xff},
	"blending":   {R: 0xff, G: 0x7f, B: 0x0e, A: 0xff},
	"fossilized": {R: 0x2c, G: 0xa0, B: 0x2c, A: 0xff},
	"pruned":     {R: 0xd6, G: 0x27, B: 0x28, A: 0xff},
}

// writeTrainingPlot draws loss (top) and accuracy (bottom) per epoch with
// the lifecycle events as vertical lines, and writes it as a PNG
// atomically.
func writeTrainingPlot(path string, h runHistory) error {
	if len(h.Epochs) == 0 {
		return fmt.Errorf("plot %s: no epochs to draw", path)
	}
	loss := plot.New()
	loss.Title.Text = h.Title
	loss.Y.Label.Text = "loss"
	acc := plot.New()
	acc.X.Label.Text = "epoch"
	acc.Y.Label.Text = "accuracy %"
	series := func(p *plot.Plot, name string, dash bool, y func(epochPoint) float64) error {
		xys := make(plotter.XYs, len(h.Epochs))
		for i, e := range h.Epochs {
			xys[i] = plotter.XY{X: float64(e.Epoch), Y: y(e)}
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
		y    func(epochPoint) float64
	}{
		{loss, "train", true, func(e epochPoint) float64 { return e.TrainLoss }},
		{loss, "validation", false, func(e epochPoint) float64 { return e.ValLoss }},
		{acc, "train", true, func(e epochPoint) float64 { return e.TrainAcc }},
		{acc, "validation", false, func(e epochPoint) float64 { return e.ValAcc }},
	} {
		if err := series(s.p, s.name, s.dash, s.y); err != nil {
			return fmt.Errorf("plot %s: %w", path, err)
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
			return fmt.Errorf("plot %s: %w", path, err)
		}
	}
	// Loss falls and accuracy rises: legends where the curves are not.
	loss.Legend.Top = true
	return savePNG(path, [][]*plot.Plot{{loss}, {acc}}, 800, 800)
}

// addMarks draws each lifecycle event as a vertical line from lo to hi
// (the data's range), with one legend entry per kind.
func addMarks(p *plot.Plot, marks []lifecycleMark, lo, hi float64) error {
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

// writeAlphaPlot draws each seed's alpha per epoch and writes a PNG.
func writeAlphaPlot(path string, h runHistory) error {
	p := plot.New()
	p.Title.Text = "seed alpha"
	p.X.Label.Text = "epoch"
	p.Y.Label.Text = "alpha"
	p.Y.Min, p.Y.Max = 0, 1.05
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
		l, err := plotter.NewLine(h.Alphas[id])
		if err != nil {
			return fmt.Errorf("plot %s: seed %s: %w", path, id, err)
		}
		l.Width = vg.Points(1.5)
		l.Color = plotColor(i)
		p.Add(l)
		p.Legend.Add(id, l)
	}
	p.Legend.Top = true
	p.Legend.Left = true
	return savePNG(path, [][]*plot.Plot{{p}}, 800, 400)
}

// plotColor is a fixed palette so a seed keeps its colour across runs.
func plotColor(i int) color.RGBA {
	palette := []color.RGBA{
		{R: 0x1f, G: 0x77, B: 0xb4, A: 0xff}, {R: 0xff, G: 0x7f, B: 0x0e, A: 0xff},
		{R: 0x2c, G: 0xa0, B: 0x2c, A: 0xff}, {R: 0xd6, G: 0x27, B: 0x28, A: 0xff},
		{R: 0x94, G: 0x67, B: 0xbd, A: 0xff}, {R: 0x8c, G: 0x56, B: 0x4b, A: 0xff},
	}
	return palette[i%len(palette)]
}

// savePNG lays plots out on a grid and writes the PNG atomically.
func savePNG(path string, plots [][]*plot.Plot, w, h vg.Length) error {
	img := vgimg.New(w, h)
	dc := draw.New(img)
	tiles := draw.Tiles{Rows: len(plots), Cols: len(plots[0]), PadTop: vg.Points(4), PadBottom: vg.Points(4), PadLeft: vg.Points(4), PadRight: vg.Points(4), PadX: vg.Points(8), PadY: vg.Points(8)}
	canvases := plot.Align(plots, tiles, dc)
	for r := range plots {
		for c := range plots[r] {
			plots[r][c].Draw(canvases[r][c])
		}
	}
	var buf bytes.Buffer
	if _, err := (vgimg.PngCanvas{Canvas: img}).WriteTo(&buf); err != nil {
		return fmt.Errorf("plot %s: %w", path, err)
	}
	return atomicfile.WriteBytes(path, buf.Bytes())
}
