package tamiyo

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"

	"github.com/esper-go/esper/autograd"
	"github.com/esper-go/esper/kernels"
	"github.com/esper-go/esper/leyline"
	"github.com/esper-go/esper/nn"
	"github.com/esper-go/esper/tensor"
)

// Policy architecture defaults (ESPER.md §Tamiyo; G1 TamiyoGNN, the final
// 256/128/4 configuration of esper-reference.md §4.3).
const (
	// DefaultHidden is the encoders' and GraphSAGE layers' width.
	DefaultHidden = 256 // G1 TamiyoGNN sage hidden
	// DefaultGATHidden is the GAT layers' width (per head; heads are
	// averaged, not concatenated).
	DefaultGATHidden = 128 // G1 TamiyoGNN gat hidden
	// DefaultGATHeads is the number of attention heads.
	DefaultGATHeads = 4 // G1 TamiyoGNN gat heads
	// DefaultHeadHidden is the hidden width of the action, pointer and
	// value heads.
	DefaultHeadHidden = 128
	// DefaultDropout is the dropout after every message-passing layer in
	// training mode.
	DefaultDropout = 0.2 // G1 TamiyoGNN dropout
	// gatNegativeSlope is the LeakyReLU slope of the attention logits
	// (PyG GATConv default).
	gatNegativeSlope = 0.2
	// headOutputGain and valueOutputGain scale the orthogonal init of the
	// last layer of the action heads and of the value head (G2 init).
	headOutputGain  = 0.01 // G2 action-head output gain
	valueOutputGain = 0.1  // G2 value output gain
)

// PolicyOptions configure NewPolicy. The zero value gives the defaults.
type PolicyOptions struct {
	// Hidden is the width of the node encoders and of the two GraphSAGE
	// layers (default DefaultHidden, 256).
	Hidden int
	// GATHidden is the width of the two GAT layers (default
	// DefaultGATHidden, 128).
	GATHidden int
	// GATHeads is the number of attention heads (default
	// DefaultGATHeads, 4).
	GATHeads int
	// HeadHidden is the hidden width of every head (default
	// DefaultHeadHidden, 128).
	HeadHidden int
	// BlueprintEmbedding is the width of the learned per-slot blueprint
	// embedding (default leyline.BlueprintEmbeddingDim, 4).
	BlueprintEmbedding int
	// Dropout is the dropout probability after each message-passing
	// layer in training mode (default DefaultDropout, 0.2); NoDropout
	// turns it off.
	Dropout   float64
	NoDropout bool
	// Seed seeds the initial weights and the dropout masks.
	Seed uint64
	// DType of the parameters (default F32; F64 for gradient checks).
	DType tensor.DType
	// Device the policy is built on (default the CPU): its weights are
	// initialised on the host, exactly as for the CPU, and moved there.
	// A policy checkpoint does not record it; LoadPolicy loads onto the
	// device its options name.
	Device tensor.Device
}

// MaxPolicyWidth bounds every width of PolicyOptions (Hidden, GATHidden,
// HeadHidden, BlueprintEmbedding) and the product GATHeads × GATHidden: a
// policy 256 times the default's widths, far beyond what a controller
// needs, and small enough that no size computed from the options
// overflows. Options above it are refused before anything is allocated.
const MaxPolicyWidth = 1 << 16

// ErrPolicyOptions is wrapped by NewPolicy's errors.
var ErrPolicyOptions = errors.New("invalid policy options")

func (o PolicyOptions) withDefaults() (PolicyOptions, error) {
	def := func(v *int, d int) {
		if *v == 0 {
			*v = d
		}
	}
	def(&o.Hidden, DefaultHidden)
	def(&o.GATHidden, DefaultGATHidden)
	def(&o.GATHeads, DefaultGATHeads)
	def(&o.HeadHidden, DefaultHeadHidden)
	def(&o.BlueprintEmbedding, leyline.BlueprintEmbeddingDim)
	if o.Dropout == 0 && !o.NoDropout {
		o.Dropout = DefaultDropout
	}
	if o.NoDropout {
		o.Dropout = 0
	}
	if o.DType == tensor.Invalid {
		o.DType = tensor.F32
	}
	switch {
	case o.Hidden < 0 || o.GATHidden < 0 || o.GATHeads < 0 || o.HeadHidden < 0 || o.BlueprintEmbedding < 0:
		return o, fmt.Errorf("tamiyo: NewPolicy: %w: negative width (%+v)", ErrPolicyOptions, o)
	case o.Hidden > MaxPolicyWidth || o.GATHidden > MaxPolicyWidth || o.HeadHidden > MaxPolicyWidth ||
		o.BlueprintEmbedding > MaxPolicyWidth:
		return o, fmt.Errorf("tamiyo: NewPolicy: %w: a width above %d (hidden %d, gat_hidden %d, head_hidden %d, blueprint_embedding %d)",
			ErrPolicyOptions, MaxPolicyWidth, o.Hidden, o.GATHidden, o.HeadHidden, o.BlueprintEmbedding)
	case o.GATHeads > MaxPolicyWidth/o.GATHidden:
		return o, fmt.Errorf("tamiyo: NewPolicy: %w: gat_heads %d × gat_hidden %d is above %d",
			ErrPolicyOptions, o.GATHeads, o.GATHidden, MaxPolicyWidth)
	case !(o.Dropout >= 0 && o.Dropout < 1):
		return o, fmt.Errorf("tamiyo: NewPolicy: %w: dropout %v outside [0, 1)", ErrPolicyOptions, o.Dropout)
	case !o.DType.IsFloat():
		return o, fmt.Errorf("tamiyo: NewPolicy: %w: dtype %v is not floating point", ErrPolicyOptions, o.DType)
	}
	return o, nil
}

// group is a bag of named sub-modules: it gives hierarchical parameter
// names ("sage1.slot_next_slot.lin_l.weight") to parts of the policy that
// are not functions of a single tensor.
type group struct{ nn.Composite }

// Forward is never called: the policy calls its parts' own methods.
func (*group) Forward(*autograd.Var) *autograd.Var {
	panic("tamiyo: a policy parameter group has no single-tensor Forward")
}

// encoder is Linear → GELU → LayerNorm, one per node type.
type encoder struct {
	group
	lin  *nn.Linear
	norm *nn.LayerNorm
}

// call is the encoder over x as autograd.LinearActLayerNorms takes it:
// the product, GELU and the layer norm, in one launch in inference on a
// GPU; the ops with gradients.
func (e *encoder) call(x *autograd.Var) autograd.LinearActLayerNormCall {
	return autograd.LinearActLayerNormCall{X: x, W: e.lin.Weight, B: e.lin.Bias, Act: kernels.GeluErf, G: e.norm.Weight, S: e.norm.Bias, Eps: e.norm.Options().Eps}
}

// mlp is Linear → ReLU → Linear.
type mlp struct {
	group
	fc1, fc2 *nn.Linear
}

// reluHead is m as autograd.ReluHeads and ReluHeadGroups take it (a
// head alone there is fc1 with its ReLU, then fc2: autograd.LinearRelu,
// then autograd.Linear).
func (m *mlp) reluHead() autograd.ReluHead {
	return autograd.ReluHead{W1: m.fc1.Weight, B1: m.fc1.Bias, W2: m.fc2.Weight, B2: m.fc2.Bias}
}

// Policy is Tamiyo's learned controller network (ESPER.md §Tamiyo): a
// 4-layer heterogeneous graph network over a batched Graph with the
// factored action heads and a value head.
//
//   - Per-type encoders Linear → GELU → LayerNorm (Hidden); slot nodes
//     read their features with a learned blueprint embedding appended.
//   - Two GraphSAGE layers (Hidden) and two GAT layers (GATHidden,
//     GATHeads heads averaged, edge-attribute-aware attention normalised
//     over each node's incoming edges), each a convolution per relation
//     with the relations into a node type averaged; after each layer GELU,
//     a residual where the widths match, and dropout in training mode.
//   - Heads op, blueprint, style, tempo, alpha_target, alpha_speed and
//     alpha_curve read the global node's embedding concatenated with the
//     mean slot embedding; the slot head is a pointer: a score per slot
//     node from its embedding and its global node's, so the same weights
//     serve any number of slots; the value V(s) reads the global
//     embedding alone.
//
// Forward gives the raw outputs; Act samples actions and Evaluate
// recomputes log-probabilities and entropies for PPO. Parameters and
// NamedParameters list the weights for an optimizer or a checkpoint.
type Policy struct {
	nn.Composite
	opts    PolicyOptions
	enc     [NumNodeTypes]*encoder
	bpEmbed *nn.Embedding
	sage    [2]*sageLayer
	gat     [2]*gatLayer
	drop    [4]*nn.Dropout
	heads   [leyline.NumActionHeads]*mlp // heads[HeadSlot] is the pointer
	value   *mlp
}

// NewPolicy builds a policy with freshly initialised weights: encoders
// Xavier-uniform (G1), GraphSAGE layers as PyTorch's Linear, GAT
// projections and attention vectors Glorot-uniform with zero bias, heads
// orthogonal (gain √2, output layers 0.01, value output 0.1) with zero
// biases (G2).
func NewPolicy(o PolicyOptions) (*Policy, error) {
	o, err := o.withDefaults()
	if err != nil {
		return nil, err
	}
	rng := tensor.NewRNG(o.Seed)
	p := &Policy{opts: o}
	dt := o.DType
	lin := func(in, out int, bias bool) *nn.Linear {
		return nn.MustLinear(rng, nn.LinearOptions{In: in, Out: out, NoBias: !bias, DType: dt})
	}

	encs := &group{}
	inWidths := NodeFeatureWidths
	inWidths[NodeSlot] += o.BlueprintEmbedding
	for t := range p.enc {
		e := &encoder{lin: lin(inWidths[t], o.Hidden, true), norm: nn.MustLayerNorm(nn.LayerNormOptions{Shape: []int{o.Hidden}, DType: dt})}
		nn.XavierUniform(rng, e.lin.Weight.Value, 1)
		nn.Zeros(e.lin.Bias.Value)
		e.Register("lin", e.lin)
		e.Register("norm", e.norm)
		p.enc[t] = e
		encs.Register(NodeType(t).String(), e)
	}
	p.Register("encoders", encs)
	p.bpEmbed = nn.MustEmbedding(rng, nn.EmbeddingOptions{Num: leyline.BlueprintNullIndex + 1, Dim: o.BlueprintEmbedding, DType: dt})
	p.Register("blueprint_embedding", p.bpEmbed)

	p.sage[0] = newSAGELayer(rng, o.Hidden, o.Hidden, dt)
	p.sage[1] = newSAGELayer(rng, o.Hidden, o.Hidden, dt)
	p.gat[0] = newGATLayer(rng, o.Hidden, o.GATHidden, o.GATHeads, dt)
	p.gat[1] = newGATLayer(rng, o.GATHidden, o.GATHidden, o.GATHeads, dt)
	p.Register("sage1", p.sage[0])
	p.Register("sage2", p.sage[1])
	p.Register("gat1", p.gat[0])
	p.Register("gat2", p.gat[1])
	for i := range p.drop {
		p.drop[i] = nn.MustDropout(nn.DropoutOptions{P: o.Dropout, Seed: o.Seed*8 + uint64(i) + 1})
		// Registered so that SetTraining reaches them; they hold no
		// parameters.
		p.Register(fmt.Sprintf("dropout%d", i+1), p.drop[i])
	}

	newHead := func(in, out int, gain float64) *mlp {
		m := &mlp{fc1: lin(in, o.HeadHidden, true), fc2: lin(o.HeadHidden, out, true)}
		nn.Orthogonal(rng, m.fc1.Weight.Value, math.Sqrt2)
		nn.Zeros(m.fc1.Bias.Value)
		nn.Orthogonal(rng, m.fc2.Weight.Value, gain)
		nn.Zeros(m.fc2.Bias.Value)
		m.Register("fc1", m.fc1)
		m.Register("fc2", m.fc2)
		return m
	}
	c := o.GATHidden
	sizes := leyline.HeadSizes(1)
	for h := range p.heads {
		out := sizes[h]
		if h == leyline.HeadSlot {
			out = 1 // one score per slot node
		}
		p.heads[h] = newHead(2*c, out, headOutputGain)
		p.Register("head_"+leyline.HeadNames[h], p.heads[h])
	}
	p.value = newHead(c, 1, valueOutputGain)
	p.Register("value", p.value)
	if !o.Device.IsCPU() {
		if err := p.To(o.Device); err != nil {
			return nil, fmt.Errorf("tamiyo: NewPolicy: %w", err)
		}
	}
	return p, nil
}

// ParameterCount returns the number of parameters (elements of every
// parameter tensor) of the policy NewPolicy builds with o, without
// building it; o must have passed withDefaults, so that no term
// overflows. A policy file's header is checked against its tensors with
// it before anything is allocated.
func ParameterCount(o PolicyOptions) (int64, error) {
	o, err := o.withDefaults()
	if err != nil {
		return 0, err
	}
	h, c, hh, e := int64(o.Hidden), int64(o.GATHidden), int64(o.HeadHidden), int64(o.BlueprintEmbedding)
	hc := int64(o.GATHeads) * c
	var n int64
	for t, w := range NodeFeatureWidths { // encoders: Linear(in, H) and LayerNorm(H)
		in := int64(w)
		if NodeType(t) == NodeSlot {
			in += e
		}
		n += in*h + h + 2*h
	}
	n += (leyline.BlueprintNullIndex + 1) * e
	n += 2 * NumRelations * (2*h*h + h) // two SAGE layers: lin_l with bias, lin_r without
	gat := func(in int64) int64 {       // lin_src, lin_dst, lin_edge, three attention vectors, bias
		return NumRelations * ((2*in+EdgeFeatures+3)*hc + c)
	}
	n += gat(h) + gat(c)
	head := func(in, out int64) int64 { return in*hh + hh + hh*out + out }
	for i, size := range leyline.HeadSizes(1) {
		out := int64(size)
		if i == leyline.HeadSlot {
			out = 1
		}
		n += head(2*c, out)
	}
	n += head(c, 1)
	return n, nil
}

// Options returns the options the policy was built with (defaults
// filled), Device saying where the policy is now.
func (p *Policy) Options() PolicyOptions {
	o := p.opts
	o.Device = p.Device()
	return o
}

// Device returns the device of the policy's parameters: where it
// computes, and where Run and Evaluate return their tensors.
func (p *Policy) Device() tensor.Device { return p.bpEmbed.Weight.Value.Device() }

// To moves the policy to dev in place (nn.To: its parameters, which
// keep their identity, and their gradients dropped) together with its
// dropout layers' random states, so that training-mode dropout draws the
// same masks there. Build optimizers after moving. Moving with nn.To
// alone works too (the dropout states follow the parameters at the next
// call), except for a policy laid out on a GPU (below), whose stacked
// weights nn.To refuses as views: move that one with To.
//
// On a launch-bound device (a GPU: kernels.LaunchBounder) the weights of
// the message-passing layers are then laid out in the order their joined
// products stack them (layOutStacks), so that inference reads each stack
// in place instead of copying the weights into it at every forward:
// those weights keep their Vars, but their Values are new tensors (views
// of one tensor per stack), so hold the Vars, not their Values, across a
// move.
func (p *Policy) To(dev tensor.Device) error {
	if dev != p.Device() {
		if err := p.unstack(); err != nil {
			return fmt.Errorf("tamiyo: Policy.To: %w", err)
		}
	}
	if err := nn.To(p, dev); err != nil {
		return fmt.Errorf("tamiyo: Policy.To: %w", err)
	}
	if _, err := p.followDevice(); err != nil {
		return fmt.Errorf("tamiyo: Policy.To: %w", err)
	}
	if stackOn(dev) {
		if err := p.layOutStacks(); err != nil {
			return fmt.Errorf("tamiyo: Policy.To: %w", err)
		}
	}
	return nil
}

// followDevice returns the policy's device after moving any dropout
// state that is elsewhere (left behind by an nn.To) there: the dropout
// kernel takes its state on its input's device.
func (p *Policy) followDevice() (tensor.Device, error) {
	dev := p.Device()
	for _, d := range p.drop {
		if err := d.State().Relocate(dev); err != nil {
			return dev, fmt.Errorf("moving a dropout state to %v: %w", dev, err)
		}
	}
	return dev, nil
}

// Forward is not the policy's entry point (it reads a Graph, not a
// tensor); it panics. Use Run, Act or Evaluate.
func (p *Policy) Forward(*autograd.Var) *autograd.Var {
	panic("tamiyo: Policy.Forward takes no tensor; call Run, Act or Evaluate with a Graph")
}

// PolicyOutput holds the raw outputs of Run for a batch of B environments.
type PolicyOutput struct {
	// Logits are the unmasked logits per head in HeadNames order, each
	// [B, size]. The slot head's are [B, MaxSlots]: row b holds
	// environment b's slot scores in slot-head order, then zeros for the
	// positions beyond its slot count.
	Logits [leyline.NumActionHeads]*autograd.Var
	// SlotScores are the pointer scores of every slot node, [S].
	SlotScores *autograd.Var
	// Value is V(s) per environment, [B].
	Value *autograd.Var
	// Embeddings are the final node embeddings per type, [N, GATHidden].
	Embeddings [NumNodeTypes]*autograd.Var
	// joined, when the heads' launch wrote it (inference on a GPU, every
	// graph of maxSlots slots), is Logits in head order then Value as one
	// column, side by side: joinRows of logitRows, as readJoined reads it.
	joined *autograd.Var
}

// graphTensors is a Graph as tensors of the policy's dtype on its
// device.
type graphTensors struct {
	b, maxSlots int
	n           [NumNodeTypes]int
	x           [NumNodeTypes]*autograd.Var // xt wrapped (wrap)
	xt          [NumNodeTypes]*tensor.Tensor
	bp          *tensor.Tensor // [S] I64 embedding rows
	slotGraph   *tensor.Tensor // [S] I64
	slotPad     *tensor.Tensor // [B·maxSlots] I64 into scores ⊕ [0]
	zero        *tensor.Tensor // [1]: the slot logits' padding
	// The CSRs of the gathers by slot node (autograd.GatherConcat): iota
	// [S] (0, 1, …), unitRowPtr [S+1] (one edge per slot node) and
	// slotRowPtr [B+1] (the graphs' slot nodes, Graph.SlotStart).
	iota, unitRowPtr, slotRowPtr *tensor.Tensor
	// Per relation (zero-length for a relation without edges), its
	// edges sorted by destination (newGraphTensors), and rowPtr grouping
	// them (kernels.BuildCSR), for the fused aggregations: their order
	// is the identity, given to the kernels as nil.
	src, dst, rowPtr [NumRelations]*tensor.Tensor
	attr             [NumRelations]*autograd.Var // attrT wrapped (wrap)
	attrT            [NumRelations]*tensor.Tensor
	edges            [NumRelations]int
	// joinInto, when set (Inference, on a device), is where the heads'
	// launch writes the joined outputs (autograd.ReluHeadGroupsJoinedInto:
	// a mapped tensor the host reads without a device-to-host copy); it
	// is used only when its shape and device are the joined output's. Not a graph
	// input: a captured forward writes the one it was captured with.
	joinInto *tensor.Tensor
}

// bpEdges picks each slot node's blueprint embedding row (one edge per
// slot node, from row bp[s]).
func (gt *graphTensors) bpEdges() *autograd.GraphEdges {
	return &autograd.GraphEdges{Src: gt.bp, Dst: gt.iota, RowPtr: gt.unitRowPtr, NumDst: gt.n[NodeSlot]}
}

// globEdges picks each slot node's global node (one edge per slot node,
// from its graph's).
func (gt *graphTensors) globEdges() *autograd.GraphEdges {
	return &autograd.GraphEdges{Src: gt.slotGraph, Dst: gt.iota, RowPtr: gt.unitRowPtr, NumDst: gt.n[NodeSlot]}
}

// slotMeanEdges average each graph's slot nodes (edges s → slotGraph[s]).
func (gt *graphTensors) slotMeanEdges() *autograd.GraphEdges {
	return &autograd.GraphEdges{Src: gt.iota, Dst: gt.slotGraph, RowPtr: gt.slotRowPtr, NumDst: gt.b}
}

// relEdges returns relation r's edges for autograd's graph ops.
func (gt *graphTensors) relEdges(r Relation) autograd.GraphEdges {
	return autograd.GraphEdges{Src: gt.src[r], Dst: gt.dst[r], RowPtr: gt.rowPtr[r], NumDst: gt.n[r.Dst()]}
}

func floatTensor(dt tensor.DType, v []float32, shape ...int) *tensor.Tensor {
	if dt == tensor.F32 {
		return tensor.FromSlice(v, shape...) // a copy
	}
	f := make([]float64, len(v))
	for i, x := range v {
		f[i] = float64(x)
	}
	return tensor.FromFloat64s(dt, f, shape...)
}

func (p *Policy) tensors(g *Graph) (*graphTensors, error) {
	dev, err := p.followDevice()
	if err != nil {
		return nil, err
	}
	return newGraphTensors(g, p.opts.DType, dev, nil)
}

// newGraphTensors is stageGraph, its features and attributes wrapped
// for Policy.run (graphTensors.wrap).
func newGraphTensors(g *Graph, dt tensor.DType, dev tensor.Device, reuse *stagingBuffers) (*graphTensors, error) {
	gt, err := stageGraph(g, dt, dev, reuse)
	if err != nil {
		return nil, err
	}
	return gt.wrap(), nil
}

// stageGraph converts a validated graph to tensors of dtype dt on
// dev. On a device the float tensors (node features, edge attributes,
// the padding zero) are views of one buffer and the index tensors views
// of another, each filled on the host and copied once (staging); on the
// CPU each tensor is built on its own.
func stageGraph(g *Graph, dt tensor.DType, dev tensor.Device, reuse *stagingBuffers) (*graphTensors, error) {
	var st *staging // copies the graph's slices, never aliases them
	if reuse != nil {
		st = reuse.staging(dev, dt)
	} else {
		st = newStaging(dev, dt)
	}
	gt := &graphTensors{b: g.NumGraphs, maxSlots: g.MaxSlots()}
	var x [NumNodeTypes]*tensor.Tensor
	for t := range x {
		n := g.Nodes[t]
		gt.n[t] = n.Count
		st.float32s(&x[t], n.Features, n.Count, NodeFeatureWidths[t])
	}
	st.int64s(&gt.bp, g.SlotBlueprints, len(g.SlotBlueprints))
	st.int64s(&gt.slotGraph, g.Nodes[NodeSlot].Graph, len(g.Nodes[NodeSlot].Graph))
	nSlots := g.Nodes[NodeSlot].Count
	var scratch *[3][]int64 // iota, slotRowPtr and pad: reuse's, or new
	if reuse != nil {
		scratch = &reuse.scratch
	} else {
		scratch = new([3][]int64)
	}
	iota := grown(&scratch[0], nSlots+1) // 0 … S: the order and unit row pointers
	for i := range iota {
		iota[i] = int64(i)
	}
	slotRowPtr := grown(&scratch[1], len(g.SlotStart))
	for i, v := range g.SlotStart {
		slotRowPtr[i] = int64(v)
	}
	st.int64s(&gt.iota, iota[:nSlots], nSlots)
	st.int64s(&gt.unitRowPtr, iota, nSlots+1)
	st.int64s(&gt.slotRowPtr, slotRowPtr, len(slotRowPtr))
	pad := grown(&scratch[2], gt.b*gt.maxSlots)
	s := int64(g.Nodes[NodeSlot].Count) // the appended zero
	for b := 0; b < gt.b; b++ {
		for i := 0; i < gt.maxSlots; i++ {
			if i < g.NumSlots(b) {
				pad[b*gt.maxSlots+i] = int64(g.SlotStart[b] + i)
			} else {
				pad[b*gt.maxSlots+i] = s
			}
		}
	}
	st.int64s(&gt.slotPad, pad, len(pad))
	st.full(&gt.zero, 0, 1)
	var attr [NumRelations]*tensor.Tensor
	for r, e := range g.Edges {
		gt.edges[r] = e.Len()
		rowPtr, order, sorted, err := reuse.csr(r, e.Dst, g.Nodes[Relation(r).Dst()].Count)
		if err != nil { // Validate has checked every destination
			return nil, fmt.Errorf("tamiyo: relation %v: %w", Relation(r), err)
		}
		// The edges go to the device sorted by destination, so that the
		// CSR needs no order (kernels.GraphAggregator: a device reads
		// each edge's source one load sooner). BuildGraph's edges are
		// sorted already; others are sorted here, stably, which leaves
		// every sum over a node's edges as it was.
		src, dst, at := e.Src, e.Dst, e.Attr
		if !sorted {
			var sc *sortedScratch
			if reuse != nil {
				sc = &reuse.sorted[r]
			}
			src, dst, at = sortedEdges(sc, order, e.Src, e.Dst, e.Attr, EdgeFeatures)
		}
		st.int64s(&gt.src[r], src, e.Len())
		st.int64s(&gt.dst[r], dst, e.Len())
		st.int64s(&gt.rowPtr[r], rowPtr, len(rowPtr))
		st.float32s(&attr[r], at, e.Len(), EdgeFeatures)
	}
	if err := st.upload(); err != nil {
		return nil, err
	}
	gt.xt, gt.attrT = x, attr
	return gt, nil
}

// wrap makes the node features and edge attributes the graph ops' inputs
// (autograd constants), as Policy.run reads them.
func (gt *graphTensors) wrap() *graphTensors {
	for t := range gt.xt {
		gt.x[t] = autograd.Const(gt.xt[t])
	}
	for r := range gt.attrT {
		if gt.attrT[r] != nil {
			gt.attr[r] = autograd.Const(gt.attrT[r])
		}
	}
	return gt
}

// grown returns (*buf)[:n], growing *buf first if it is shorter: a
// scratch slice reused across calls (its old values are overwritten by
// the caller).
func grown(buf *[]int64, n int) []int64 {
	if cap(*buf) < n {
		*buf = make([]int64, n)
	}
	*buf = (*buf)[:n]
	return *buf
}

// Run checks g and computes the network's raw outputs for its B
// environments, recording gradients when grad mode is on. Dropout is
// active in training mode (the default for a new policy; call
// SetTraining(false) for inference). The outputs are on the policy's
// device; the graph gets there in two copies (its float and its index
// tensors).
func (p *Policy) Run(g *Graph) (*PolicyOutput, error) {
	if err := g.Validate(); err != nil {
		return nil, err
	}
	gt, err := p.tensors(g)
	if err != nil {
		return nil, err
	}
	return p.run(gt), nil
}

func (p *Policy) run(gt *graphTensors) *PolicyOutput {
	// Encoders: every type's (autograd.LinearActLayerNorms: one launch
	// for the three in inference on a GPU), the slots' input their
	// features beside their blueprint embedding, gathered in that launch.
	var h [NumNodeTypes]*autograd.Var
	encs := make([]autograd.LinearActLayerNormCall, NumNodeTypes)
	for t := range encs {
		encs[t] = p.enc[t].call(gt.x[t])
		if NodeType(t) == NodeSlot {
			// Read inside the encoders' launch on a GPU, never stored.
			encs[t].X, encs[t].Pieces = nil, []autograd.GatherPiece{{X: gt.x[t]}, {X: p.bpEmbed.Weight, Edges: gt.bpEdges(),
				Unfused: func() *autograd.Var { return autograd.Embedding(p.bpEmbed.Weight, gt.bp) }}}
		}
	}
	copy(h[:], autograd.LinearActLayerNorms(encs))
	// Message passing: after each layer GELU of its output at the layer's
	// scale (the SAGE mean over relations), the residual where widths
	// match, dropout. Each layer applies the activation and residual
	// itself: SAGE in its sums' launch where it joins them
	// (autograd.LinearSumsAct), GAT in its aggregation's launch
	// (autograd.GATMeanAct).
	type layer = func([NumNodeTypes]*autograd.Var) [NumNodeTypes]*autograd.Var
	layers := []layer{
		func(h [NumNodeTypes]*autograd.Var) [NumNodeTypes]*autograd.Var { return p.sage[0].forward(h, gt) },
		func(h [NumNodeTypes]*autograd.Var) [NumNodeTypes]*autograd.Var { return p.sage[1].forward(h, gt) },
		func(h [NumNodeTypes]*autograd.Var) [NumNodeTypes]*autograd.Var { return p.gat[0].forward(h, gt) },
		func(h [NumNodeTypes]*autograd.Var) [NumNodeTypes]*autograd.Var { return p.gat[1].forward(h, gt) },
	}
	for i, layer := range layers {
		out := layer(h)
		for t := range out {
			h[t] = p.drop[i].Forward(out[t])
		}
	}

	res := &PolicyOutput{Embeddings: h}
	glob := h[NodeGlobal] // one global node per environment, in order
	// The heads' context: the global embedding and the mean of the slot
	// embeddings per graph; the slot pointer's input: each slot's
	// embedding beside its graph's global one. Both are gathered inside
	// the heads' launch in inference on a GPU, never stored; elsewhere
	// each is a GatherConcat (one launch in inference).
	slots := h[NodeSlot]
	ctx := []autograd.GatherPiece{{X: glob}, {X: slots, Edges: gt.slotMeanEdges(),
		Unfused: func() *autograd.Var { return autograd.SegmentMean(slots, gt.slotGraph, gt.b) }}}
	ptrIn := []autograd.GatherPiece{{X: slots}, {X: glob, Edges: gt.globEdges(),
		Unfused: func() *autograd.Var { return autograd.IndexSelect(glob, 0, gt.slotGraph) }}}
	// Every head — the seven on the context, the pointer on ptrIn, the
	// value on the global embedding — in one launch in inference on a
	// GPU (autograd.ReluHeadGroups); ReluHeads per input elsewhere. When
	// every graph has maxSlots slots, that launch also writes the logits
	// and the value side by side (res.joined), as a host reads them.
	groups := []autograd.ReluHeadGroup{{Pieces: ctx, Heads: p.contextHeads()},
		{Pieces: ptrIn, Heads: []autograd.ReluHead{p.heads[leyline.HeadSlot].reluHead()}}, {X: glob, Heads: []autograd.ReluHead{p.value.reluHead()}}}
	var cols []autograd.HeadColumn
	if gt.n[NodeSlot] == gt.b*gt.maxSlots && gt.b > 0 {
		cols = joinedColumns(gt.maxSlots)
	}
	var into *tensor.Tensor
	if cols != nil && gt.joinInto != nil && gt.joinInto.Device() == glob.Value.Device() &&
		slices.Equal(gt.joinInto.Shape(), []int{gt.b, p.joinedWidth(gt.maxSlots)}) {
		into = gt.joinInto
	}
	heads, joined := autograd.ReluHeadGroupsJoinedInto(groups, cols, into)
	res.joined = joined
	ctxOut := heads[0]
	for hd := range p.heads {
		if hd != leyline.HeadSlot {
			res.Logits[hd], ctxOut = ctxOut[0], ctxOut[1:]
		}
	}
	scores := autograd.Reshape(heads[1][0], gt.n[NodeSlot])
	res.SlotScores = scores
	// The slot logits [B, maxSlots], a graph's missing slots 0. When
	// every graph has maxSlots slots (known from the shapes alone, so a
	// captured forward replays it for any such graph) the padding is the
	// identity, and the scores are the logits as they stand.
	padded := scores
	if gt.n[NodeSlot] != gt.b*gt.maxSlots {
		zero := autograd.Const(gt.zero)
		padded = autograd.IndexSelect(autograd.Concat([]*autograd.Var{scores, zero}, 0), 0, gt.slotPad)
	}
	res.Logits[leyline.HeadSlot] = autograd.Reshape(padded, gt.b, gt.maxSlots)
	res.Value = autograd.Reshape(heads[2][0], gt.b)
	return res
}

// sageLayer is a heterogeneous GraphSAGE layer: per relation
// lin_l(mean of the sources' features over incoming edges) +
// lin_r(destination features) (PyG SAGEConv, mean aggregation, root
// weight, bias on lin_l only).
type sageLayer struct {
	group
	linL, linR [NumRelations]*nn.Linear
}

func newSAGELayer(rng *rand.Rand, in, out int, dt tensor.DType) *sageLayer {
	l := &sageLayer{}
	for r := range l.linL {
		rel := &group{}
		l.linL[r] = nn.MustLinear(rng, nn.LinearOptions{In: in, Out: out, DType: dt})
		l.linR[r] = nn.MustLinear(rng, nn.LinearOptions{In: in, Out: out, NoBias: true, DType: dt})
		rel.Register("lin_l", l.linL[r])
		rel.Register("lin_r", l.linR[r])
		l.Register(Relation(r).String(), rel)
	}
	return l
}

// forward returns, per destination type, GELU of the mean over the
// relations into it of lin_l(mean of the sources) + lin_r(destination),
// plus the input where the widths match (the layer's activation and
// residual). autograd.LinearSumsAct computes it: in inference on a GPU
// each type's features go through every weight that reads them in one
// product and each type's relations are summed after it, with the
// activation and residual, in one launch; elsewhere the sums are
// autograd.LinearSums (the products added in place in inference) and the
// activation autograd.ScaleActAdd.
func (l *sageLayer) forward(x [NumNodeTypes]*autograd.Var, gt *graphTensors) [NumNodeTypes]*autograd.Var {
	terms, rels := l.terms(x, func(rel Relation) *autograd.GraphEdges {
		if gt.edges[rel] == 0 {
			return nil
		}
		e := gt.relEdges(rel)
		return &e
	})
	scales := make([]float64, NumNodeTypes)
	res := make([]*autograd.Var, NumNodeTypes)
	for t := range terms {
		scales[t] = 1
		if rels[t] > 1 {
			scales[t] = 1 / float64(rels[t])
		}
		res[t] = residual([]int{x[t].Shape()[0], l.linL[0].Weight.Shape()[0]}, x[t])
	}
	var out [NumNodeTypes]*autograd.Var
	copy(out[:], autograd.LinearSumsAct(terms[:], scales, kernels.GeluErf, res))
	return out
}

// terms returns the layer's sums per destination type (LinearSumsAct's
// term lists) and how many relations enter each: per relation into the
// type, in relation order, lin_l over the mean of the sources along the
// relation's edges (edges(rel); nil: none) and lin_r of the destination
// — or, without edges, lin_r with lin_l's bias alone (the mean is 0).
func (l *sageLayer) terms(x [NumNodeTypes]*autograd.Var, edges func(Relation) *autograd.GraphEdges) (terms [NumNodeTypes][]autograd.LinearTerm, rels [NumNodeTypes]int) {
	for r := range l.linL {
		rel := Relation(r)
		t := rel.Dst()
		rels[t]++
		e := edges(rel)
		if e == nil {
			terms[t] = append(terms[t], autograd.LinearTerm{X: x[t], W: l.linR[r].Weight, B: l.linL[r].Bias})
			continue
		}
		terms[t] = append(terms[t],
			autograd.LinearTerm{X: x[rel.Src()], Edges: e, W: l.linL[r].Weight, B: l.linL[r].Bias},
			autograd.LinearTerm{X: x[t], W: l.linR[r].Weight})
	}
	return terms, rels
}

// joinedColumns places the heads' outputs of run's head groups (the
// context heads, the pointer head, the value head) as logitRows lists
// them: each head's logits in head order, the pointer head's maxSlots
// scores per graph making its row, then the value.
func joinedColumns(maxSlots int) []autograd.HeadColumn {
	cols := make([]autograd.HeadColumn, 0, leyline.NumActionHeads+1)
	ctx := 0
	for hd := range leyline.NumActionHeads {
		if hd == leyline.HeadSlot {
			cols = append(cols, autograd.HeadColumn{Group: 1, Head: 0, Rows: maxSlots})
			continue
		}
		cols = append(cols, autograd.HeadColumn{Group: 0, Head: ctx, Rows: 1})
		ctx++
	}
	return append(cols, autograd.HeadColumn{Group: 2, Head: 0, Rows: 1})
}

// joinedWidth is the width of the joined outputs' rows of graphs of
// maxSlots slots (joinedColumns): every head's outputs, the slot
// pointer's one score per slot, then the value.
func (p *Policy) joinedWidth(maxSlots int) int {
	w := 1 // the value
	for hd, h := range p.heads {
		if hd == leyline.HeadSlot {
			w += maxSlots
			continue
		}
		w += h.reluHead().W2.Shape()[0]
	}
	return w
}

// contextHeads are the heads that read the context (every head but the
// slot pointer), in head order, as autograd.ReluHeads takes them.
func (p *Policy) contextHeads() []autograd.ReluHead {
	var hs []autograd.ReluHead
	for hd, h := range p.heads {
		if hd != leyline.HeadSlot {
			hs = append(hs, h.reluHead())
		}
	}
	return hs
}

// stacks returns the weight groups the layer's joined products stack
// when every relation has edges (autograd.SumsStacks of its terms).
func (l *sageLayer) stacks() [][]*autograd.Var {
	var x [NumNodeTypes]*autograd.Var
	for t := range x {
		x[t] = autograd.Const(tensor.Empty(tensor.F32, 0)) // one distinct input per type
	}
	terms, _ := l.terms(x, func(Relation) *autograd.GraphEdges { return &autograd.GraphEdges{} })
	return autograd.SumsStacks(terms[:])
}

// gatLayer is a heterogeneous GAT layer (PyG GATConv with separate
// source and destination projections, edge attributes, no self loops,
// heads averaged): per relation and head, the logit of edge j→i is
// LeakyReLU(a_src·W_s x_j + a_dst·W_d x_i + a_edge·W_e e_ji); a softmax
// over i's incoming edges weighs the messages W_s x_j; heads are
// averaged and a bias added. A node without incoming edges gets the bias.
type gatLayer struct {
	heads, out int
	group
	rels [NumRelations]*gatRel
}

type gatRel struct {
	group
	linSrc, linDst, linEdge *nn.Linear
	attSrc, attDst, attEdge *autograd.Var // [1, H, C]
	bias                    *autograd.Var // [C]
}

func newGATLayer(rng *rand.Rand, in, out, heads int, dt tensor.DType) *gatLayer {
	l := &gatLayer{heads: heads, out: out}
	hc := heads * out
	bound := math.Sqrt(6 / float64(heads+out)) // Glorot over [H, C]
	for r := range l.rels {
		g := &gatRel{
			linSrc:  nn.MustLinear(rng, nn.LinearOptions{In: in, Out: hc, NoBias: true, DType: dt}),
			linDst:  nn.MustLinear(rng, nn.LinearOptions{In: in, Out: hc, NoBias: true, DType: dt}),
			linEdge: nn.MustLinear(rng, nn.LinearOptions{In: EdgeFeatures, Out: hc, NoBias: true, DType: dt}),
		}
		for _, li := range []*nn.Linear{g.linSrc, g.linDst, g.linEdge} {
			nn.XavierUniform(rng, li.Weight.Value, 1)
		}
		att := func() *autograd.Var {
			t := tensor.Empty(dt, 1, heads, out)
			nn.Uniform(rng, t, -bound, bound)
			return autograd.Param(t)
		}
		g.attSrc, g.attDst, g.attEdge = att(), att(), att()
		g.bias = autograd.Param(tensor.Zeros(dt, out))
		g.Register("lin_src", g.linSrc)
		g.Register("lin_dst", g.linDst)
		g.Register("lin_edge", g.linEdge)
		g.RegisterParameter("att_src", g.attSrc)
		g.RegisterParameter("att_dst", g.attDst)
		g.RegisterParameter("att_edge", g.attEdge)
		g.RegisterParameter("bias", g.bias)
		l.rels[r] = g
		l.Register(Relation(r).String(), g)
	}
	return l
}

// forward returns, per node type, GELU of the mean over the relations
// into it plus the input where the widths match (the layer's activation
// and residual, in the aggregation's launch where the device fuses
// them, every type's in one where it joins them: autograd.GATMeanActs).
func (l *gatLayer) forward(x [NumNodeTypes]*autograd.Var, gt *graphTensors) [NumNodeTypes]*autograd.Var {
	// The projections, per node type: lin_src of the relations leaving
	// it and lin_dst of those entering it (autograd.LinearStacks: one
	// product per type on a device in inference, the stacked weights of
	// every type made in one launch).
	var hs, hd [NumRelations]*autograd.Var
	wss, dst := l.projections(func(r int) bool { return gt.edges[r] != 0 }, &hs, &hd)
	for t, outs := range autograd.LinearStacks(x[:], wss[:]) {
		for i, o := range outs {
			*dst[t][i] = o
		}
	}
	var rels [NumNodeTypes][]autograd.GATRelation
	for r, g := range l.rels {
		rel := Relation(r)
		rels[rel.Dst()] = append(rels[rel.Dst()], autograd.GATRelation{
			Hs: hs[r], Hd: hd[r], Attr: gt.attr[r], We: g.linEdge.Weight,
			AttSrc: g.attSrc, AttDst: g.attDst, AttEdge: g.attEdge, Bias: g.bias, Edges: gt.relEdges(rel),
		})
	}
	// Every type's relations, activation and residual: one join of the
	// types on a device that has it (one launch on CUDA).
	resid := make([]*autograd.Var, NumNodeTypes)
	for t, rs := range rels {
		resid[t] = residual([]int{rs[0].Edges.NumDst, l.out}, x[t])
	}
	var res [NumNodeTypes]*autograd.Var
	copy(res[:], autograd.GATMeanActs(rels[:], l.heads, gatNegativeSlope, kernels.GeluErf, resid))
	return res
}

// projections returns, per node type, the weights its features go
// through — lin_src of the relations leaving it and lin_dst of those
// entering it, in relation order, over the relations with edges
// (hasEdges; a relation without reads only its bias) — and where each
// product goes: hs[r] for lin_src, hd[r] for lin_dst.
func (l *gatLayer) projections(hasEdges func(r int) bool, hs, hd *[NumRelations]*autograd.Var) (wss [NumNodeTypes][]*autograd.Var, dst [NumNodeTypes][]**autograd.Var) {
	for t := range wss {
		for r, g := range l.rels {
			rel := Relation(r)
			if !hasEdges(r) {
				continue
			}
			if rel.Src() == NodeType(t) {
				wss[t], dst[t] = append(wss[t], g.linSrc.Weight), append(dst[t], &hs[r])
			}
			if rel.Dst() == NodeType(t) {
				wss[t], dst[t] = append(wss[t], g.linDst.Weight), append(dst[t], &hd[r])
			}
		}
	}
	return wss, dst
}

// stacks returns the weight groups the layer's joined projections stack
// when every relation has edges.
func (l *gatLayer) stacks() [][]*autograd.Var {
	var hs, hd [NumRelations]*autograd.Var
	wss, _ := l.projections(func(int) bool { return true }, &hs, &hd)
	return wss[:]
}

// residual returns h when a layer's output of shape out can add it (the
// widths match), else nil.
func residual(out []int, h *autograd.Var) *autograd.Var {
	if tensor.SameShape(out, h.Shape()) {
		return h
	}
	return nil
}
