package main

import (
	"bytes"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestBenchW1OnSim: esper bench --workload W1 --device sim runs W1's four
// modes on the sim device and prints their host syncs per epoch, with
// the captured trainer epoch's verdict; the default workload is W1.
func TestBenchW1OnSim(t *testing.T) {
	for _, args := range [][]string{
		{"bench", "--workload", "W1", "--device", "sim", "--epochs", "3", "--warmup", "1"},
		{"bench", "--device", "sim:2", "--epochs", "2", "--warmup", "1"},
	} {
		var out, errb bytes.Buffer
		require.Equal(t, 0, run(args, &out, &errb), "%v: %s", args, errb.String())
		s := out.String()
		require.Contains(t, s, "host syncs/epoch", "%v", args)
		require.Regexp(t, `esper trainer-captured +[0-9.]+ +[0-9.]+ +[0-9.]+ +[0-9.]+`, s, "%v", args)
		require.Regexp(t, `host syncs per trainer epoch: captured [0-9.]+, eager [0-9.]+; captured (meets|misses) the target of ≤ 1`, s, "%v", args)
	}
}
