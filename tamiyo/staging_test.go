package tamiyo

import (
	"slices"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/esper-go/esper/nn"
	"github.com/esper-go/esper/tensor"
)

// TestGraphTensorsSortEdges: a graph whose edges are not sorted by
// destination (one relation's reversed) goes to the tensors sorted —
// each edge's source, destination and attributes moved together,
// destinations non-decreasing, so that the fused aggregations need no
// order — and the policy computes what it computes on the same graph
// with its edges in BuildGraph's order (to float32 rounding: a node's
// edges may now be summed in another order), on the CPU and on sim.
func TestGraphTensorsSortEdges(t *testing.T) {
	var inputs []GraphInput
	for i, n := range []int{3, 1, 2} {
		inputs = append(inputs, testInput(t, n, i))
	}
	g, err := BuildGraphBatch(inputs)
	require.NoError(t, err)
	h, err := BuildGraphBatch(inputs)
	require.NoError(t, err)
	rel := -1
	for r, e := range h.Edges {
		if e.Len() > 2 && e.Dst[0] != e.Dst[e.Len()-1] {
			rel = r
			break
		}
	}
	require.GreaterOrEqual(t, rel, 0, "a relation with edges into two nodes")
	e := &h.Edges[rel]
	n := e.Len()
	for k := 0; k < n/2; k++ {
		j := n - 1 - k
		e.Src[k], e.Src[j] = e.Src[j], e.Src[k]
		e.Dst[k], e.Dst[j] = e.Dst[j], e.Dst[k]
		for f := 0; f < EdgeFeatures; f++ {
			e.Attr[k*EdgeFeatures+f], e.Attr[j*EdgeFeatures+f] = e.Attr[j*EdgeFeatures+f], e.Attr[k*EdgeFeatures+f]
		}
	}
	require.NoError(t, h.Validate())
	gt, err := newGraphTensors(h, tensor.F32, tensor.CPU, nil)
	require.NoError(t, err)
	src, dst := tensor.Data[int64](gt.src[rel]), tensor.Data[int64](gt.dst[rel])
	attr := tensor.Data[float32](gt.attr[rel].Value)
	require.True(t, slices.IsSorted(dst), "destinations sorted: %v", dst)
	// The same edges: each (src, dst, attr) of the graph is one of the
	// tensors', once.
	type edge struct {
		s, d int64
		a    [EdgeFeatures]float32
	}
	count := map[edge]int{}
	for k := range n {
		var a [EdgeFeatures]float32
		copy(a[:], attr[k*EdgeFeatures:])
		count[edge{src[k], dst[k], a}]++
		copy(a[:], e.Attr[k*EdgeFeatures:])
		count[edge{e.Src[k], e.Dst[k], a}]--
	}
	for ed, c := range count {
		require.Zero(t, c, "edge %+v", ed)
	}
	for _, dev := range []tensor.Device{tensor.CPU, tensor.Sim(0)} {
		p := newPolicy(t, smallOptions(tensor.F32))
		require.NoError(t, nn.To(p, dev))
		in, err := NewInference(p, InferenceOptions{NoCapture: true})
		require.NoError(t, err)
		want, err := in.Forward(g)
		require.NoError(t, err)
		got, err := in.Forward(h)
		require.NoError(t, err)
		for hd := range want.Heads {
			for b := range want.Heads[hd] {
				require.InDeltaSlice(t, want.Heads[hd][b], got.Heads[hd][b], 1e-5, "%v: head %d, graph %d", dev, hd, b)
			}
		}
		require.InDeltaSlice(t, want.Values, got.Values, 1e-5, "%v: values", dev)
	}
}
