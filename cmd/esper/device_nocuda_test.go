//go:build !cuda

package main

import (
	"bytes"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestBenchCUDAWithoutTag: without the cuda tag, --device cuda is a clear
// error pointing at GPU.md, after the flags have been checked as usual.
func TestBenchCUDAWithoutTag(t *testing.T) {
	for _, tc := range []struct {
		args []string
		msg  string
	}{
		{[]string{"bench", "--device", "cuda"}, "built without -tags cuda"},
		{[]string{"bench", "--device", "cuda:1", "--workload", "W8"}, "GPU.md"},
		{[]string{"bench", "--device", "cuda", "--epochs", "0"}, "--epochs"},
		{[]string{"bench", "--device", "gpu"}, "not available"},
	} {
		var out, errb bytes.Buffer
		require.Equal(t, 1, run(tc.args, &out, &errb), "%v", tc.args)
		require.Contains(t, errb.String(), tc.msg, "%v", tc.args)
	}
}
