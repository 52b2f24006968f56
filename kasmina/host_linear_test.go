package kasmina

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/esper-go/esper/autograd"
	"github.com/esper-go/esper/nn"
	"github.com/esper-go/esper/tensor"
)

// TestLinearHost: the model over a LinearHost computes the layer, routes
// through its one slot, refuses any other, and reports the layer as its
// head with the input as its features.
func TestLinearHost(t *testing.T) {
	_, err := NewLinearHost(nil)
	require.Error(t, err)
	lin, err := nn.NewLinear(tensor.NewRNG(2), nn.LinearOptions{In: 6, Out: 3})
	require.NoError(t, err)
	h, err := NewLinearHost(lin)
	require.NoError(t, err)
	require.Equal(t, map[string]int{LinearHostSlot: 6}, h.SegmentChannels())
	require.Equal(t, 3, h.Blocks()[0].Channels)
	m, err := NewMorphogeneticModel(h, ModelOptions{Slots: []string{LinearHostSlot}})
	require.NoError(t, err)
	x := autograd.Const(tensor.Normal(tensor.NewRNG(3), tensor.F32, 0, 1, 4, 6))
	require.Equal(t, lin.Forward(x).Value.F32(), m.Forward(x).Value.F32())
	at, err := h.ForwardToSegment(LinearHostSlot, x, "")
	require.NoError(t, err)
	require.Same(t, x, at)
	_, err = h.ForwardToSegment("r0c1", x, "")
	require.ErrorContains(t, err, "r0c1")
	_, err = h.ForwardFromSegment("r1c0", x)
	require.ErrorContains(t, err, "r1c0")
	_, err = h.FeaturesFromSegment("r1c0", x)
	require.ErrorContains(t, err, "r1c0")
	feats, head, err := m.ForwardFeatures(x)
	require.NoError(t, err)
	require.Same(t, x, feats)
	require.Same(t, lin, head)
}
