package runplot

import (
	"fmt"
	"math"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"

	"github.com/esper-go/esper/leyline"
	"github.com/esper-go/esper/simic"
)

// Round is one PPO round's figures, as the PPO plot draws them (NaN:
// not measured that round).
type Round struct {
	Round             int
	Return            float64
	Entropy           []float64 // per head, in leyline.HeadNames order
	KL                float64
	ExplainedVariance float64
	PolicyLoss        float64
	ValueLoss         float64
	EnvEpochsPerSec   float64
}

// WritePPO draws return, entropy per head, env-epochs per second, KL,
// explained variance and the losses per round, and writes it as a PNG
// atomically.
func WritePPO(path string, h []Round) error {
	plots, err := ppoPlots(h)
	if err != nil {
		return fmt.Errorf("plot %s: %w", path, err)
	}
	return savePNG(path, plots, 18*vg.Inch, 9*vg.Inch)
}

// ppoPlots builds WritePPO's plots, in their rows.
func ppoPlots(h []Round) ([][]*plot.Plot, error) {
	line := func(title string, series map[string]func(Round) float64, order []string) (*plot.Plot, error) {
		p := newPlot(title, "round", "")
		for i, name := range order {
			var xy plotter.XYs
			for _, r := range h {
				if v, ok := value(series[name](r)); ok {
					xy = append(xy, plotter.XY{X: float64(r.Round), Y: v})
				}
			}
			if len(xy) == 0 {
				continue
			}
			l, err := plotter.NewLine(xy)
			if err != nil {
				return nil, err
			}
			l.Color = lineColor(i)
			p.Add(l)
			if len(order) > 1 {
				p.Legend.Add(name, l)
			}
		}
		return p, nil
	}
	one := func(title string, f func(Round) float64) (*plot.Plot, error) {
		return line(title, map[string]func(Round) float64{title: f}, []string{title})
	}
	ent := map[string]func(Round) float64{}
	var names []string
	for hd, name := range leyline.HeadNames {
		ent[name] = func(r Round) float64 {
			if hd < len(r.Entropy) {
				return r.Entropy[hd]
			}
			return math.NaN()
		}
		names = append(names, name)
	}
	var ps []*plot.Plot
	for _, mk := range []func() (*plot.Plot, error){
		func() (*plot.Plot, error) {
			return one("mean episode return", func(r Round) float64 { return r.Return })
		},
		func() (*plot.Plot, error) { return line("entropy per head (normalised)", ent, names) },
		func() (*plot.Plot, error) {
			return one("env-epochs per second", func(r Round) float64 { return r.EnvEpochsPerSec })
		},
		func() (*plot.Plot, error) { return one("approx KL", func(r Round) float64 { return r.KL }) },
		func() (*plot.Plot, error) {
			return one("explained variance", func(r Round) float64 { return r.ExplainedVariance })
		},
		func() (*plot.Plot, error) {
			return line("losses", map[string]func(Round) float64{
				"policy": func(r Round) float64 { return r.PolicyLoss }, "value": func(r Round) float64 { return r.ValueLoss },
			}, []string{"policy", "value"})
		},
	} {
		p, err := mk()
		if err != nil {
			return nil, err
		}
		ps = append(ps, p)
	}
	return [][]*plot.Plot{ps[:3], ps[3:]}, nil
}

// WritePPORounds writes simic's rounds as the PPO plot (WritePPO).
func WritePPORounds(path string, h []simic.PPORound) error {
	rounds := make([]Round, len(h))
	for i, r := range h {
		rounds[i] = Round{Round: r.Round, Return: r.Return, Entropy: r.Entropy, KL: r.KL, ExplainedVariance: r.ExplainedVariance,
			PolicyLoss: r.PolicyLoss, ValueLoss: r.ValueLoss, EnvEpochsPerSec: r.EnvEpochsPerSec}
	}
	return WritePPO(path, rounds)
}
