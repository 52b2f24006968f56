package tamiyo

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/esper-go/esper/autograd"
	"github.com/esper-go/esper/leyline"
	"github.com/esper-go/esper/nn"
	"github.com/esper-go/esper/optim"
	"github.com/esper-go/esper/tensor"
)

// layoutPolicy is a small policy on sim with its message-passing weights
// laid out for stacking (as on a GPU), and its CPU twin.
func layoutPolicy(t *testing.T) (cpu, laid *Policy) {
	t.Helper()
	t.Cleanup(func() { stackAnywhere = false })
	stackAnywhere = true
	o := smallOptions(tensor.F32)
	cpu = newPolicy(t, o)
	o.Device = tensor.Sim(0)
	laid = newPolicy(t, o)
	for i, g := range laid.stackGroups() {
		require.True(t, len(g) < 2 || laidOut(g), "group %d laid out on sim with stackAnywhere", i)
	}
	return cpu, laid
}

// requireLaidOut checks that every stack group of p lies one after
// another in one storage, in the group's order: autograd.StackRows then
// returns a view of it (the same storage), with no copy.
func requireLaidOut(t *testing.T, p *Policy, want bool) {
	t.Helper()
	groups := p.stackGroups()
	require.NotEmpty(t, groups)
	var stacks []*autograd.Var
	autograd.InferenceMode(func() { stacks = autograd.StackRows(groups) })
	for i, g := range groups {
		if len(g) < 2 {
			continue
		}
		view := stacks[i].Value.Storage() == g[0].Value.Storage()
		require.Equal(t, want, view, "group %d (%d weights): the stack a view of the weights", i, len(g))
	}
}

// TestStackLayoutMatchesTheForward: the groups the layout lays out are
// the ones the layers' joined products stack for a graph where every
// relation has edges — autograd.SumsStacks of the SAGE layers' terms
// and the GAT layers' projections, weight for weight and in order — and
// the context heads' first-layer weights and biases, in head order.
func TestStackLayoutMatchesTheForward(t *testing.T) {
	p := newPolicy(t, smallOptions(tensor.F32))
	var inputs []GraphInput
	for i, n := range []int{3, 1, 5, 2} {
		inputs = append(inputs, testInput(t, n, i))
	}
	g, err := BuildGraphBatch(inputs)
	require.NoError(t, err)
	gt, err := p.tensors(g)
	require.NoError(t, err)
	for r, n := range gt.edges {
		require.Positive(t, n, "relation %v has edges in the test graph", Relation(r))
	}
	var x [NumNodeTypes]*autograd.Var
	for ty := range x {
		x[ty] = gt.x[ty]
	}
	for i, l := range p.sage {
		terms, _ := l.terms(x, func(rel Relation) *autograd.GraphEdges { e := gt.relEdges(rel); return &e })
		require.Equal(t, autograd.SumsStacks(terms[:]), l.stacks(), "SAGE layer %d", i)
	}
	for i, l := range p.gat {
		var hs, hd [NumRelations]*autograd.Var
		wss, _ := l.projections(func(r int) bool { return gt.edges[r] != 0 }, &hs, &hd)
		require.Equal(t, wss[:], l.stacks(), "GAT layer %d", i)
	}
	// Last, the context heads' first layers, in ReluHeads' order: every
	// head but the slot pointer.
	groups := p.stackGroups()
	w1s, b1s := groups[len(groups)-2], groups[len(groups)-1]
	require.Len(t, w1s, len(p.heads)-1)
	k := 0
	for hd, h := range p.heads {
		if hd == leyline.HeadSlot {
			continue
		}
		require.Same(t, h.fc1.Weight, w1s[k], "head %d", hd)
		require.Same(t, h.fc1.Bias, b1s[k], "head %d", hd)
		k++
	}
}

// TestStackLayout: laid out on a device, the policy computes bitwise
// what its CPU twin computes, every stack is a view of its weights, and
// it still moves (Policy.To), trains (an optimizer's arena) and saves and
// loads as before.
func TestStackLayout(t *testing.T) {
	cpu, laid := layoutPolicy(t)
	requireLaidOut(t, laid, true)
	// The same values: state dicts and outputs, bitwise.
	want := nn.StateDict(cpu)
	got, err := nn.HostStateDict(laid)
	require.NoError(t, err)
	require.Equal(t, len(want), len(got))
	for name, w := range want {
		require.Equal(t, w.Float64s(), got[name].Float64s(), name)
	}
	cpu.SetTraining(false)
	laid.SetTraining(false)
	var inputs []GraphInput
	for i, n := range []int{2, 4} {
		inputs = append(inputs, testInput(t, n, i))
	}
	g, err := BuildGraphBatch(inputs)
	require.NoError(t, err)
	var wo, go_ *PolicyOutput
	autograd.InferenceMode(func() {
		wo, err = cpu.Run(g)
		require.NoError(t, err)
		go_, err = laid.Run(g)
		require.NoError(t, err)
	})
	for h := range wo.Logits {
		require.Equal(t, wo.Logits[h].Value.Float64s(), hostFloats(t, go_.Logits[h].Value), "head %d", h)
	}
	require.Equal(t, wo.Value.Value.Float64s(), hostFloats(t, go_.Value.Value))

	// To the CPU: every weight owns its storage again, values kept; back
	// to sim: laid out again.
	require.NoError(t, laid.To(tensor.CPU))
	for _, g := range laid.stackGroups() {
		require.False(t, laidOut(g))
	}
	for _, p := range laid.Parameters() {
		require.True(t, p.Value.OwnsStorage())
	}
	for name, w := range want {
		require.Equal(t, w.Float64s(), nn.StateDict(laid)[name].Float64s(), name)
	}
	require.NoError(t, laid.To(tensor.Sim(0)))
	requireLaidOut(t, laid, true)

	// Loading a state dict writes into the laid-out weights in place.
	other := newPolicy(t, PolicyOptions{Hidden: 16, GATHidden: 8, GATHeads: 2, HeadHidden: 8, Seed: 9, DType: tensor.F32, Device: tensor.Sim(0)})
	require.NoError(t, nn.LoadStateDict(laid, nn.StateDict(other), true))
	requireLaidOut(t, laid, true)
	sd, err := nn.HostStateDict(other)
	require.NoError(t, err)
	back, err := nn.HostStateDict(laid)
	require.NoError(t, err)
	for name, w := range sd {
		require.Equal(t, w.Float64s(), back[name].Float64s(), name)
	}

	// An optimizer's arena takes the weights over in parameter order: the
	// stacks are copies again, and moving is refused as for any policy
	// under an optimizer (the layout does not hide the arena).
	arena, err := optim.NewArena(laid.Parameters())
	require.NoError(t, err)
	requireLaidOut(t, laid, false)
	require.NoError(t, laid.To(tensor.Sim(0)), "to its own device: nothing to move, the arena kept")
	require.Error(t, laid.To(tensor.CPU))
	for _, p := range laid.Parameters() {
		require.Same(t, arena.Flat().Storage(), p.Value.Storage(), "still the arena's: the optimizer steers every weight")
	}
}
