package tensor_test

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/esper-go/esper/tensor"
)

// sizePanic runs f and returns the *tensor.SizeError it panicked with.
func sizePanic(t *testing.T, f func()) (e *tensor.SizeError) {
	t.Helper()
	defer func() {
		r := recover()
		err, ok := r.(error)
		require.True(t, ok, "panicked with %v, want a *tensor.SizeError", r)
		require.True(t, errors.As(err, &e), "panicked with %v, want a *tensor.SizeError", err)
	}()
	f()
	return nil
}

// TestShapeOverflowRefused: a shape whose element count or byte size
// overflows is refused (it used to give a tensor of 0 elements with shape
// [2^32 2^32]), by every constructor.
func TestShapeOverflowRefused(t *testing.T) {
	big := []int{1 << 32, 1 << 32}
	e := sizePanic(t, func() { tensor.Empty(tensor.F32, big...) })
	assert.Contains(t, e.Error(), "overflows")
	assert.Equal(t, big, e.Shape)
	sizePanic(t, func() { tensor.Zeros(tensor.F64, 1<<31, 1<<31, 4) })
	sizePanic(t, func() { tensor.Full(tensor.F32, 1, 1<<62) }) // 2^64 bytes
	sizePanic(t, func() { tensor.NewStorage(tensor.F32, -3) })
	_, err := tensor.EmptyOn(tensor.CPU, tensor.F32, big...)
	assert.ErrorAs(t, err, new(*tensor.SizeError))
	_, err = tensor.CheckShape(tensor.F32, 3, -1, 0)
	assert.ErrorAs(t, err, new(*tensor.SizeError), "a negative dimension is refused even beside a 0")
	n, err := tensor.CheckShape(tensor.F32, 0, 1<<40, 1<<40)
	assert.NoError(t, err, "a zero dimension makes an empty tensor whatever the others")
	assert.Zero(t, n)
	n, err = tensor.CheckShape(tensor.BF16, 3, 5)
	assert.NoError(t, err)
	assert.Equal(t, 15, n)
}

// TestHostLimitRefusesHugeAllocations: a tensor larger than the host
// limit is a *SizeError, not an out-of-memory crash; SetHostLimit moves
// the limit and restores it.
func TestHostLimitRefusesHugeAllocations(t *testing.T) {
	assert.Greater(t, tensor.HostLimit(), int64(1<<20), "the machine's memory")
	old := tensor.SetHostLimit(1 << 20)
	defer tensor.SetHostLimit(old)
	assert.Equal(t, int64(1<<20), tensor.HostLimit())
	e := sizePanic(t, func() { tensor.Empty(tensor.F32, 512, 1024) }) // 2 MiB
	assert.Contains(t, e.Error(), "limit")
	assert.NotPanics(t, func() { tensor.Empty(tensor.F32, 256, 1024) }) // 1 MiB
	tensor.SetHostLimit(0)
	assert.Equal(t, old, tensor.HostLimit(), "0 restores the default")
}
