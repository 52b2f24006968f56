package bench

import (
	"bytes"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/esper-go/esper/tensor"
)

// TestW1OnSimCountsHostSyncs: W1 on the sim device computes the CPU's
// metrics bit for bit (same kernels), and its host syncs are counted per
// epoch: the bare loop reads its metrics once an epoch, captured or not;
// the trainer reads its per-epoch metrics (tolaria's training and
// validation accumulators, together) and nothing else, captured or not:
// one sync per epoch, PERF.md's target for a captured epoch; the CPU
// counts none.
func TestW1OnSimCountsHostSyncs(t *testing.T) {
	dev := tensor.Sim(1)
	for _, trainer := range []bool{false, true} {
		run := RunW1
		if trainer {
			run = RunW1Trainer
		}
		for _, captured := range []bool{false, true} {
			var onCPU, onSim []EpochMetrics
			c, err := run(W1Options{Epochs: 6, Warmup: 2, Captured: captured, Emit: func(m EpochMetrics) { onCPU = append(onCPU, m) }})
			require.NoError(t, err)
			s, err := run(W1Options{Epochs: 6, Warmup: 2, Captured: captured, Device: dev, Emit: func(m EpochMetrics) { onSim = append(onSim, m) }})
			require.NoError(t, err)
			require.Equal(t, c.Mode, s.Mode)
			require.Equal(t, onCPU, onSim, "%s: the sim device's metrics are the CPU's", s.Mode)
			require.Zero(t, c.HostSyncsPerEpoch, "%s: the CPU has no host syncs", c.Mode)
			if !trainer {
				require.Equal(t, 1.0, s.HostSyncsPerEpoch, "%s: one read of the epoch's metrics", s.Mode)
				continue
			}
			require.Equal(t, 1.0, s.HostSyncsPerEpoch, "%s: the epoch's metrics are read once, and counted", s.Mode)
		}
	}
}

// TestBenchW1OnSim: esper bench --workload W1 --device sim prints the
// four modes with their host syncs per epoch and the captured trainer
// epoch's verdict, and refuses --compare (the sim device's speed is the
// CPU's).
func TestBenchW1OnSim(t *testing.T) {
	c := DefaultConfig()
	c.Epochs, c.Warmup, c.JSONDir = 4, 1, t.TempDir()
	var out, errb bytes.Buffer
	require.NoError(t, BenchW1(tensor.Sim(0), c, &out, &errb))
	s := out.String()
	for _, mode := range []string{"eager", "captured", "trainer-eager", "trainer-captured"} {
		require.Regexp(t, `(?m)^ *esper `+mode+` +[0-9.]+ +[0-9.]+ +[0-9.]+ +[0-9.]+ *$`, s)
	}
	require.Contains(t, s, "host syncs/epoch")
	require.Regexp(t, `host syncs per trainer epoch: captured [0-9.]+, eager [0-9.]+; captured meets the target of ≤ 1`, s)
	require.Contains(t, s, "wrote ")
	c.Compare = true
	err := BenchW1(tensor.Sim(0), c, &out, &errb)
	require.ErrorContains(t, err, "--compare pytorch")
	require.ErrorContains(t, BenchW1(tensor.CUDA(0), DefaultConfig(), &out, &errb), "bench/gpu")
}
