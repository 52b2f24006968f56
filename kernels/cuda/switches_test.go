package cuda

import (
	"os"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestSwitchesFromEnv: ESPER_CUDA_JOINS, ESPER_CUDA_SEQUENCES,
// ESPER_CUDA_CUBIN, ESPER_CUDA_UPLOAD_WAIT and ESPER_CUDA_SLABS turn
// their launches (or cubins, waits, slabs) off with "off" and on with
// "on",
// ESPER_CUDA_JOINS_TF32, ESPER_CUDA_GAT_WARPS, ESPER_CUDA_SIDE_STREAMS,
// ESPER_CUDA_MAPPED_INPUTS and ESPER_CUDA_MAPPED_OUTPUTS (each taken from
// off here) likewise, each leaves its setting alone
// when unset, and any other value is refused, naming the variable.
func TestSwitchesFromEnv(t *testing.T) {
	for _, sw := range []*atomic.Bool{&joinsOff, &sequencesOff, &cubinOff, &uploadWaitOff, &slabsOff, &tf32JoinsOn, &gatWarpsOn, &sideStreamsOn,
		&mappedInputsOn, &mappedOutputsOn} {
		defer sw.Store(sw.Load())
		sw.Store(false)
	}
	t.Setenv("ESPER_CUDA_CUBIN", "off")
	t.Setenv("ESPER_CUDA_UPLOAD_WAIT", "off")
	t.Setenv("ESPER_CUDA_SLABS", "off")

	t.Setenv("ESPER_CUDA_JOINS", "off")
	t.Setenv("ESPER_CUDA_SEQUENCES", "")
	require.NoError(t, switchesFromEnv())
	require.True(t, joinsOff.Load())
	require.True(t, cubinOff.Load())
	require.True(t, uploadWaitOff.Load())
	require.True(t, slabsOff.Load())
	require.False(t, sequencesOff.Load(), "an unset variable changed its setting")

	t.Setenv("ESPER_CUDA_SEQUENCES", "off")
	require.NoError(t, switchesFromEnv())
	require.True(t, sequencesOff.Load())

	t.Setenv("ESPER_CUDA_JOINS", "on")
	t.Setenv("ESPER_CUDA_SEQUENCES", "")
	require.NoError(t, switchesFromEnv())
	require.False(t, joinsOff.Load())
	require.True(t, sequencesOff.Load(), "an unset variable changed a test's setting")

	// The turned-on switches, each alone from off: on, left alone when
	// unset, off, and any other value refused.
	for _, sw := range []struct {
		name string
		on   *atomic.Bool
	}{{"ESPER_CUDA_JOINS_TF32", &tf32JoinsOn}, {"ESPER_CUDA_GAT_WARPS", &gatWarpsOn}, {"ESPER_CUDA_SIDE_STREAMS", &sideStreamsOn},
		{"ESPER_CUDA_MAPPED_INPUTS", &mappedInputsOn}, {"ESPER_CUDA_MAPPED_OUTPUTS", &mappedOutputsOn}} {
		require.False(t, sw.on.Load(), "%s is off until turned on", sw.name)
		t.Setenv(sw.name, "on")
		require.NoError(t, switchesFromEnv())
		require.True(t, sw.on.Load(), sw.name)
		require.Equal(t, 1, countOn(&tf32JoinsOn, &gatWarpsOn, &sideStreamsOn, &mappedInputsOn, &mappedOutputsOn), "%s turned another switch on", sw.name)
		t.Setenv(sw.name, "")
		require.NoError(t, switchesFromEnv())
		require.True(t, sw.on.Load(), "an unset %s changed a test's setting", sw.name)
		t.Setenv(sw.name, "off")
		require.NoError(t, switchesFromEnv())
		require.False(t, sw.on.Load(), sw.name)
		t.Setenv(sw.name, "1")
		require.ErrorContains(t, switchesFromEnv(), sw.name)
		t.Setenv(sw.name, "")
	}

	t.Setenv("ESPER_CUDA_SEQUENCES", "0")
	err := switchesFromEnv()
	require.Error(t, err)
	require.Contains(t, err.Error(), "ESPER_CUDA_SEQUENCES")
	require.Contains(t, err.Error(), `"0"`)
}

// countOn is how many of the switches are on.
func countOn(sws ...*atomic.Bool) int {
	n := 0
	for _, sw := range sws {
		if sw.Load() {
			n++
		}
	}
	return n
}

// TestSwitchDefaults: unless the process's environment sets them, every
// switch but ESPER_CUDA_JOINS_TF32 is on: the joins, sequences, cubins,
// uploads' wait, slabs, warp GAT kernels, side streams and mapped
// inputs and outputs; the TF32 joins off.
func TestSwitchDefaults(t *testing.T) {
	for _, sw := range []struct {
		name string
		on   bool
	}{{"ESPER_CUDA_JOINS", !joinsOff.Load()}, {"ESPER_CUDA_SEQUENCES", !sequencesOff.Load()}, {"ESPER_CUDA_CUBIN", !cubinOff.Load()},
		{"ESPER_CUDA_UPLOAD_WAIT", !uploadWaitOff.Load()}, {"ESPER_CUDA_SLABS", !slabsOff.Load()}, {"ESPER_CUDA_GATHER_IN", !gatherInOff.Load()}, {"ESPER_CUDA_GAT_WARPS", gatWarpsOn.Load()}, {"ESPER_CUDA_SIDE_STREAMS", sideStreamsOn.Load()},
		{"ESPER_CUDA_MAPPED_INPUTS", mappedInputsOn.Load()}, {"ESPER_CUDA_MAPPED_OUTPUTS", mappedOutputsOn.Load()},
		{"ESPER_CUDA_JOINS_TF32", !tf32JoinsOn.Load()}} {
		if v, set := os.LookupEnv(sw.name); set && v != "" {
			continue // this process's setting, not the default
		}
		require.True(t, sw.on, "%s is not at its default", sw.name)
	}
}
