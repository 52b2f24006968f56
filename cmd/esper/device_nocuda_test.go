//go:build !cuda

package main

import (
	"bytes"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestBenchCUDAWithoutTag: without the cuda tag, --device cuda is a clear
// one-line error (kernels/device's) naming -tags cuda and GPU.md, after
// the flags have been checked as usual.
func TestBenchCUDAWithoutTag(t *testing.T) {
	for _, tc := range []struct {
		args []string
		msg  string
	}{
		{[]string{"bench", "--device", "cuda"}, "cuda:0: this build has no CUDA support (build with -tags cuda"},
		{[]string{"bench", "--device", "cuda:1", "--workload", "W8"}, "GPU.md"},
		{[]string{"bench", "--device", "cuda", "--epochs", "0"}, "--epochs"},
		{[]string{"bench", "--device", "cuda", "--workload", "W3"}, "unknown workload"},
		{[]string{"bench", "--device", "gpu"}, "malformed device name"},
	} {
		var out, errb bytes.Buffer
		require.Equal(t, 1, run(tc.args, &out, &errb), "%v", tc.args)
		require.Contains(t, errb.String(), tc.msg, "%v", tc.args)
		require.Equal(t, 1, strings.Count(strings.TrimSpace(errb.String()), "\n")+1, "one line: %q", errb.String())
	}
}

// TestTrainCUDAWithoutTag: without the cuda tag, esper train --device
// cuda (or cuda:N) fails at start with one line naming -tags cuda.
func TestTrainCUDAWithoutTag(t *testing.T) {
	for _, dev := range []string{"cuda", "cuda:7"} {
		var out, errb bytes.Buffer
		require.Equal(t, 1, run([]string{"train", "--device", dev, "--run-dir", t.TempDir()}, &out, &errb), dev)
		require.Contains(t, errb.String(), "-tags cuda", dev)
		require.Equal(t, 1, strings.Count(strings.TrimSpace(errb.String()), "\n")+1, "one line: %q", errb.String())
		require.Empty(t, out.String(), dev)
	}
}
