package main

import (
	"bytes"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestTrainOnSimPrintsTheCPUTable: esper train --device sim prints the
// table --device cpu prints (same kernels: bitwise the same figures, the
// timing column aside), followed by the host syncs of each run; the cpu
// run prints no host-sync line. The same holds for sim:2.
func TestTrainOnSimPrintsTheCPUTable(t *testing.T) {
	train := func(dev string, extra ...string) string {
		var out, errb bytes.Buffer
		code := run(append([]string{"train", "--train-size", "256", "--test-size", "128", "--epochs", "3", "--batch", "64",
			"--base-channels", "2", "--quiet", "--device", dev, "--run-dir", t.TempDir()}, extra...), &out, &errb)
		require.Equal(t, 0, code, "%s\n%s", out.String(), errb.String())
		return out.String()
	}
	seconds := regexp.MustCompile(`[0-9.]+\s*$`)
	table := func(s string) (lines []string, syncs string) {
		for _, l := range strings.Split(s, "\n") {
			switch {
			case strings.HasPrefix(l, "run directory:"):
			case strings.HasPrefix(l, "host syncs on "):
				syncs = l
			default:
				lines = append(lines, seconds.ReplaceAllString(l, ""))
			}
		}
		return lines, syncs
	}
	want, none := table(train("cpu"))
	require.Empty(t, none, "the cpu never syncs: no host-sync line")
	for _, dev := range []string{"sim", "sim:2"} {
		got, syncs := table(train(dev))
		require.Equal(t, want, got, dev)
		// One sync per epoch without seeds (the training and the
		// validation accumulators, read together); the run with seeds
		// adds the gradient telemetry's and the counterfactuals' reads.
		require.Contains(t, syncs, "host alone 3 over 3 epochs (1 to 1 per epoch)", dev)
		require.Contains(t, syncs, "host syncs on "+map[string]string{"sim": "sim:0", "sim:2": "sim:2"}[dev]+": ", dev)
	}
	// The dataset resident on the device, and batches copied without
	// pinned staging: the same table and the same syncs.
	_, ref := table(train("sim"))
	for _, flags := range [][]string{{"--data-on-device"}, {"--pin-memory=false"}} {
		got, syncs := table(train("sim", flags...))
		require.Equal(t, want, got, flags)
		require.Equal(t, ref, syncs, flags)
	}
}
