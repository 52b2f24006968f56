package cuda

import (
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestSwitchesFromEnv: ESPER_CUDA_JOINS, ESPER_CUDA_SEQUENCES,
// ESPER_CUDA_CUBIN and ESPER_CUDA_UPLOAD_WAIT turn their launches (or
// cubins, or waits) off with "off" and on with "on",
// ESPER_CUDA_JOINS_TF32, ESPER_CUDA_GAT_WARPS and ESPER_CUDA_SIDE_STREAMS
// (off by default) likewise, each leaves its
// setting alone when unset, and any other value is refused, naming the
// variable.
func TestSwitchesFromEnv(t *testing.T) {
	for _, sw := range []*atomic.Bool{&joinsOff, &sequencesOff, &cubinOff, &uploadWaitOff, &tf32JoinsOn, &gatWarpsOn, &sideStreamsOn} {
		defer sw.Store(sw.Load())
		sw.Store(false)
	}
	t.Setenv("ESPER_CUDA_CUBIN", "off")
	t.Setenv("ESPER_CUDA_UPLOAD_WAIT", "off")

	t.Setenv("ESPER_CUDA_JOINS", "off")
	t.Setenv("ESPER_CUDA_SEQUENCES", "")
	require.NoError(t, switchesFromEnv())
	require.True(t, joinsOff.Load())
	require.True(t, cubinOff.Load())
	require.True(t, uploadWaitOff.Load())
	require.False(t, sequencesOff.Load(), "an unset variable changed its setting")

	t.Setenv("ESPER_CUDA_SEQUENCES", "off")
	require.NoError(t, switchesFromEnv())
	require.True(t, sequencesOff.Load())

	t.Setenv("ESPER_CUDA_JOINS", "on")
	t.Setenv("ESPER_CUDA_SEQUENCES", "")
	require.NoError(t, switchesFromEnv())
	require.False(t, joinsOff.Load())
	require.True(t, sequencesOff.Load(), "an unset variable changed a test's setting")

	require.False(t, tf32JoinsOn.Load(), "the TF32 joins are off unless turned on")
	t.Setenv("ESPER_CUDA_JOINS_TF32", "on")
	require.NoError(t, switchesFromEnv())
	require.True(t, tf32JoinsOn.Load())
	t.Setenv("ESPER_CUDA_JOINS_TF32", "off")
	require.NoError(t, switchesFromEnv())
	require.False(t, tf32JoinsOn.Load())
	t.Setenv("ESPER_CUDA_JOINS_TF32", "1")
	require.ErrorContains(t, switchesFromEnv(), "ESPER_CUDA_JOINS_TF32")
	t.Setenv("ESPER_CUDA_JOINS_TF32", "")

	require.False(t, gatWarpsOn.Load(), "the GAT warp kernels are off unless turned on")
	t.Setenv("ESPER_CUDA_GAT_WARPS", "on")
	require.NoError(t, switchesFromEnv())
	require.True(t, gatWarpsOn.Load())
	require.False(t, tf32JoinsOn.Load(), "ESPER_CUDA_GAT_WARPS turned the TF32 joins on")
	t.Setenv("ESPER_CUDA_GAT_WARPS", "off")
	require.NoError(t, switchesFromEnv())
	require.False(t, gatWarpsOn.Load())
	t.Setenv("ESPER_CUDA_GAT_WARPS", "yes")
	require.ErrorContains(t, switchesFromEnv(), "ESPER_CUDA_GAT_WARPS")
	t.Setenv("ESPER_CUDA_GAT_WARPS", "")

	require.False(t, sideStreamsOn.Load(), "the side streams are off unless turned on")
	t.Setenv("ESPER_CUDA_SIDE_STREAMS", "on")
	require.NoError(t, switchesFromEnv())
	require.True(t, sideStreamsOn.Load())
	require.False(t, gatWarpsOn.Load(), "ESPER_CUDA_SIDE_STREAMS turned the GAT warps on")
	t.Setenv("ESPER_CUDA_SIDE_STREAMS", "")
	require.NoError(t, switchesFromEnv())
	require.True(t, sideStreamsOn.Load(), "an unset variable changed a test's setting")
	t.Setenv("ESPER_CUDA_SIDE_STREAMS", "off")
	require.NoError(t, switchesFromEnv())
	require.False(t, sideStreamsOn.Load())
	t.Setenv("ESPER_CUDA_SIDE_STREAMS", "1")
	require.ErrorContains(t, switchesFromEnv(), "ESPER_CUDA_SIDE_STREAMS")
	t.Setenv("ESPER_CUDA_SIDE_STREAMS", "")

	t.Setenv("ESPER_CUDA_SEQUENCES", "0")
	err := switchesFromEnv()
	require.Error(t, err)
	require.Contains(t, err.Error(), "ESPER_CUDA_SEQUENCES")
	require.Contains(t, err.Error(), `"0"`)
}
