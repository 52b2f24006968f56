//go:build !cuda

package main

import (
	"bytes"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestPPOCUDAWithoutTag: without the cuda tag, --device cuda and a CUDA
// device in --devices are one clear line saying how to get a CUDA build,
// before any work.
func TestPPOCUDAWithoutTag(t *testing.T) {
	for _, args := range [][]string{{"--device", "cuda"}, {"--devices", "sim:0,cuda:1"}} {
		var out, errb bytes.Buffer
		require.Equal(t, 1, run(append(tinyPPO(t.TempDir(), "--rounds", "1"), args...), &out, &errb), "%v", args)
		require.Contains(t, errb.String(), "this build has no CUDA support (build with -tags cuda", "%v", args)
		require.Equal(t, 1, strings.Count(errb.String(), "\n"), errb.String())
		require.Empty(t, out.String())
	}
}
