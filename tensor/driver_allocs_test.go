package tensor

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestDriverAllocs: the counts and times add up per device, the CPU's
// stay 0, and one device's do not show on another.
func TestDriverAllocs(t *testing.T) {
	d, other := Sim(7), Sim(8)
	n0, t0 := DriverAllocs(d)
	o0, ot0 := DriverAllocs(other)
	CountDriverAlloc(d, 3*time.Microsecond)
	CountDriverAlloc(d, 5*time.Microsecond)
	CountDriverAlloc(CPU, time.Second)
	n, dt := DriverAllocs(d)
	require.Equal(t, n0+2, n)
	require.Equal(t, t0+8*time.Microsecond, dt)
	n, dt = DriverAllocs(CPU)
	require.Zero(t, n)
	require.Zero(t, dt)
	n, dt = DriverAllocs(other)
	require.Equal(t, o0, n)
	require.Equal(t, ot0, dt)
}

// TestCountsDriverAllocs: a device counts its driver allocations once
// its backend says so, and no other device does by that.
func TestCountsDriverAllocs(t *testing.T) {
	d, other := Sim(9), Sim(10)
	require.False(t, CountsDriverAllocs(d))
	CountingDriverAllocs(d)
	require.True(t, CountsDriverAllocs(d))
	require.False(t, CountsDriverAllocs(other))
	require.False(t, CountsDriverAllocs(CPU))
}
