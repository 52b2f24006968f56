package bench

// W3 as esper bench runs it: germination latency against PERF.md's
// target (W3 has no PyTorch peer).

import (
	"fmt"
	"io"
)

// w3TargetP95us is PERF.md's W3 target on the CPU: p95 ≤ 1 ms.
const w3TargetP95us = 1000

// benchW3 runs W3, prints its table and verdicts and writes its report.
func benchW3(stdout io.Writer, requests, concurrency int, jsonDir string) error {
	m := ThisMachine()
	fmt.Fprintf(stdout, "W3 kasmina-germinate on %s (%s, GOMAXPROCS %d, commit %s)\n", m.CPU, m.GoVersion, m.GOMAXPROCS, m.Commit)
	fmt.Fprintf(stdout, "  %d germinations of conv_light at 32 channels, %d in flight ...\n", requests, concurrency)
	last := -1
	r, err := RunW3(W3Options{
		Requests: requests, Concurrency: concurrency,
		Progress: func(done, total int) {
			if pct := 100 * done / total; pct/25 != last/25 {
				last = pct
				fmt.Fprintf(stdout, "  %3d%% (%d/%d)\n", pct, done, total)
			}
		},
	})
	if err != nil {
		return err
	}
	tw := NewTable(stdout, AlignRight)
	fmt.Fprintln(tw, "\tp50 µs\tp95 µs\tp99 µs\tmax µs\tgerminations/s\tallocs/req\ttarget p95 µs\t")
	fmt.Fprintf(tw, "esper\t%.1f\t%.1f\t%.1f\t%.1f\t%.0f\t%.0f\t%d\t\n", r.Latency.P50us, r.Latency.P95us, r.Latency.P99us, r.Latency.MaxUs, r.PerSecond, r.AllocsPerReq, w3TargetP95us)
	tw.Flush()
	fmt.Fprintf(stdout, "p95 %.0f µs %s the PERF.md target of %d µs\n", r.Latency.P95us, Verdict(r.Latency.P95us <= w3TargetP95us), w3TargetP95us)
	rep := Report{
		Workload: "W3",
		Parameters: map[string]any{
			"blueprint": r.Blueprint, "channels": r.Channels, "requests": r.Requests, "concurrency": r.Concurrency,
			"timed": r.LifecycleNote, "target_p95_us": w3TargetP95us,
		},
		Machine: m, Device: "cpu", Results: map[string]any{"germinate": r},
	}
	return SaveReport(stdout, jsonDir, rep)
}
