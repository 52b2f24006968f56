package tamiyo

import (
	"errors"
	"math"
	"testing"

	"github.com/esper-go/esper/leyline"
)

// testSlots returns a one-row slot configuration of n slots.
func testSlots(t testing.TB, n int) leyline.SlotConfig {
	t.Helper()
	cfg, err := leyline.SlotConfigForGrid(1, n)
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// testInput builds a graph input with n slots: slot 0 holds a TRAINING
// seed with full telemetry, slot 2 (when there is one) a BLENDING seed
// with none, the rest are empty; one host block per slot (the last block
// without slots when seed%2 == 1, to vary the layer count).
func testInput(t testing.TB, n int, seed int) GraphInput {
	t.Helper()
	cfg := testSlots(t, n)
	ids := cfg.IDs()
	states := map[string]*leyline.ObsSlotState{}
	f := float64(seed)
	states[ids[0]] = &leyline.ObsSlotState{
		Stage: leyline.StageTraining, BlueprintID: "conv_light", Alpha: 0.1 + 0.01*f,
		CounterfactualContribution: leyline.Float64Ptr(1.5 - 0.1*f), BlendTempoEpochs: 5, AlphaTarget: 1,
		AlphaMode: leyline.AlphaHold, AlphaAlgorithm: leyline.BlendAdd,
		GradientNorm: leyline.Float64Ptr(0.8 + f), GradientHealth: leyline.Float64Ptr(0.9),
		PrevGradientHealth: leyline.Float64Ptr(0.7), EpochsInStage: 2 + seed, EpochsTotal: 6 + seed,
		EpochsSinceCounterfactual: new(int),
	}
	if n > 2 {
		states[ids[2]] = &leyline.ObsSlotState{
			Stage: leyline.StageBlending, BlueprintID: "attention", Alpha: 0.4, AlphaTarget: 0.7,
			AlphaMode: leyline.AlphaUp, AlphaAlgorithm: leyline.BlendMultiply, EpochsInStage: 1, EpochsTotal: 9,
		}
	}
	losses := []float64{2.3, 1.9, 1.7 - 0.05*f}
	in := GraphInput{
		Obs: leyline.ObsInput{
			Signals: leyline.TrainingSignals{
				Metrics: leyline.TrainingMetrics{
					Epoch: 3 + seed, ValLoss: losses[2], ValAccuracy: 41 + f, TrainLoss: 1.6,
				},
				LossHistory:     losses,
				AccuracyHistory: []float64{20, 33, 41 + f},
			},
			MaxEpochs:         25,
			LastActionSuccess: seed%2 == 0,
			LastOp:            leyline.LifecycleOp(seed % leyline.NumOps),
			Slots:             cfg,
			SlotStates:        states,
		},
	}
	nl := n + seed%2
	for l := 0; l < nl; l++ {
		ls := LayerState{Block: leyline.BlockInfo{Depth: l, Channels: 16 << (l % 3)}}
		if l < n {
			ls.Block.Slots = []string{ids[l]}
		}
		if l%2 == 0 {
			ls.WeightNorm = leyline.Float64Ptr(3 + float64(l))
			ls.GradNorm = leyline.Float64Ptr(0.1 * float64(l+1))
		}
		in.Layers = append(in.Layers, ls)
	}
	return in
}

func mustGraph(t *testing.T, in GraphInput) *Graph {
	t.Helper()
	g, err := BuildGraph(in)
	if err != nil {
		t.Fatal(err)
	}
	if err := g.Validate(); err != nil {
		t.Fatal(err)
	}
	return g
}

func TestBuildGraphNodesAndEdges(t *testing.T) {
	in := testInput(t, 3, 0)
	// Execution order differs from action order: r0c2 runs first.
	in.Timeline = []string{"r0c2", "r0c0", "r0c1"}
	g := mustGraph(t, in)
	obs, err := leyline.BuildObservation(in.Obs)
	if err != nil {
		t.Fatal(err)
	}

	if got := [3]int{g.Nodes[0].Count, g.Nodes[1].Count, g.Nodes[2].Count}; got != [3]int{1, 3, 3} {
		t.Fatalf("node counts %v, want [1 3 3]", got)
	}
	for i, v := range obs.Features {
		var got float32
		if i < GlobalFeatures {
			got = g.Nodes[NodeGlobal].Features[i]
		} else {
			got = g.Nodes[NodeSlot].Features[i-GlobalFeatures]
		}
		if got != v {
			t.Fatalf("feature %d = %v, observation has %v", i, got, v)
		}
	}
	if want := []int64{int64(leyline.BlueprintIndex("conv_light")), leyline.BlueprintNullIndex, int64(leyline.BlueprintIndex("attention"))}; !equalInts(g.SlotBlueprints, want) {
		t.Errorf("slot blueprints %v, want %v", g.SlotBlueprints, want)
	}
	wantEdges := map[Relation]int{
		RelGlobalToSlot: 3, RelSlotToGlobal: 3, RelGlobalToLayer: 3, RelLayerToGlobal: 3,
		RelSlotNext: 2, RelSlotPrev: 2, RelSlotToLayer: 3, RelLayerToSlot: 3, RelLayerNext: 2, RelLayerPrev: 2,
	}
	for r := Relation(0); r < NumRelations; r++ {
		if got := g.Edges[r].Len(); got != wantEdges[r] {
			t.Errorf("%v: %d edges, want %d", r, got, wantEdges[r])
		}
	}
	// Timeline r0c2 → r0c0 → r0c1 (slot nodes are in action order 0,1,2).
	if e := g.Edges[RelSlotNext]; !equalInts(e.Src, []int64{2, 0}) || !equalInts(e.Dst, []int64{0, 1}) {
		t.Errorf("slot_next edges %v→%v, want [2 0]→[0 1]", e.Src, e.Dst)
	}
	if e := g.Edges[RelSlotPrev]; !equalInts(e.Src, []int64{0, 1}) || !equalInts(e.Dst, []int64{2, 0}) {
		t.Errorf("slot_prev edges %v→%v, want [0 1]→[2 0]", e.Src, e.Dst)
	}
	// Layer 1 has no norms: encoded (0, absent), never healthy.
	l1 := g.Nodes[NodeLayer].Features[LayerFeatures : 2*LayerFeatures]
	if l1[0] != 0.5 || l1[2] != 0 || l1[3] != 0 || l1[4] != 0 || l1[5] != 0 {
		t.Errorf("layer 1 features %v, want depth 0.5 and absent norms", l1)
	}
	l0 := g.Nodes[NodeLayer].Features[:LayerFeatures]
	if want := float32(leyline.Symlog(3) / 7); l0[2] != want || l0[3] != 1 {
		t.Errorf("layer 0 weight norm feature (%v, %v), want (%v, 1)", l0[2], l0[3], want)
	}
	// Edge attributes global→slot: [1, is_active, alpha].
	a := g.Edges[RelGlobalToSlot].Attr
	if a[0] != 1 || a[1] != 1 || a[2] != float32(0.1) || a[3] != 1 || a[4] != 0 {
		t.Errorf("global→slot attributes %v", a[:6])
	}
}

func TestBuildGraphCoverage(t *testing.T) {
	g := mustGraph(t, testInput(t, 3, 0))
	c := g.Coverage[0]
	// Histories: 3 of 5 losses and 3 of 5 accuracies observed.
	if c.Global != (FamilyCoverage{6, 10}) {
		t.Errorf("global coverage %+v, want 6/10", c.Global)
	}
	// Slot 0 has all 5 measurements, slot 2 none.
	if c.Slot != (FamilyCoverage{5, 10}) {
		t.Errorf("slot coverage %+v, want 5/10", c.Slot)
	}
	// Layers 0 and 2 have both norms, layer 1 none.
	if c.Layer != (FamilyCoverage{4, 6}) {
		t.Errorf("layer coverage %+v, want 4/6", c.Layer)
	}
	if c.Attachment != (FamilyCoverage{3, 3}) {
		t.Errorf("attachment coverage %+v, want 3/3", c.Attachment)
	}
	fam := c.Families()
	if len(fam) != 4 || fam["node.slot"] != 0.5 || math.Abs(c.Mean()-(0.6+0.5+4.0/6+1)/4) > 1e-12 {
		t.Errorf("families %v mean %v", fam, c.Mean())
	}
	if (FamilyCoverage{}).Ratio() != 1 {
		t.Error("an empty family should count as fully covered")
	}
}

func TestBatchGraphsOffsets(t *testing.T) {
	a := mustGraph(t, testInput(t, 1, 1))
	b := mustGraph(t, testInput(t, 3, 0))
	c := mustGraph(t, testInput(t, 2, 2))
	ab, err := BatchGraphs(a, b)
	if err != nil {
		t.Fatal(err)
	}
	g, err := BatchGraphs(ab, c) // a batch of batches
	if err != nil {
		t.Fatal(err)
	}
	if err := g.Validate(); err != nil {
		t.Fatal(err)
	}
	if g.NumGraphs != 3 || !equalInts(intsTo64(g.SlotStart), []int64{0, 1, 4, 6}) || g.MaxSlots() != 3 {
		t.Fatalf("batched %d graphs, slot starts %v, max slots %d", g.NumGraphs, g.SlotStart, g.MaxSlots())
	}
	if got := g.Nodes[NodeSlot].Graph; !equalInts(got, []int64{0, 1, 1, 1, 2, 2}) {
		t.Errorf("slot graph ids %v", got)
	}
	// Every edge of part k is the part's edge shifted by the nodes before.
	parts := []*Graph{a, b, c}
	for r := Relation(0); r < NumRelations; r++ {
		var off [NumNodeTypes]int64
		k := 0
		for _, p := range parts {
			e := p.Edges[r]
			for i := range e.Src {
				if g.Edges[r].Src[k] != e.Src[i]+off[r.Src()] || g.Edges[r].Dst[k] != e.Dst[i]+off[r.Dst()] {
					t.Fatalf("%v edge %d: %d→%d, want %d→%d", r, k, g.Edges[r].Src[k], g.Edges[r].Dst[k], e.Src[i]+off[r.Src()], e.Dst[i]+off[r.Dst()])
				}
				k++
			}
			for nt := range off {
				off[nt] += int64(p.Nodes[nt].Count)
			}
		}
		if k != g.Edges[r].Len() {
			t.Fatalf("%v: %d edges, parts have %d", r, g.Edges[r].Len(), k)
		}
	}
	if len(g.Coverage) != 3 || g.Coverage[1] != b.Coverage[0] {
		t.Errorf("coverage not carried per environment: %+v", g.Coverage)
	}
	batch, err := BuildGraphBatch([]GraphInput{testInput(t, 1, 1), testInput(t, 3, 0), testInput(t, 2, 2)})
	if err != nil {
		t.Fatal(err)
	}
	if batch.Edges[RelLayerToSlot].Len() != g.Edges[RelLayerToSlot].Len() || !equalInts(batch.SlotBlueprints, g.SlotBlueprints) {
		t.Error("BuildGraphBatch differs from BatchGraphs of BuildGraph")
	}
}

func TestBuildGraphErrors(t *testing.T) {
	cases := []struct {
		name string
		edit func(in *GraphInput)
	}{
		{"no layers", func(in *GraphInput) { in.Layers = nil }},
		{"depth out of order", func(in *GraphInput) { in.Layers[1].Block.Depth = 2 }},
		{"zero channels", func(in *GraphInput) { in.Layers[0].Block.Channels = 0 }},
		{"unknown slot", func(in *GraphInput) { in.Layers[0].Block.Slots = []string{"r5c5"} }},
		{"slot attached twice", func(in *GraphInput) { in.Layers[1].Block.Slots = []string{"r0c0"} }},
		{"NaN weight norm", func(in *GraphInput) { in.Layers[0].WeightNorm = leyline.Float64Ptr(math.NaN()) }},
		{"negative grad norm", func(in *GraphInput) { in.Layers[0].GradNorm = leyline.Float64Ptr(-1) }},
		{"short timeline", func(in *GraphInput) { in.Timeline = []string{"r0c0", "r0c1"} }},
		{"timeline repeats", func(in *GraphInput) { in.Timeline = []string{"r0c0", "r0c1", "r0c1"} }},
		{"bad observation", func(in *GraphInput) { in.Obs.MaxEpochs = 0 }},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			in := testInput(t, 3, 0)
			tc.edit(&in)
			if _, err := BuildGraph(in); !errors.Is(err, ErrGraph) {
				t.Fatalf("err = %v, want ErrGraph", err)
			}
		})
	}
	if _, err := BatchGraphs(); !errors.Is(err, ErrGraph) {
		t.Errorf("BatchGraphs() err = %v", err)
	}
	// An unattached slot is allowed and lowers attachment coverage.
	in := testInput(t, 3, 0)
	in.Layers[2].Block.Slots = nil
	g := mustGraph(t, in)
	if g.Coverage[0].Attachment != (FamilyCoverage{2, 3}) || g.Edges[RelSlotToLayer].Len() != 2 {
		t.Errorf("unattached slot: coverage %+v, %d attachment edges", g.Coverage[0].Attachment, g.Edges[RelSlotToLayer].Len())
	}
	// Validate catches a corrupted batch.
	g.Edges[RelSlotNext].Dst[0] = 7
	if err := g.Validate(); !errors.Is(err, ErrGraph) {
		t.Errorf("Validate of an out-of-range edge: %v", err)
	}
}

func equalInts(a, b []int64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func intsTo64(v []int) []int64 {
	out := make([]int64, len(v))
	for i, x := range v {
		out[i] = int64(x)
	}
	return out
}
