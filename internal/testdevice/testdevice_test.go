package testdevice

import (
	"os"
	"os/exec"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/esper-go/esper/tensor"
)

// TestRoundTrip: To puts a host tensor on the test device, and Host, F32,
// F64 and Item bring it back with the same values; on a device the
// round trip is counted as host syncs.
func TestRoundTrip(t *testing.T) {
	d := Device(t)
	x := tensor.FromSlice([]float32{1, 2, 3, 4}, 2, 2)
	before := tensor.HostSyncs(d)
	y := To(t, x)
	assert.Equal(t, d, y.Device())
	assert.Equal(t, []float32{1, 2, 3, 4}, F32(t, y))
	assert.Equal(t, []float64{1, 2, 3, 4}, F64(t, y))
	assert.Equal(t, 3.0, Item(t, To(t, tensor.FromSlice([]float32{3}, 1))))
	assert.Equal(t, []float32{1, 3, 2, 4}, F32(t, y.T()), "a strided view reads in logical order")
	if OnDevice(t) {
		assert.Panics(t, func() { y.F32() }, "a device tensor refuses the host accessor")
		assert.GreaterOrEqual(t, tensor.HostSyncs(d)-before, uint64(3), "each read back is a host sync")
	} else {
		assert.Same(t, x, y, "on the CPU, To is the identity")
	}
}

// TestSwitch runs this test binary with the variable set and checks the
// device it reports, and that a bad value fails with the variable named.
func TestSwitch(t *testing.T) {
	if name := os.Getenv("TESTDEVICE_CHILD"); name != "" {
		t.Logf("device=%s", Device(t))
		return
	}
	run := func(val string) (string, error) {
		cmd := exec.Command(os.Args[0], "-test.run", "^TestSwitch$", "-test.v")
		cmd.Env = append(os.Environ(), "TESTDEVICE_CHILD=1", Env+"="+val)
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	out, err := run("sim:2")
	require.NoError(t, err, out)
	assert.Contains(t, out, "device=sim:2")
	out, err = run("sim:x")
	require.Error(t, err, "a malformed device fails the test")
	assert.Contains(t, out, Env+`="sim:x"`)
	out, err = run("")
	require.NoError(t, err, out)
	assert.Contains(t, out, "device=cpu")
}
