package bench

// What the workloads of esper bench print and write beside their
// figures: headers, tables, verdicts against PERF.md's targets, the
// peers' figures and the JSON report.

import (
	"errors"
	"fmt"
	"io"
	"runtime"
	"text/tabwriter"
)

// Align is how a table's cells line up.
type Align uint

// Alignments.
const (
	// AlignLeft suits words: run names, modes.
	AlignLeft Align = 0
	// AlignRight suits figures.
	AlignRight = Align(tabwriter.AlignRight)
)

// NewTable returns the writer of every esper table (esper bench's
// figures, esper train's summary): each cell ends with a tab, columns
// stand two spaces apart, aligned as align says. Flush prints the table.
func NewTable(w io.Writer, align Align) *tabwriter.Writer {
	return tabwriter.NewWriter(w, 0, 0, 2, ' ', uint(align))
}

// Verdict words a check against a PERF.md target: "meets" or "misses".
func Verdict(met bool) string {
	if met {
		return "meets"
	}
	return "misses"
}

// SaveReport writes rep under jsonDir when one was given (WriteReport)
// and says where on stdout.
func SaveReport(stdout io.Writer, jsonDir string, rep Report) error {
	if jsonDir == "" {
		return nil
	}
	path, err := WriteReport(jsonDir, rep)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "wrote %s\n", path)
	return nil
}

// latencyRow is a line of a latency table.
type latencyRow struct {
	name          string
	p50, p95, p99 float64
	allocs        string
}

// printLatencyTable prints p50, p95 and p99 in µs and the allocations of
// each row; with peer, the last row is the peer's, and every row gets
// its speed relative to it.
func printLatencyTable(w io.Writer, rows []latencyRow, peer bool) {
	tw := NewTable(w, AlignRight)
	fmt.Fprintln(tw, "\tp50 µs\tp95 µs\tp99 µs\tallocs/epoch\tvs peer p50\t")
	ref := 0.0
	if peer {
		ref = rows[len(rows)-1].p50
	}
	for _, r := range rows {
		ratio := "-"
		if ref > 0 && r.p50 > 0 {
			ratio = fmt.Sprintf("%.1f×", ref/r.p50)
		}
		fmt.Fprintf(tw, "%s\t%.1f\t%.1f\t%.1f\t%s\t%s\t\n", r.name, r.p50, r.p95, r.p99, r.allocs, ratio)
	}
	tw.Flush()
}

// header prints the first line of a workload's output.
func header(w io.Writer, title string, m Machine) {
	fmt.Fprintf(w, "%s on %s (%s, GOMAXPROCS %d, commit %s)\n", title, m.CPU, m.GoVersion, m.GOMAXPROCS, m.Commit)
}

// peerFailed records a device peer's failure (rep.PeerError and a line
// on stderr): on a GPU the peer is best effort, and our side runs alone.
func peerFailed(stderr io.Writer, rep *Report, workload string, err error) {
	rep.PeerError = err.Error()
	fmt.Fprintf(stderr, "PyTorch peer for %s unavailable: %v\n(running our side only)\n", workload, err)
}

// runWorkloadPeer is runPeer for a workload that can run on a device:
// there (cuda) the peer is told the device and its failure is recorded
// (peerFailed) instead of returned.
func runWorkloadPeer(c Config, stdout, stderr io.Writer, rep *Report, workload string, cuda bool, dev fmt.Stringer, script string, args ...string) (map[string]any, error) {
	if cuda {
		args = append(args, "--device", dev.String())
	}
	peer, err := runPeer(c, stdout, stderr, rep, script, args...)
	if err != nil && cuda {
		peerFailed(stderr, rep, workload, err)
		return nil, nil
	}
	return peer, err
}

// runPeer runs a peer script when c.Compare is set and records its result
// (or, when PyTorch is missing, why there is none) in rep. It returns nil
// and no error when there is no peer to compare with.
func runPeer(c Config, stdout, stderr io.Writer, rep *Report, script string, args ...string) (map[string]any, error) {
	if !c.Compare {
		return nil, nil
	}
	fmt.Fprintf(stdout, "  running the PyTorch peer (%s/%s) ...\n", c.PeerDir, script)
	peer, err := RunPeer(c.PeerDir, script, runtime.GOMAXPROCS(0), args...)
	switch {
	case peerMissing(stderr, rep, err):
		return nil, nil
	case err != nil:
		return nil, err
	}
	rep.Peer = peer
	return peer, nil
}

// peerMissing reports whether err says that the PyTorch peer cannot run
// here; it then says so on stderr (with how to install it) and records
// it in rep, and the workload runs our side only.
func peerMissing(stderr io.Writer, rep *Report, err error) bool {
	if !errors.Is(err, ErrNoPeer) {
		return false
	}
	fmt.Fprintf(stderr, "%v\n(running our side only)\n", err)
	rep.PeerError = err.Error()
	return true
}

// Figure reads the number at a path of keys in a decoded JSON object,
// such as a peer's report (0 when absent).
func Figure(m map[string]any, path ...string) float64 {
	var v any = m
	for _, k := range path {
		obj, ok := v.(map[string]any)
		if !ok {
			return 0
		}
		v = obj[k]
	}
	f, _ := v.(float64)
	return f
}

// Ratio formats a/b as "1.23×", or "-" when either is not positive.
func Ratio(a, b float64) string {
	if a <= 0 || b <= 0 {
		return "-"
	}
	return fmt.Sprintf("%.2f×", a/b)
}

// progressEvery returns a progress callback printing a line whenever a
// phase crosses a multiple of 25%.
func progressEvery(w io.Writer) func(phase string, done, total int) {
	last := map[string]int{}
	return func(phase string, done, total int) {
		pct := 100 * done / total
		if prev, ok := last[phase]; ok && pct/25 == prev/25 {
			return
		}
		last[phase] = pct
		fmt.Fprintf(w, "  %s: %3d%% (%d/%d)\n", phase, pct, done, total)
	}
}
