package tamiyo

import (
	"errors"
	"fmt"
	"time"
	"unsafe"

	"github.com/esper-go/esper/autograd"
	"github.com/esper-go/esper/kernels"
	"github.com/esper-go/esper/leyline"
	"github.com/esper-go/esper/tensor"
)

// Inference runs a policy's forward pass for action selection: no
// gradients, evaluation mode, and the whole forward captured and replayed
// per batch shape (autograd.Capture), so that a repeated decision over a
// graph of the same shape replays a recorded launch list instead of
// dispatching a few hundred ops. The graph's tensors (features, edge
// indices, blueprint rows) are the captured step's inputs: a new graph of
// the same shape (same node and edge counts per type and relation) reuses
// the capture with its own values. A capture that fails falls back to
// eager execution for that shape, reported once through
// InferenceOptions.OnFallback. It runs on the policy's device, its
// captured step's inputs copied there per forward into the buffers of
// the previous graph of the same sizes, which the graph captured for them
// reads in place: the features into mapped host memory the device reads
// where it gives some (tensor.EmptyMapped: no driver call, no transfer),
// else through a pinned buffer on the device's stream, the host not
// waiting; the indices only when they changed. Its outputs come back in
// one read (one host sync), on a device with mapped memory from the
// mapped tensor the heads' launch wrote (LastMapped says which way a
// forward went).
//
// An Inference is not safe for concurrent use: the captured outputs are
// static buffers overwritten by each replay. Service serialises its
// calls.
type Inference struct {
	p        *Policy
	captured *autograd.Captured // nil: eager only
	// stepHook, when set (tests), runs at the start of every forward,
	// eager or being captured.
	stepHook func()
	// staged are the device buffers the graphs are uploaded into, reused
	// by the next graph of the same sizes: its tensors are at the same
	// addresses, which the captured graph for them reads in place
	// (autograd's BoundInputs), so a replay copies no inputs.
	staged stagingBuffers
	// tf32 runs the forward's F32 products at kernels.High
	// (InferenceOptions.TF32).
	tf32 bool
	// phases are the latest forward's host phases (LastPhases).
	phases ForwardPhases
	// params are the policy's parameters, whose tensors a captured
	// forward reads at the addresses it recorded: version hashes where
	// they are, so that a move (an optimizer's arena repointing them, a
	// checkpoint load replacing them) recaptures instead of reading stale
	// memory.
	params []*autograd.Var
	// outs are the mapped tensors the heads' launch writes the joined
	// outputs into, per batch shape (graphs, slots a graph): the host
	// reads a forward's logits from them with no device-to-host copy
	// (joinedOutput). into is the current forward's (graphTensors.
	// joinInto); noMappedOut is set once the device declined.
	outs        map[[2]int]*tensor.Tensor
	outsDev     tensor.Device // the device of outs (a moved policy starts them anew)
	into        *tensor.Tensor
	noMappedOut bool
	// mappedIn and mappedOut: the latest forward's features were mapped,
	// and its joined logits read from a mapped tensor (LastMapped).
	mappedIn, mappedOut bool
	// readBuf is where a forward's joined outputs are read to before
	// they are cut into rows, kept for the next forward's.
	readBuf []float32
}

// maxMappedOutputs bounds Inference.outs (one per batch shape captured;
// a dropped one stays alive as long as a captured forward writes it).
const maxMappedOutputs = 2 * DefaultInferenceCacheSize

// joinedOutput returns the mapped tensor a forward of g on dev writes
// its joined outputs into (nil: the heads' launch allocates them in
// device memory and the read copies them, as on a device without mapped
// memory, or where the joined path does not apply — the CPU, a dtype
// other than F32, graphs of fewer slots than the widest).
func (in *Inference) joinedOutput(g *Graph, dev tensor.Device) *tensor.Tensor {
	if dev != in.outsDev {
		// A moved policy: the old device's tensors stay alive as long as
		// a captured forward writes them, and are not handed out again.
		clear(in.outs)
		in.outsDev, in.noMappedOut = dev, false
	}
	maxSlots := g.MaxSlots()
	if in.noMappedOut || dev.IsCPU() || in.p.opts.DType != tensor.F32 || g.NumGraphs == 0 || g.Nodes[NodeSlot].Count != g.NumGraphs*maxSlots {
		return nil
	}
	key := [2]int{g.NumGraphs, maxSlots}
	if t := in.outs[key]; t != nil {
		return t
	}
	t, err := tensor.EmptyMapped(dev, tensor.MappedOutput, tensor.F32, g.NumGraphs, in.p.joinedWidth(maxSlots))
	if err != nil {
		// Declined, or the pinned allocation failed: device memory and a
		// copy from now on (on this device), as without mapped memory.
		in.noMappedOut = true
		return nil
	}
	if in.outs == nil {
		in.outs = map[[2]int]*tensor.Tensor{}
	}
	if len(in.outs) >= maxMappedOutputs {
		for k := range in.outs {
			delete(in.outs, k) // any one
			break
		}
	}
	in.outs[key] = t
	return t
}

// DefaultInferenceCacheSize is the number of batch shapes an Inference
// keeps captured when InferenceOptions.CacheSize is zero.
const DefaultInferenceCacheSize = 8

// InferenceOptions configure NewInference. The zero value captures, with
// DefaultInferenceCacheSize shapes cached and one eager warm-up per shape.
type InferenceOptions struct {
	// NoCapture runs every forward eagerly.
	NoCapture bool
	// CacheSize bounds the captured batch shapes, least recently used
	// evicted (default DefaultInferenceCacheSize).
	CacheSize int
	// Warmup is the number of eager forwards per shape before its capture
	// (default 1).
	Warmup int
	// OnFallback, when set, is called once for each batch shape whose
	// capture failed (the error wraps autograd.ErrCaptureFailed); that
	// shape then runs eagerly.
	OnFallback func(err error)
	// TF32 runs the forward's F32 matrix products on TF32 tensor cores
	// (kernels.High, PyTorch's "high" float32 matmul precision) where the
	// device has them: a CUDA device of compute capability 8.0 or newer.
	// The CPU and sim always compute fp32. The logits then differ from
	// fp32 ones by TF32's rounding (10-bit mantissas in the products).
	// The backend's precision is set for each forward and put back to
	// the default, Highest, after it.
	TF32 bool
}

// NewInference prepares p for inference. It switches p to evaluation mode
// (no dropout) and keeps it there: a captured forward has recorded the
// mode it ran in, so switch a policy back to training only through a
// different Inference, or with capture off.
func NewInference(p *Policy, o InferenceOptions) (*Inference, error) {
	if p == nil {
		return nil, errors.New("tamiyo: NewInference: nil policy")
	}
	if o.CacheSize < 0 || o.Warmup < 0 {
		return nil, fmt.Errorf("tamiyo: NewInference: negative CacheSize %d or Warmup %d", o.CacheSize, o.Warmup)
	}
	if o.CacheSize == 0 {
		o.CacheSize = DefaultInferenceCacheSize
	}
	p.SetTraining(false)
	in := &Inference{p: p, tf32: o.TF32}
	in.staged.up = &pinnedUpload{}
	if !o.NoCapture {
		in.params = p.Parameters()
		in.captured = autograd.Capture(in.step, autograd.CaptureOptions{
			Warmup: o.Warmup, Policy: autograd.Recapture, CacheSize: o.CacheSize, OnFallback: o.OnFallback,
			BoundInputs: o.CacheSize, Version: in.version,
		})
	}
	return in, nil
}

// Policy returns the policy it runs.
func (in *Inference) Policy() *Policy { return in.p }

// Captures reports whether forwards are captured (InferenceOptions.NoCapture
// unset).
func (in *Inference) Captures() bool { return in.captured != nil }

// Stats returns the capture counters (zero without capture).
func (in *Inference) Stats() autograd.CaptureStats {
	if in.captured == nil {
		return autograd.CaptureStats{}
	}
	return in.captured.Stats()
}

// Close frees the captured forwards' graphs now (on CUDA the driver
// graphs; autograd.Captured.Close) instead of when the Go collector
// finds them: call it when this
// Inference will not run for a while, such as when a new policy replaces
// it. A later Forward warms up and captures again. The capture counters
// stay (Stats). Nil without capture.
func (in *Inference) Close() error {
	if in.captured == nil {
		return nil
	}
	if err := in.captured.Close(); err != nil {
		return fmt.Errorf("tamiyo: Inference.Close: %w", err)
	}
	// The graphs gone, their mapped outputs go too (a later forward
	// makes new ones).
	for _, t := range in.outs {
		t.Storage().Free()
	}
	clear(in.outs)
	in.into = nil
	return nil
}

// GraphNodes is the number of launches in the captured forward of the
// latest graph shape (a CUDA graph's node count on CUDA); 0 before the
// first capture or without capture.
func (in *Inference) GraphNodes() int {
	if in.captured == nil {
		return 0
	}
	return in.captured.Launches()
}

// ForwardPhases split one forward's time on the host into its three
// parts, in order: Upload, building the graph's tensors and copying them
// to the device (on CUDA into mapped memory, or enqueued from pinned
// memory, the host not waiting); Run, the forward itself (on a device, enqueuing
// the captured graph's replay or the eager launches: the host waits for
// none of them); Read, copying the logits and values back and cutting
// them into rows, which on a device first waits for the forward to
// finish: on a device it holds what remains of the device's work once
// the host is done enqueuing (its work overlaps Upload's and Run's), so
// Upload + Run + Read against the device's own time per forward says
// which side bounds the forward.
type ForwardPhases struct {
	Upload, Run, Read time.Duration
}

// LastPhases returns the latest forward's ForwardPhases: the zero value
// before the first, and when the latest Forward or Act failed.
func (in *Inference) LastPhases() ForwardPhases { return in.phases }

// LastMapped reports how the latest forward crossed between the host and
// its device: inputs, whether its features went into mapped host memory
// the device reads (tensor.EmptyMapped) rather than through a copy; and
// outputs, whether its logits were read from a mapped tensor the heads'
// launch wrote rather than copied back. Both false on the CPU, before
// the first forward, and where the device gives no mapped memory.
func (in *Inference) LastMapped() (inputs, outputs bool) {
	return in.mappedIn, in.mappedOut
}

// Logits are the host copies of one forward pass over B environments.
type Logits struct {
	// Heads holds, per head in HeadNames order, one row of unmasked
	// logits per environment; slot rows have the environment's slot
	// count (the padding is dropped).
	Heads [leyline.NumActionHeads][][]float32
	// Values are V(s) per environment.
	Values []float32
}

// Forward checks g, runs the policy (captured or eager) and copies the
// logits and values to the host.
func (in *Inference) Forward(g *Graph) (*Logits, error) {
	in.phases = ForwardPhases{}
	in.mappedIn, in.mappedOut = false, false
	if err := g.Validate(); err != nil {
		return nil, err
	}
	return in.forward(g)
}

// forward runs a validated graph.
func (in *Inference) forward(g *Graph) (lg *Logits, err error) {
	defer func() {
		// Validation makes the forward infallible; a panic here is a bug,
		// reported as an error at this boundary.
		if r := recover(); r != nil {
			err = fmt.Errorf("tamiyo: inference forward: %v", r)
		}
	}()
	dev, err := in.p.followDevice()
	if err != nil {
		return nil, fmt.Errorf("tamiyo: inference forward: %w", err)
	}
	if in.tf32 {
		be := kernels.For(dev)
		be.SetMatmulPrecision(kernels.High)
		defer be.SetMatmulPrecision(kernels.Highest)
	}
	// The kept buffers this forward uses are released once its work is
	// enqueued, or it failed (pinnedUpload).
	defer in.staged.up.release()
	t0 := time.Now()
	// Not wrapped: the step's inputs are the tensors (flattenGraph), and
	// only a forward being captured or run eagerly wraps them.
	gt, err := stageGraph(g, in.p.opts.DType, dev, &in.staged)
	if err != nil {
		return nil, fmt.Errorf("tamiyo: inference forward: %w", err)
	}
	inputs := flattenGraph(gt)
	in.mappedIn = in.staged.lastMapped && !dev.IsCPU()
	in.into = in.joinedOutput(g, dev)
	t1 := time.Now()
	var outs []*tensor.Tensor
	if in.captured == nil {
		outs = in.step(inputs)
	} else if outs, err = in.captured.Run(inputs...); err != nil {
		return nil, fmt.Errorf("tamiyo: inference forward: %w", err)
	}
	t2 := time.Now()
	var joined *tensor.Tensor
	if len(outs) > leyline.NumActionHeads+1 {
		joined = outs[leyline.NumActionHeads+1]
	}
	in.mappedOut = joined != nil && joined.IsMapped()
	lg, err = readLogitsJoined(g, [leyline.NumActionHeads]*tensor.Tensor(outs[:leyline.NumActionHeads]), outs[leyline.NumActionHeads], joined, &in.readBuf)
	if err == nil {
		in.phases = ForwardPhases{Upload: t1.Sub(t0), Run: t2.Sub(t1), Read: time.Since(t2)}
	}
	return lg, err
}

// ReplayLast runs the device work of the latest forward again — its
// captured graph, on the inputs it was given — and reads nothing back:
// for timing the device's share of a forward (esper bench W2 on a GPU).
// The logits the latest Forward returned are untouched; its device
// outputs are overwritten with the same values. An error without a
// captured forward to replay.
func (in *Inference) ReplayLast() error {
	if in.captured == nil {
		return errors.New("tamiyo: ReplayLast: this Inference does not capture")
	}
	if err := in.captured.ReplayLast(); err != nil {
		return fmt.Errorf("tamiyo: %w", err)
	}
	// The replay reads the kept buffers again: the next forward's copies
	// into them wait for it as for the forward.
	in.staged.up.releaseLast()
	return nil
}

// Act runs Forward and chooses one action per environment exactly as
// Policy.Act does (same masks, floors, canonicalisation and sampling).
func (in *Inference) Act(g *Graph, masks []leyline.ActionMasks, opt ActOptions) (*ActResult, error) {
	in.phases = ForwardPhases{}
	in.mappedIn, in.mappedOut = false, false
	floors, err := checkActInputs(g, masks, opt)
	if err != nil {
		return nil, err
	}
	lg, err := in.forward(g)
	if err != nil {
		return nil, err
	}
	return selectActions(lg, masks, opt, floors)
}

// version hashes the storage and offset of every parameter (without
// allocating): it changes when a parameter's tensor is replaced or
// repointed, not when its values are updated in place.
func (in *Inference) version() uint64 {
	h := uint64(14695981039346656037)
	for _, v := range in.params {
		for _, x := range [2]uint64{uint64(uintptr(unsafe.Pointer(v.Value.Storage()))), uint64(v.Value.Offset())} {
			h ^= x
			h *= 1099511628211
		}
	}
	return h
}

// step is the captured unit: the graph's tensors in, the head logits and
// the value out, in inference mode.
func (in *Inference) step(inputs []*tensor.Tensor) []*tensor.Tensor {
	if in.stepHook != nil {
		in.stepHook()
	}
	gt := unflattenGraph(inputs)
	gt.joinInto = in.into
	var out *PolicyOutput
	autograd.InferenceMode(func() { out = in.p.run(gt) })
	res := make([]*tensor.Tensor, 0, leyline.NumActionHeads+2)
	for _, l := range out.Logits {
		res = append(res, l.Value)
	}
	res = append(res, out.Value.Value)
	if out.Value.Value.Device().IsCPU() {
		return res
	}
	// On a device the outputs are also joined here, so that a captured
	// forward's replay leaves them ready for the one copy to the host
	// (readLogitsJoined) instead of an eager Concat after it.
	if out.joined != nil { // written by the heads' launch
		return append(res, out.joined.Value)
	}
	var lg [leyline.NumActionHeads]*tensor.Tensor
	copy(lg[:], res)
	return append(res, joinRows(logitRows(lg, out.Value.Value)))
}

// Flattened graph tensors: the node features per type, the blueprint
// rows, the slot nodes' environments, the padded slot index, the
// padding zero, the slot gathers' CSR parts (iota, unit and per-graph
// row pointers), then per
// relation its sources, destinations, attributes and CSR row pointers
// (zero-length for a relation without edges, so that which relations are
// empty is part of the shape guard; the edges are sorted by destination,
// so the CSR has no order).
const (
	flatX         = 0
	flatBP        = NumNodeTypes
	flatSlotGraph = flatBP + 1
	flatSlotPad   = flatSlotGraph + 1
	flatZero      = flatSlotPad + 1
	flatIota      = flatZero + 1
	flatUnitRows  = flatIota + 1
	flatSlotRows  = flatUnitRows + 1
	flatEdges     = flatSlotRows + 1
	flatPerRel    = 4 // src, dst, attr, rowPtr
	flatLen       = flatEdges + flatPerRel*NumRelations
)

func flattenGraph(gt *graphTensors) []*tensor.Tensor {
	out := make([]*tensor.Tensor, flatLen)
	for t := range gt.x {
		out[flatX+t] = gt.xt[t]
	}
	out[flatBP], out[flatSlotGraph], out[flatSlotPad], out[flatZero] = gt.bp, gt.slotGraph, gt.slotPad, gt.zero
	out[flatIota], out[flatUnitRows], out[flatSlotRows] = gt.iota, gt.unitRowPtr, gt.slotRowPtr
	for r := range gt.edges {
		i := flatEdges + flatPerRel*r
		out[i], out[i+1], out[i+2], out[i+3] = gt.src[r], gt.dst[r], gt.attrT[r], gt.rowPtr[r]
	}
	return out
}

// unflattenGraph rebuilds graphTensors from flattenGraph's tensors; the
// counts come from their shapes alone, so a replay with other values of
// the same shapes is the same computation.
func unflattenGraph(in []*tensor.Tensor) *graphTensors {
	gt := &graphTensors{}
	for t := range gt.x {
		gt.xt[t] = in[flatX+t]
		gt.x[t] = autograd.Const(gt.xt[t])
		gt.n[t] = in[flatX+t].Shape()[0]
	}
	gt.b = gt.n[NodeGlobal]
	gt.bp, gt.slotGraph, gt.slotPad, gt.zero = in[flatBP], in[flatSlotGraph], in[flatSlotPad], in[flatZero]
	gt.iota, gt.unitRowPtr, gt.slotRowPtr = in[flatIota], in[flatUnitRows], in[flatSlotRows]
	gt.maxSlots = gt.slotPad.Shape()[0] / gt.b
	for r := range gt.edges {
		i := flatEdges + flatPerRel*r
		gt.edges[r] = in[i].Shape()[0]
		gt.src[r], gt.dst[r], gt.attrT[r], gt.attr[r] = in[i], in[i+1], in[i+2], autograd.Const(in[i+2])
		gt.rowPtr[r] = in[i+3]
	}
	return gt
}
