package autograd_test

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/esper-go/esper/autograd"
	"github.com/esper-go/esper/kernels"
	_ "github.com/esper-go/esper/kernels/sim"
	"github.com/esper-go/esper/tensor"
)

// closingBackend hands out graphs that count their Close calls (a
// backend whose graphs hold device resources, as CUDA's do).
type closingBackend struct {
	kernels.Backend
	closed int
	fail   error // what Close returns
}

func (b *closingBackend) EndCapture() (kernels.Graph, error) {
	g, err := b.Backend.EndCapture()
	if err != nil {
		return nil, err
	}
	return &closingGraph{Graph: g, b: b}, nil
}

type closingGraph struct {
	kernels.Graph
	b *closingBackend
}

func (g *closingGraph) Close() error {
	g.b.closed++
	return g.b.fail
}

// TestCapturedClose: Close closes every graph the Captured holds (two
// guard keys: two graphs) and empties its caches, keeping its figures;
// the next Run warms up and captures again, with the same results, and
// a graph's Close error is returned.
func TestCapturedClose(t *testing.T) {
	dev := tensor.Sim(12)
	orig := kernels.For(dev)
	cb := &closingBackend{Backend: orig}
	kernels.Register(cb)
	t.Cleanup(func() { kernels.Register(orig) })
	on := func(v ...float32) *tensor.Tensor {
		d, err := tensor.FromSlice(v, len(v)).ToDevice(dev)
		require.NoError(t, err)
		return d
	}
	w := autograd.Param(on(2))
	c := autograd.Capture(func(in []*tensor.Tensor) []*tensor.Tensor {
		var y *autograd.Var
		autograd.InferenceMode(func() { y = autograd.Mul(autograd.Const(in[0]), w) })
		return []*tensor.Tensor{y.Value}
	}, autograd.CaptureOptions{})
	run := func(x *tensor.Tensor) []float32 {
		out, err := c.Run(x)
		require.NoError(t, err)
		host, err := out[0].ToDevice(tensor.CPU)
		require.NoError(t, err)
		return host.F32()
	}
	for range 3 { // warm-up, capture, replay: two graphs
		require.Equal(t, []float32{6}, run(on(3)))
		require.Equal(t, []float32{2, 4}, run(on(1, 2)))
	}
	st := c.Stats()
	require.Equal(t, 2, st.Captures)
	require.Equal(t, 2, st.CachedGraphs)
	require.NoError(t, c.Close())
	require.Equal(t, 2, cb.closed, "both graphs closed")
	after := c.Stats()
	require.Zero(t, after.CachedGraphs)
	require.Equal(t, st.Replays, after.Replays, "the figures stay")
	require.Error(t, c.ReplayLast(), "no graph left to replay")
	require.NoError(t, c.Close(), "nothing left to close")
	require.Equal(t, 2, cb.closed)
	for range 2 { // warm-up, capture again
		require.Equal(t, []float32{6}, run(on(3)))
	}
	require.Equal(t, 3, c.Stats().Captures)
	cb.fail = errors.New("the driver refused")
	require.ErrorContains(t, c.Close(), "the driver refused")
	require.Equal(t, 3, cb.closed)
	require.Zero(t, c.Stats().CachedGraphs)
}
