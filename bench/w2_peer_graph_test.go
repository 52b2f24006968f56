package bench

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/esper-go/esper/tamiyo"
)

// w2BuiltinMarks delimit the built-in graphs of bench/pytorch/w2_gnn.py.
const (
	w2BuiltinBegin = "BUILTIN_GRAPHS = r\"\"\""
	w2BuiltinEnd   = "\"\"\"\n# END BUILTIN GRAPHS"
)

// TestW2PeerBuiltinGraph: the graph that w2_gnn.py runs without
// --graphs-file (the GPU run, where the peer runs before esper) is
// W2PeerGraphs' batch of one W2 graph with the PERF.md network's widths,
// byte for byte. ESPER_UPDATE_W2_GRAPH=1 rewrites it.
func TestW2PeerBuiltinGraph(t *testing.T) {
	p, err := tamiyo.NewPolicy(tamiyo.PolicyOptions{NoDropout: true})
	require.NoError(t, err)
	g, err := W2Graph(1)
	require.NoError(t, err)
	want, err := w2PeerGraphsJSON(p.Options(), map[int]*tamiyo.Graph{1: g})
	require.NoError(t, err)
	path := filepath.Join("pytorch", "w2_gnn.py")
	src, err := os.ReadFile(path)
	require.NoError(t, err)
	i := bytes.Index(src, []byte(w2BuiltinBegin))
	j := bytes.Index(src, []byte(w2BuiltinEnd))
	require.True(t, i >= 0 && j > i, "%s has no built-in graphs block", path)
	i += len(w2BuiltinBegin)
	if os.Getenv("ESPER_UPDATE_W2_GRAPH") == "1" {
		out := append(append(append([]byte{}, src[:i]...), want...), src[j:]...)
		require.NoError(t, os.WriteFile(path, out, 0o644))
		return
	}
	require.Equal(t, string(want), string(src[i:j]),
		"%s's built-in graph is stale: ESPER_UPDATE_W2_GRAPH=1 go test ./bench -run TestW2PeerBuiltinGraph", path)
}

// TestW2BatchIsTheSingleGraphReplicated: W2's batch of n graphs has the
// structure of n copies of its single graph batched (node counts, edge
// indices, graph indices, slot starts and blueprints), which w2_gnn.py's
// replicate builds from the built-in graph; only feature values differ.
func TestW2BatchIsTheSingleGraphReplicated(t *testing.T) {
	one, err := W2Graph(1)
	require.NoError(t, err)
	got, err := W2Graph(5)
	require.NoError(t, err)
	copies := make([]*tamiyo.Graph, 5)
	for i := range copies {
		copies[i] = one
	}
	want, err := tamiyo.BatchGraphs(copies...)
	require.NoError(t, err)
	require.Equal(t, want.NumGraphs, got.NumGraphs)
	require.Equal(t, want.SlotStart, got.SlotStart)
	require.Equal(t, want.SlotBlueprints, got.SlotBlueprints)
	for k := range want.Nodes {
		require.Equal(t, want.Nodes[k].Count, got.Nodes[k].Count, "node type %d", k)
		require.Equal(t, want.Nodes[k].Graph, got.Nodes[k].Graph, "node type %d", k)
		require.Len(t, got.Nodes[k].Features, len(want.Nodes[k].Features), "node type %d", k)
	}
	for r := range want.Edges {
		require.Equal(t, want.Edges[r].Src, got.Edges[r].Src, "relation %d", r)
		require.Equal(t, want.Edges[r].Dst, got.Edges[r].Dst, "relation %d", r)
		require.Len(t, got.Edges[r].Attr, len(want.Edges[r].Attr), "relation %d", r)
	}
	require.NotEqual(t, want.Nodes[tamiyo.NodeGlobal].Features, got.Nodes[tamiyo.NodeGlobal].Features,
		"the batch's graphs differ in their values")
}
