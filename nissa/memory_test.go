package nissa

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestMemoryBackend(t *testing.T) {
	m := NewMemoryBackend("")
	assert.Equal(t, "memory", m.Name())
	require.NoError(t, m.Start())
	assert.False(t, m.WaitFor(1, 10*time.Millisecond))

	done := make(chan bool)
	go func() { done <- m.WaitFor(3, longWait) }()
	for _, s := range []string{"a", "b", "c"} {
		require.NoError(t, m.Emit(msgEvent(s)))
	}
	assert.True(t, <-done)
	assert.Equal(t, 3, m.Len())

	evs := m.Events()
	evs[0].Message = "changed"
	assert.Equal(t, "a", m.Events()[0].Message, "Events returns a copy")

	m.Reset()
	assert.Zero(t, m.Len())
	assert.Empty(t, m.Events())
	require.NoError(t, m.Close())
}

// TestBoundedMemoryBackend: the ring holds the newest keep events in
// order, Total counts all of them, WaitFor waits on Total, and Reset
// empties it.
func TestBoundedMemoryBackend(t *testing.T) {
	require.Panics(t, func() { NewBoundedMemoryBackend("x", 0) })
	m := NewBoundedMemoryBackend("ring", 3)
	done := make(chan bool)
	go func() { done <- m.WaitFor(5, longWait) }()
	for _, s := range []string{"a", "b", "c", "d", "e"} {
		require.NoError(t, m.Emit(msgEvent(s)))
	}
	assert.True(t, <-done)
	assert.Equal(t, 3, m.Len())
	assert.Equal(t, 5, m.Total())
	var got []string
	for _, e := range m.Events() {
		got = append(got, e.Message)
	}
	assert.Equal(t, []string{"c", "d", "e"}, got)
	m.Reset()
	assert.Zero(t, m.Total())
	assert.Empty(t, m.Events())
	require.NoError(t, m.Emit(msgEvent("f")))
	assert.Equal(t, "f", m.Events()[0].Message)
}
