package runplot

import (
	"math"
	"sort"
	"strconv"

	"gonum.org/v1/plot"
)

// distinctTicks is a plot.Ticker: gonum's tick positions, labelled with
// as many decimals as the spacing of the labelled ticks needs, so
// labels never repeat ("2.30", "2.32", not "2.3", "2.3"). Integer keeps
// labels on whole numbers only (epochs, rounds).
type distinctTicks struct{ Integer bool }

// Ticks implements plot.Ticker.
func (t distinctTicks) Ticks(lo, hi float64) []plot.Tick {
	ticks := plot.DefaultTicks{}.Ticks(lo, hi)
	var values []float64
	for i := range ticks {
		if ticks[i].Label == "" {
			continue
		}
		if t.Integer && ticks[i].Value != math.Round(ticks[i].Value) {
			ticks[i].Label = "" // a minor tick between whole numbers
			continue
		}
		values = append(values, ticks[i].Value)
	}
	if t.Integer && len(values) < 2 {
		// A range of a few whole numbers: label each of them.
		for v := math.Ceil(lo); v <= math.Floor(hi) && len(values) < 10; v++ {
			if !slicesContain(values, v) {
				ticks = append(ticks, plot.Tick{Value: v, Label: "?"})
				values = append(values, v)
			}
		}
	}
	labels := tickLabels(values)
	j := 0
	for i := range ticks {
		if ticks[i].Label != "" {
			ticks[i].Label = labels[j]
			j++
		}
	}
	return ticks
}

func slicesContain(s []float64, v float64) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

// tickLabels formats tick values with the fewest decimals that give
// every value its own label, each within a thousandth of the smallest
// spacing of its value; the exponent form ("2e-05") takes over when
// that needs more than four decimals.
func tickLabels(values []float64) []string {
	if len(values) == 0 {
		return nil
	}
	sorted := append([]float64(nil), values...)
	sort.Float64s(sorted)
	step := math.Inf(1)
	for i := 1; i < len(sorted); i++ {
		if d := sorted[i] - sorted[i-1]; d > 0 {
			step = math.Min(step, d)
		}
	}
	if math.IsInf(step, 1) {
		// One value (or one repeated): its own magnitude sets the scale.
		step = math.Abs(sorted[0])
		if step == 0 {
			step = 1
		}
	}
	clean := make([]float64, len(values))
	for i, v := range values {
		if math.Abs(v) < step*1e-9 {
			v = 0 // no "-0.00" from a rounding error
		}
		clean[i] = v
	}
	good := func(labels []string) bool {
		seen := map[string]bool{}
		for i, l := range labels {
			back, err := strconv.ParseFloat(l, 64)
			if seen[l] || err != nil || math.Abs(back-clean[i]) > step/1000 {
				return false
			}
			seen[l] = true
		}
		return true
	}
	format := func(f byte, prec int) []string {
		out := make([]string, len(clean))
		for i, v := range clean {
			out[i] = strconv.FormatFloat(v, f, prec, 64)
		}
		return out
	}
	for d := max(0, int(math.Ceil(-math.Log10(step)-1e-9))); d <= 4; d++ {
		if l := format('f', d); good(l) {
			return l
		}
	}
	for sig := 1; sig <= 17; sig++ {
		if l := format('g', sig); good(l) {
			return l
		}
	}
	return format('g', -1)
}
