package tamiyo

import (
	"errors"
	"math"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/esper-go/esper/autograd"
	"github.com/esper-go/esper/internal/testdevice"
	"github.com/esper-go/esper/leyline"
	"github.com/esper-go/esper/nn"
	"github.com/esper-go/esper/tensor"
)

// smallOptions are narrow widths that keep the tests fast.
func smallOptions(dt tensor.DType) PolicyOptions {
	return PolicyOptions{Hidden: 16, GATHidden: 8, GATHeads: 2, HeadHidden: 8, Seed: 3, DType: dt}
}

// mustPolicy builds a policy with options o on the test device
// (ESPER_TEST_DEVICE; a device o names itself wins).
func mustPolicy(t *testing.T, o PolicyOptions) *Policy {
	t.Helper()
	if o.Device.IsCPU() {
		o.Device = testdevice.Device(t)
	}
	return newPolicy(t, o)
}

// newPolicy builds a policy with options o as they are (on o.Device).
func newPolicy(t *testing.T, o PolicyOptions) *Policy {
	t.Helper()
	p, err := NewPolicy(o)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// layerCheck gradient-checks one message-passing layer in F64 with
// respect to its parameters and its input node features, on a batch of
// two graphs (one with a single slot, so one relation has no edges). It
// runs on the CPU on purpose: GradCheck perturbs its leaves on the host.
func layerCheck(t *testing.T, layer nn.Module, forward func([NumNodeTypes]*autograd.Var, *graphTensors) [NumNodeTypes]*autograd.Var, width int) {
	t.Helper()
	g, err := BuildGraphBatch([]GraphInput{testInput(t, 3, 1), testInput(t, 1, 0)})
	if err != nil {
		t.Fatal(err)
	}
	gt, err := newGraphTensors(g, tensor.F64, tensor.CPU, nil)
	if err != nil {
		t.Fatal(err)
	}
	rng := tensor.NewRNG(11)
	vars := layer.Parameters()
	var x [NumNodeTypes]*autograd.Var
	for nt := range x {
		x[nt] = autograd.Param(tensor.Uniform(rng, tensor.F64, -1, 1, gt.n[nt], width))
		vars = append(vars, x[nt])
	}
	// Non-zero biases and attention vectors, so every term is exercised.
	for _, v := range layer.Parameters() {
		copy(v.Value.F64(), tensor.Uniform(rng, tensor.F64, -0.5, 0.5, v.Shape()...).F64())
	}
	f := func() *autograd.Var {
		out := forward(x, gt)
		parts := make([]*autograd.Var, len(out))
		for nt, o := range out {
			parts[nt] = autograd.Reshape(o, o.Value.Numel())
		}
		return autograd.Concat(parts, 0)
	}
	if err := autograd.GradCheckVars(f, vars, autograd.GradCheckOptions{Tol: 1e-6}); err != nil {
		t.Fatal(err)
	}
}

func TestSAGELayerGradCheck(t *testing.T) {
	// The layer's output: the mean over relations, GELU (the widths
	// differ, so no residual).
	l := newSAGELayer(tensor.NewRNG(5), 3, 2, tensor.F64)
	layerCheck(t, l, l.forward, 3)
}

func TestGATLayerGradCheck(t *testing.T) {
	l := newGATLayer(tensor.NewRNG(6), 3, 2, 2, tensor.F64)
	layerCheck(t, l, l.forward, 3)
}

// TestGATAttentionNormalisesOverIncomingEdges checks the attention by
// hand on one relation: with equal attention logits every destination
// averages its sources. The layer runs on the test device.
func TestGATAttentionNormalisesOverIncomingEdges(t *testing.T) {
	g := mustGraph(t, testInput(t, 3, 0))
	dev := testdevice.Device(t)
	gt, err := newGraphTensors(g, tensor.F64, dev, nil)
	if err != nil {
		t.Fatal(err)
	}
	l := newGATLayer(tensor.NewRNG(6), 2, 2, 1, tensor.F64)
	for _, r := range l.rels {
		for _, v := range []*autograd.Var{r.attSrc, r.attDst, r.attEdge} {
			v.Value.Fill(0) // uniform attention
		}
	}
	if err := nn.To(l, dev); err != nil {
		t.Fatal(err)
	}
	var x [NumNodeTypes]*autograd.Var
	rng := tensor.NewRNG(2)
	for nt := range x {
		x[nt] = autograd.Const(testdevice.To(t, tensor.Uniform(rng, tensor.F64, -1, 1, gt.n[nt], 2)))
	}
	out := l.forward(x, gt)
	// Global: GELU of the mean over its two relations (slot→global,
	// layer→global) of the mean of W_s x over the sources, plus bias
	// (zero), plus the residual.
	mean := func(r Relation) []float64 {
		w := testdevice.F64(t, l.rels[r].linSrc.Weight.Value) // [2, 2]
		xs := testdevice.F64(t, x[r.Src()].Value)
		n := gt.n[r.Src()]
		m := make([]float64, 2)
		for j := 0; j < n; j++ {
			for c := 0; c < 2; c++ {
				m[c] += (w[c*2]*xs[j*2] + w[c*2+1]*xs[j*2+1]) / float64(n)
			}
		}
		return m
	}
	a, b := mean(RelSlotToGlobal), mean(RelLayerToGlobal)
	got := testdevice.F64(t, out[NodeGlobal].Value)
	// The layer's GELU, and its input added (the widths match).
	xg := testdevice.F64(t, x[NodeGlobal].Value)
	gelu := func(v float64) float64 { return 0.5 * v * (1 + math.Erf(v/math.Sqrt2)) }
	for c := 0; c < 2; c++ {
		if want := gelu((a[c]+b[c])/2) + xg[c]; math.Abs(got[c]-want) > 1e-12 {
			t.Fatalf("global output %v, want %v", got, want)
		}
	}
}

// forwardF64 runs an F64 policy on g in inference mode.
func forwardF64(t *testing.T, p *Policy, g *Graph) *PolicyOutput {
	t.Helper()
	var out *PolicyOutput
	var err error
	autograd.InferenceMode(func() { out, err = p.Run(g) })
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func TestBatchedEqualsSingles(t *testing.T) {
	p := nn.Eval(mustPolicy(t, smallOptions(tensor.F64)))
	counts := []int{1, 2, 3, 5, 9}
	var inputs []GraphInput
	for i, n := range counts {
		inputs = append(inputs, testInput(t, n, i))
	}
	batch, err := BuildGraphBatch(inputs)
	if err != nil {
		t.Fatal(err)
	}
	bo := forwardF64(t, p, batch)
	if s := bo.Logits[leyline.HeadSlot].Shape(); s[0] != 5 || s[1] != 9 {
		t.Fatalf("batched slot logits shape %v, want [5 9]", s)
	}
	for b, in := range inputs {
		so := forwardF64(t, p, mustGraph(t, in))
		for h := range so.Logits {
			single := testdevice.F64(t, so.Logits[h].Value)
			width := bo.Logits[h].Shape()[1]
			row := testdevice.F64(t, bo.Logits[h].Value)[b*width : (b+1)*width]
			for i := range single {
				if math.Abs(row[i]-single[i]) > 1e-12 {
					t.Fatalf("env %d (%d slots) head %s option %d: batched %v, single %v", b, counts[b], leyline.HeadNames[h], i, row[i], single[i])
				}
			}
			if h == leyline.HeadSlot {
				for i := len(single); i < width; i++ {
					if row[i] != 0 {
						t.Errorf("env %d: padded slot logit %d = %v, want 0", b, i, row[i])
					}
				}
			}
		}
		if bv, sv := testdevice.F64(t, bo.Value.Value)[b], testdevice.F64(t, so.Value.Value)[0]; math.Abs(bv-sv) > 1e-12 {
			t.Fatalf("env %d value: batched %v, single %v", b, bv, sv)
		}
	}
}

func TestSameWeightsServeAnySlotCount(t *testing.T) {
	p := nn.Eval(mustPolicy(t, smallOptions(tensor.F32)))
	for _, n := range []int{1, 2, 3, 5, 9} {
		g := mustGraph(t, testInput(t, n, 0))
		out, err := p.Run(g)
		if err != nil {
			t.Fatal(err)
		}
		if s := out.Logits[leyline.HeadSlot].Shape(); s[0] != 1 || s[1] != n {
			t.Errorf("%d slots: slot logits shape %v", n, s)
		}
		if s := out.SlotScores.Shape(); len(s) != 1 || s[0] != n {
			t.Errorf("%d slots: slot scores shape %v", n, s)
		}
		for h, size := range leyline.HeadSizes(n) {
			if s := out.Logits[h].Shape(); s[1] != size {
				t.Errorf("%d slots: head %s shape %v, want width %d", n, leyline.HeadNames[h], s, size)
			}
		}
		masks := testMasks(t, n, nil)
		res, err := p.Act(g, []leyline.ActionMasks{masks}, ActOptions{Rand: tensor.NewRNG(uint64(n))})
		if err != nil {
			t.Fatalf("%d slots: %v", n, err)
		}
		if a := res.Actions[0][leyline.HeadSlot]; a < 0 || a >= n {
			t.Errorf("%d slots: slot action %d", n, a)
		}
	}
}

func TestPolicyDefaultsAndNames(t *testing.T) {
	p := mustPolicy(t, PolicyOptions{})
	o := p.Options()
	if o.Hidden != 256 || o.GATHidden != 128 || o.GATHeads != 4 || o.HeadHidden != 128 ||
		o.BlueprintEmbedding != 4 || o.Dropout != 0.2 || o.DType != tensor.F32 {
		t.Fatalf("defaults %+v", o)
	}
	names := map[string][]int{}
	for _, n := range p.NamedParameters() {
		names[n.Name] = n.Var.Shape()
	}
	want := map[string][]int{
		"encoders.slot.lin.weight":                 {256, 35},
		"encoders.layer.norm.bias":                 {256},
		"blueprint_embedding.weight":               {14, 4},
		"sage1.slot_next_slot.lin_l.weight":        {256, 256},
		"sage2.layer_hosts_slot.lin_r.weight":      {256, 256},
		"gat1.global_influences_slot.att_src":      {1, 4, 128},
		"gat1.slot_attached_layer.lin_edge.weight": {512, 3},
		"gat2.layer_prev_layer.bias":               {128},
		"head_op.fc2.weight":                       {6, 128},
		"head_slot.fc1.weight":                     {128, 256},
		"head_blueprint.fc2.bias":                  {13},
		"value.fc2.weight":                         {1, 128},
	}
	for k, s := range want {
		if got, ok := names[k]; !ok || !tensor.SameShape(got, s) {
			t.Errorf("parameter %s: shape %v (present %v), want %v", k, got, ok, s)
		}
	}
	if _, err := p.Run(&Graph{}); !errors.Is(err, ErrGraph) {
		t.Errorf("Run on an empty graph: %v", err)
	}
	for _, bad := range []PolicyOptions{{Hidden: -1}, {Dropout: 1}, {DType: tensor.I64}} {
		if _, err := NewPolicy(bad); !errors.Is(err, ErrPolicyOptions) {
			t.Errorf("NewPolicy(%+v) err = %v", bad, err)
		}
	}
}

func TestPolicyDropoutOnlyInTraining(t *testing.T) {
	p := mustPolicy(t, smallOptions(tensor.F64))
	g := mustGraph(t, testInput(t, 3, 0))
	value := func(out *PolicyOutput) float64 { return testdevice.F64(t, out.Value.Value)[0] }
	a, b := forwardF64(t, p, g), forwardF64(t, p, g)
	if value(a) == value(b) {
		t.Error("two training-mode passes gave the same value: dropout inactive")
	}
	p.SetTraining(false)
	a, b = forwardF64(t, p, g), forwardF64(t, p, g)
	if value(a) != value(b) {
		t.Error("evaluation-mode passes differ")
	}
	q := mustPolicy(t, func() PolicyOptions { o := smallOptions(tensor.F64); o.NoDropout = true; return o }())
	a, b = forwardF64(t, q, g), forwardF64(t, q, g)
	if value(a) != value(b) || q.Options().Dropout != 0 {
		t.Error("NoDropout policy is not deterministic in training mode")
	}
}

func TestPolicyForwardPanicsWithGuidance(t *testing.T) {
	defer func() {
		if r := recover(); r == nil || !strings.Contains(r.(string), "Graph") {
			t.Errorf("recovered %v", r)
		}
	}()
	mustPolicy(t, smallOptions(tensor.F32)).Forward(nil)
}

// TestSlotLogitsWithoutPadding: when every graph of a batch has the most
// slots the slot logits are the slot scores themselves (no padding
// gather); with fewer slots in a graph its missing slots are 0 and the
// others its scores. The same policy gives a graph's logits alike in
// either batch.
func TestSlotLogitsWithoutPadding(t *testing.T) {
	p := newPolicy(t, smallOptions(tensor.F32))
	p.SetTraining(false)
	full, err := BuildGraphBatch([]GraphInput{testInput(t, 3, 0), testInput(t, 3, 1)})
	require.NoError(t, err)
	out, err := p.Run(full)
	require.NoError(t, err)
	require.Equal(t, []int{2, 3}, out.Logits[leyline.HeadSlot].Shape())
	require.Equal(t, out.SlotScores.Value.Float64s(), out.Logits[leyline.HeadSlot].Value.Float64s())

	mixed, err := BuildGraphBatch([]GraphInput{testInput(t, 3, 0), testInput(t, 1, 1)})
	require.NoError(t, err)
	outM, err := p.Run(mixed)
	require.NoError(t, err)
	lm := outM.Logits[leyline.HeadSlot].Value.Float64s()
	sm := outM.SlotScores.Value.Float64s()
	require.Equal(t, []float64{sm[0], sm[1], sm[2], sm[3], 0, 0}, lm)
	require.Equal(t, out.Logits[leyline.HeadSlot].Value.Float64s()[:3], lm[:3], "graph 0 alike in both batches")
}
