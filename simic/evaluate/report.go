package evaluate

import (
	"encoding/json"
	"fmt"
	"io"
	"text/tabwriter"

	"github.com/esper-go/esper/internal/atomicfile"
)

// WriteTable prints the report: one row per controller (means over the
// seeds) and one row per pair of controllers (mean paired difference in
// final validation accuracy, its bootstrap 95 % interval, wins/ties/
// losses of the first).
func (r *Report) WriteTable(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "controller\tval acc\tval loss\tadded params\tgerm/foss/pruned\tgain per kparam\n")
	for _, s := range r.Summaries {
		gain := "-"
		if s.GainPerKParam != nil {
			gain = fmt.Sprintf("%+.2f pts", *s.GainPerKParam)
		}
		fmt.Fprintf(tw, "%s\t%.2f%%\t%.4f\t%.0f\t%.1f/%.1f/%.1f\t%s\n",
			s.Controller, s.Accuracy, s.Loss, s.Added, s.Germinated, s.Fossilized, s.Pruned, gain)
	}
	fmt.Fprintf(tw, "\npair (A − B)\tmean diff\t95%% interval\tA wins/ties/losses\n")
	for _, p := range r.Pairs {
		fmt.Fprintf(tw, "%s − %s\t%+.2f pts\t[%+.2f, %+.2f]\t%d/%d/%d\n", p.A, p.B, p.MeanDiff, p.Lo, p.Hi, p.Wins, p.Ties, p.Losses)
	}
	return tw.Flush()
}

// reportJSON is the report's file form, with what produced it.
type reportJSON struct {
	Seeds       []uint64     `json:"seeds"`
	Controllers []Controller `json:"controller_specs"`
	Run         RunConfig    `json:"run"`
	Samples     int          `json:"bootstrap_samples"`
	*Report
}

// WriteJSON writes the report, with its seeds, controllers and run
// configuration, to path (atomically).
func (r *Report) WriteJSON(path string) error {
	samples := r.Options.BootstrapSamples
	if samples <= 0 {
		samples = DefaultBootstrapSamples
	}
	b, err := json.MarshalIndent(reportJSON{
		Seeds: r.Options.Seeds, Controllers: r.Options.Controllers, Run: r.Options.Run, Samples: samples, Report: r,
	}, "", "  ")
	if err != nil {
		return err
	}
	return atomicfile.WriteBytes(path, append(b, '\n'))
}
