package tamiyo

import (
	"errors"
	"fmt"
	"math"

	"github.com/esper-go/esper/leyline"
)

// The policy reads one environment's state as a small heterogeneous graph
// (ESPER.md §Tamiyo): one global node (the 23 Obs V3 base features), one
// node per slot (its 31 Obs V3 features; the policy appends a learned
// blueprint embedding) and one node per host block (depth, width, weight
// and gradient norms). Many environments are batched into one graph whose
// node and edge indices are offset per environment, so a single forward
// pass serves them all.

// NodeType is a kind of graph node.
type NodeType int

// Node types, in the order of Graph.Nodes.
const (
	NodeGlobal NodeType = iota
	NodeSlot
	NodeLayer
	// NumNodeTypes is the number of node types.
	NumNodeTypes = 3
)

var nodeTypeNames = [NumNodeTypes]string{"global", "slot", "layer"}

// String returns the node type's name ("global", "slot", "layer").
func (t NodeType) String() string {
	if t < 0 || t >= NumNodeTypes {
		return fmt.Sprintf("NodeType(%d)", int(t))
	}
	return nodeTypeNames[t]
}

// Node feature widths: the raw features the graph carries per node type.
const (
	// GlobalFeatures is the global node's width: the Obs V3 base features.
	GlobalFeatures = leyline.ObsBaseFeatures
	// SlotFeatures is a slot node's width: the Obs V3 per-slot features
	// (the blueprint embedding is added by the policy).
	SlotFeatures = leyline.ObsSlotFeatures
	// LayerFeatures is a layer node's width: depth fraction,
	// symlog(channels)/7, and for the weight norm and the gradient norm
	// each a (symlog(norm)/7, present) pair. A norm that was not measured
	// encodes as (0, 0), never as a healthy value.
	LayerFeatures = 6
	// EdgeFeatures is the width of every edge's attribute vector, read by
	// the attention layers.
	EdgeFeatures = 3
)

// NodeFeatureWidths are the feature widths per node type, in NodeType
// order.
var NodeFeatureWidths = [NumNodeTypes]int{GlobalFeatures, SlotFeatures, LayerFeatures}

// Relation is a typed, directed edge set between two node types.
type Relation int

// The relations of ESPER.md §Tamiyo, each direction its own relation:
// global↔slot, global↔layer, slot→slot along the host's timeline (both
// directions), slot↔layer (a slot attached after a block) and
// layer→layer along the host's chain (both directions).
const (
	RelGlobalToSlot Relation = iota
	RelSlotToGlobal
	RelGlobalToLayer
	RelLayerToGlobal
	RelSlotNext
	RelSlotPrev
	RelSlotToLayer
	RelLayerToSlot
	RelLayerNext
	RelLayerPrev
	// NumRelations is the number of relations.
	NumRelations = 10
)

type relationInfo struct {
	name     string
	src, dst NodeType
}

var relations = [NumRelations]relationInfo{
	RelGlobalToSlot:  {"global_influences_slot", NodeGlobal, NodeSlot},
	RelSlotToGlobal:  {"slot_reports_global", NodeSlot, NodeGlobal},
	RelGlobalToLayer: {"global_operates_layer", NodeGlobal, NodeLayer},
	RelLayerToGlobal: {"layer_feedback_global", NodeLayer, NodeGlobal},
	RelSlotNext:      {"slot_next_slot", NodeSlot, NodeSlot},
	RelSlotPrev:      {"slot_prev_slot", NodeSlot, NodeSlot},
	RelSlotToLayer:   {"slot_attached_layer", NodeSlot, NodeLayer},
	RelLayerToSlot:   {"layer_hosts_slot", NodeLayer, NodeSlot},
	RelLayerNext:     {"layer_next_layer", NodeLayer, NodeLayer},
	RelLayerPrev:     {"layer_prev_layer", NodeLayer, NodeLayer},
}

// String returns the relation's name, such as "slot_next_slot".
func (r Relation) String() string {
	if r < 0 || r >= NumRelations {
		return fmt.Sprintf("Relation(%d)", int(r))
	}
	return relations[r].name
}

// Src returns the node type the relation's edges start from.
func (r Relation) Src() NodeType { return relations[r].src }

// Dst returns the node type the relation's edges point to.
func (r Relation) Dst() NodeType { return relations[r].dst }

// LayerState is one host block as the graph sees it: its shape from
// Kasmina and its norms when they were measured (nil = not measured).
type LayerState struct {
	Block leyline.BlockInfo
	// WeightNorm and GradNorm are the L2 norms of the block's weights
	// and of their last gradient.
	WeightNorm, GradNorm *float64
}

// GraphInput is the typed state of one environment from which its graph
// is built.
type GraphInput struct {
	// Obs is the Obs V3 input: signals, slot configuration (its order
	// is the slot head's and the order of the slot nodes) and slot
	// states.
	Obs leyline.ObsInput
	// Layers are the host's blocks in depth order (Block.Depth = index);
	// at least one. Each slot of Obs.Slots may appear in at most one
	// block's Slots; a slot in none has no attachment edges.
	Layers []LayerState
	// Timeline lists the slot ids in execution order, for the slot→slot
	// edges; nil means Obs.Slots order.
	Timeline []string
}

// ErrGraph is wrapped by every error BuildGraph and BatchGraphs return.
var ErrGraph = errors.New("invalid graph input")

// Nodes holds the nodes of one type of a (batched) graph.
type Nodes struct {
	// Count is the number of nodes.
	Count int
	// Features is row-major [Count, width] with the type's width
	// (NodeFeatureWidths).
	Features []float32
	// Graph is the index of the environment each node belongs to.
	Graph []int64
}

// Edges holds one relation's edges; Src and Dst index the nodes of the
// relation's source and destination types.
type Edges struct {
	Src, Dst []int64
	// Attr is row-major [len(Src), EdgeFeatures].
	Attr []float32
}

// Len returns the number of edges.
func (e Edges) Len() int { return len(e.Src) }

// FamilyCoverage counts the optional measurements of one feature family
// that were present.
type FamilyCoverage struct {
	Present, Total int
}

// Ratio returns Present/Total, or 1 when the family had nothing to
// measure.
func (c FamilyCoverage) Ratio() float64 {
	if c.Total == 0 {
		return 1
	}
	return float64(c.Present) / float64(c.Total)
}

// Coverage reports, per feature family, how much of the graph's optional
// input was actually observed (G1 feature coverage). Missing inputs are
// encoded as sentinels or zeros; coverage says how many there were.
type Coverage struct {
	// Global counts the observed steps of the loss and accuracy
	// histories.
	Global FamilyCoverage
	// Slot counts, over occupied slots, the measured counterfactual
	// contribution, gradient norm (finite), gradient health, previous
	// gradient health and counterfactual age.
	Slot FamilyCoverage
	// Layer counts the measured weight and gradient norms.
	Layer FamilyCoverage
	// Attachment counts the slots attached to a host block.
	Attachment FamilyCoverage
}

// Families returns the coverage ratio per family, keyed as the
// tamiyo.gnn.feature_coverage.<family> metrics: "node.global",
// "node.slot", "node.layer", "edges.attachment".
func (c Coverage) Families() map[string]float64 {
	return map[string]float64{
		"node.global":      c.Global.Ratio(),
		"node.slot":        c.Slot.Ratio(),
		"node.layer":       c.Layer.Ratio(),
		"edges.attachment": c.Attachment.Ratio(),
	}
}

// Mean returns the average of the family ratios.
func (c Coverage) Mean() float64 {
	return (c.Global.Ratio() + c.Slot.Ratio() + c.Layer.Ratio() + c.Attachment.Ratio()) / 4
}

// Graph is a batch of environment graphs in one: the nodes of every
// environment concatenated per type, edges offset accordingly. Slot nodes
// come in each environment's SlotConfig order, so the pointer head's
// scores of environment b are slot nodes SlotStart[b] … SlotStart[b+1]−1
// in slot-head order.
type Graph struct {
	// NumGraphs is the number of environments.
	NumGraphs int
	// Nodes is indexed by NodeType.
	Nodes [NumNodeTypes]Nodes
	// SlotBlueprints holds, per slot node, the row of the blueprint
	// embedding: the blueprint index, or leyline.BlueprintNullIndex for
	// an empty slot.
	SlotBlueprints []int64
	// SlotStart[b] is environment b's first slot node; SlotStart has
	// NumGraphs+1 entries.
	SlotStart []int
	// Edges is indexed by Relation.
	Edges [NumRelations]Edges
	// Coverage is per environment.
	Coverage []Coverage
}

// NumSlots returns environment b's slot count.
func (g *Graph) NumSlots(b int) int { return g.SlotStart[b+1] - g.SlotStart[b] }

// MaxSlots returns the largest slot count of any environment.
func (g *Graph) MaxSlots() int {
	m := 0
	for b := 0; b < g.NumGraphs; b++ {
		m = max(m, g.NumSlots(b))
	}
	return m
}

// BuildGraph builds one environment's graph from its typed state. It is a
// pure function of its input.
func BuildGraph(in GraphInput) (*Graph, error) {
	obs, err := leyline.BuildObservation(in.Obs)
	if err != nil {
		return nil, fmt.Errorf("tamiyo: BuildGraph: %w: %w", ErrGraph, err)
	}
	ids := in.Obs.Slots.IDs()
	nS, nL := len(ids), len(in.Layers)
	if nL == 0 {
		return nil, fmt.Errorf("tamiyo: BuildGraph: %w: no host layers (the graph needs at least one block)", ErrGraph)
	}
	slotIndex := make(map[string]int, nS)
	for i, id := range ids {
		slotIndex[id] = i
	}

	g := &Graph{NumGraphs: 1, SlotStart: []int{0, nS}, Coverage: make([]Coverage, 1)}
	cov := &g.Coverage[0]

	// Global node.
	g.Nodes[NodeGlobal] = Nodes{Count: 1, Features: append([]float32(nil), obs.Features[:GlobalFeatures]...), Graph: []int64{0}}
	for _, v := range obs.Features[3:13] { // the loss and accuracy histories
		cov.Global.Total++
		if v != leyline.ObsUnknown {
			cov.Global.Present++
		}
	}

	// Slot nodes, in slot-head order.
	slotX := obs.Features[GlobalFeatures:]
	g.Nodes[NodeSlot] = Nodes{Count: nS, Features: append([]float32(nil), slotX...), Graph: make([]int64, nS)}
	g.SlotBlueprints = make([]int64, nS)
	for i, id := range ids {
		bp := obs.BlueprintIndices[i]
		if bp < 0 {
			bp = leyline.BlueprintNullIndex
		}
		g.SlotBlueprints[i] = int64(bp)
		st := in.Obs.SlotStates[id]
		if st == nil {
			continue
		}
		cov.Slot.Total += 5
		for _, ok := range []bool{
			st.CounterfactualContribution != nil,
			st.GradientNorm != nil && finite(*st.GradientNorm),
			st.GradientHealth != nil,
			st.PrevGradientHealth != nil,
			st.EpochsSinceCounterfactual != nil,
		} {
			if ok {
				cov.Slot.Present++
			}
		}
	}

	// Layer nodes.
	layerX := make([]float32, 0, nL*LayerFeatures)
	attached := make([]int, nS) // layer index + 1, 0 when unattached
	depthFrac := func(d int) float32 {
		if nL == 1 {
			return 0
		}
		return float32(float64(d) / float64(nL-1))
	}
	for l, ls := range in.Layers {
		b := ls.Block
		if b.Depth != l {
			return nil, fmt.Errorf("tamiyo: BuildGraph: %w: layer %d has depth %d (layers must be in depth order, depth = index)", ErrGraph, l, b.Depth)
		}
		if b.Channels <= 0 {
			return nil, fmt.Errorf("tamiyo: BuildGraph: %w: layer %d has %d channels", ErrGraph, l, b.Channels)
		}
		for _, id := range b.Slots {
			i, ok := slotIndex[id]
			if !ok {
				return nil, fmt.Errorf("tamiyo: BuildGraph: %w: layer %d lists slot %q, which is not in the slot configuration %v", ErrGraph, l, id, ids)
			}
			if attached[i] != 0 {
				return nil, fmt.Errorf("tamiyo: BuildGraph: %w: slot %q is attached to layers %d and %d", ErrGraph, id, attached[i]-1, l)
			}
			attached[i] = l + 1
		}
		wn, wp, err := normFeature(ls.WeightNorm, "weight", l)
		if err != nil {
			return nil, err
		}
		gn, gp, err := normFeature(ls.GradNorm, "gradient", l)
		if err != nil {
			return nil, err
		}
		cov.Layer.Total += 2
		cov.Layer.Present += int(wp + gp)
		layerX = append(layerX,
			depthFrac(l),
			float32(leyline.Symlog(float64(b.Channels))/leyline.ObsLossScale),
			wn, wp, gn, gp)
	}
	g.Nodes[NodeLayer] = Nodes{Count: nL, Features: layerX, Graph: make([]int64, nL)}

	// Timeline order of the slots.
	order := make([]int, nS)
	if in.Timeline == nil {
		for i := range order {
			order[i] = i
		}
	} else {
		if len(in.Timeline) != nS {
			return nil, fmt.Errorf("tamiyo: BuildGraph: %w: timeline %v has %d slots, the slot configuration %d", ErrGraph, in.Timeline, len(in.Timeline), nS)
		}
		seen := make([]bool, nS)
		for t, id := range in.Timeline {
			i, ok := slotIndex[id]
			if !ok || seen[i] {
				return nil, fmt.Errorf("tamiyo: BuildGraph: %w: timeline %v is not a permutation of the slot configuration %v", ErrGraph, in.Timeline, ids)
			}
			seen[i] = true
			order[t] = i
		}
	}

	add := func(r Relation, src, dst int, attr ...float32) {
		e := &g.Edges[r]
		e.Src = append(e.Src, int64(src))
		e.Dst = append(e.Dst, int64(dst))
		e.Attr = append(e.Attr, attr...)
	}
	slotFeat := func(i, f int) float32 { return slotX[i*SlotFeatures+f] }
	for i := 0; i < nS; i++ {
		// [1, is_active, alpha]: how much of the slot reaches the host.
		active, alpha := slotFeat(i, 0), slotFeat(i, 11)
		add(RelGlobalToSlot, 0, i, 1, active, alpha)
		add(RelSlotToGlobal, i, 0, 1, active, alpha)
	}
	for l := 0; l < nL; l++ {
		add(RelGlobalToLayer, 0, l, 1, depthFrac(l), 0)
		add(RelLayerToGlobal, l, 0, 1, depthFrac(l), 0)
	}
	for t := 0; t+1 < nS; t++ {
		a, b := order[t], order[t+1]
		add(RelSlotNext, a, b, 1, 0, 0)
		add(RelSlotPrev, b, a, 1, 0, 0)
	}
	for i := 0; i < nS; i++ {
		cov.Attachment.Total++
		if attached[i] == 0 {
			continue
		}
		cov.Attachment.Present++
		l := attached[i] - 1
		alpha := slotFeat(i, 11)
		add(RelSlotToLayer, i, l, 1, depthFrac(l), alpha)
		add(RelLayerToSlot, l, i, 1, depthFrac(l), alpha)
	}
	for l := 0; l+1 < nL; l++ {
		add(RelLayerNext, l, l+1, 1, depthFrac(l), 0)
		add(RelLayerPrev, l+1, l, 1, depthFrac(l+1), 0)
	}
	return g, nil
}

// normFeature encodes an optional norm as (symlog(norm)/7, present).
// A negative or NaN norm is an error; +Inf encodes as unmeasured.
func normFeature(v *float64, what string, layer int) (val, present float32, err error) {
	if v == nil {
		return 0, 0, nil
	}
	x := *v
	if math.IsNaN(x) || x < 0 {
		return 0, 0, fmt.Errorf("tamiyo: BuildGraph: %w: layer %d %s norm is %g", ErrGraph, layer, what, x)
	}
	if math.IsInf(x, 1) {
		return 0, 0, nil
	}
	return float32(leyline.Symlog(x) / leyline.ObsLossScale), 1, nil
}

func finite(x float64) bool { return !math.IsNaN(x) && !math.IsInf(x, 0) }

// BuildGraphBatch builds one graph per input and batches them.
func BuildGraphBatch(inputs []GraphInput) (*Graph, error) {
	gs := make([]*Graph, len(inputs))
	for i, in := range inputs {
		g, err := BuildGraph(in)
		if err != nil {
			return nil, fmt.Errorf("env %d: %w", i, err)
		}
		gs[i] = g
	}
	return BatchGraphs(gs...)
}

// BatchGraphs concatenates graphs (each itself possibly a batch) into one:
// nodes are appended per type, edge indices shifted by the node counts
// before them and environment indices by the environments before them.
// Environments may have different slot and layer counts.
func BatchGraphs(gs ...*Graph) (*Graph, error) {
	if len(gs) == 0 {
		return nil, fmt.Errorf("tamiyo: BatchGraphs: %w: no graphs", ErrGraph)
	}
	out := &Graph{SlotStart: []int{0}}
	var nodeOff [NumNodeTypes]int
	for k, g := range gs {
		if g == nil || g.NumGraphs <= 0 || len(g.SlotStart) != g.NumGraphs+1 {
			return nil, fmt.Errorf("tamiyo: BatchGraphs: %w: graph %d is nil or malformed", ErrGraph, k)
		}
		graphOff := int64(out.NumGraphs)
		for t := range out.Nodes {
			src := g.Nodes[t]
			dst := &out.Nodes[t]
			dst.Count += src.Count
			dst.Features = append(dst.Features, src.Features...)
			for _, b := range src.Graph {
				dst.Graph = append(dst.Graph, b+graphOff)
			}
		}
		out.SlotBlueprints = append(out.SlotBlueprints, g.SlotBlueprints...)
		for _, s := range g.SlotStart[1:] {
			out.SlotStart = append(out.SlotStart, s+nodeOff[NodeSlot])
		}
		for r := range out.Edges {
			src, dst := g.Edges[r], &out.Edges[r]
			so, do := int64(nodeOff[Relation(r).Src()]), int64(nodeOff[Relation(r).Dst()])
			for i := range src.Src {
				dst.Src = append(dst.Src, src.Src[i]+so)
				dst.Dst = append(dst.Dst, src.Dst[i]+do)
			}
			dst.Attr = append(dst.Attr, src.Attr...)
		}
		out.Coverage = append(out.Coverage, g.Coverage...)
		out.NumGraphs += g.NumGraphs
		for t := range nodeOff {
			nodeOff[t] += g.Nodes[t].Count
		}
	}
	return out, nil
}

// Validate checks the graph's internal consistency: widths, index ranges,
// one global node per environment and at least one slot and one layer per
// environment. The policy calls it before every forward pass.
func (g *Graph) Validate() error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("tamiyo: Graph: %w: %s", ErrGraph, fmt.Sprintf(format, args...))
	}
	if g == nil || g.NumGraphs <= 0 {
		return bad("empty graph")
	}
	per := make([]int, g.NumGraphs) // each type's nodes per graph
	for t, n := range g.Nodes {
		if len(n.Features) != n.Count*NodeFeatureWidths[t] || len(n.Graph) != n.Count {
			return bad("%v nodes: %d nodes with %d features and %d graph ids (width %d)", NodeType(t), n.Count, len(n.Features), len(n.Graph), NodeFeatureWidths[t])
		}
		clear(per)
		for _, b := range n.Graph {
			if b < 0 || int(b) >= g.NumGraphs {
				return bad("%v node in graph %d of %d", NodeType(t), b, g.NumGraphs)
			}
			per[b]++
		}
		for b, c := range per {
			switch {
			case NodeType(t) == NodeGlobal && c != 1:
				return bad("graph %d has %d global nodes (want 1)", b, c)
			case c == 0:
				return bad("graph %d has no %v nodes", b, NodeType(t))
			}
		}
	}
	for i, b := range g.Nodes[NodeGlobal].Graph {
		if int(b) != i {
			return bad("global node %d belongs to graph %d (global nodes must be in graph order)", i, b)
		}
	}
	if len(g.SlotStart) != g.NumGraphs+1 || g.SlotStart[0] != 0 || g.SlotStart[g.NumGraphs] != g.Nodes[NodeSlot].Count {
		return bad("slot starts %v do not partition %d slot nodes", g.SlotStart, g.Nodes[NodeSlot].Count)
	}
	for b := 0; b < g.NumGraphs; b++ {
		for s := g.SlotStart[b]; s < g.SlotStart[b+1]; s++ {
			if g.Nodes[NodeSlot].Graph[s] != int64(b) {
				return bad("slot node %d is in graph %d, but slot starts place it in graph %d", s, g.Nodes[NodeSlot].Graph[s], b)
			}
		}
	}
	if len(g.SlotBlueprints) != g.Nodes[NodeSlot].Count {
		return bad("%d slot blueprints for %d slot nodes", len(g.SlotBlueprints), g.Nodes[NodeSlot].Count)
	}
	for i, bp := range g.SlotBlueprints {
		if bp < 0 || bp > leyline.BlueprintNullIndex {
			return bad("slot node %d has blueprint row %d (want 0…%d)", i, bp, leyline.BlueprintNullIndex)
		}
	}
	for r, e := range g.Edges {
		rel := Relation(r)
		// The graph ids' lengths are the node counts (checked above). The
		// slices are hoisted so that the loop's only checks are its own
		// (W2's batch of 64 graphs validates on every forward).
		srcG, dstG := g.Nodes[rel.Src()].Graph, g.Nodes[rel.Dst()].Graph
		if len(e.Dst) != len(e.Src) || len(e.Attr) != len(e.Src)*EdgeFeatures {
			return bad("relation %v: %d sources, %d destinations, %d attributes", rel, len(e.Src), len(e.Dst), len(e.Attr))
		}
		src, dst := e.Src, e.Dst[:len(e.Src)]
		for i, s64 := range src {
			s, d := int(s64), int(dst[i])
			// Unsigned: a negative index is a large one, and the compiler
			// drops the bounds checks below.
			if uint(s) >= uint(len(srcG)) || uint(d) >= uint(len(dstG)) || int64(s) != s64 || int64(d) != dst[i] {
				return bad("relation %v edge %d (%d→%d) outside %d×%d nodes", rel, i, s64, dst[i], len(srcG), len(dstG))
			}
			if srcG[s] != dstG[d] {
				return bad("relation %v edge %d joins two environments", rel, i)
			}
		}
	}
	return nil
}
