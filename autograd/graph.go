package autograd

import (
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/esper-go/esper/kernels"
	"github.com/esper-go/esper/tensor"
)

// node records how to push a gradient from one op's output to its inputs.
type node struct {
	op     string
	inputs []*Var
	// in holds inputs for the usual op of at most three, so that the
	// caller's slice of them need not live on the heap.
	in [3]*Var
	// backward maps the output gradient to one gradient per input (nil
	// where an input needs none). It may allocate: it runs eagerly or
	// during capture, never during replay.
	backward func(g *tensor.Tensor) []*tensor.Tensor
	saved    int // tensors retained for backward (for the statistics)
	bufs     opBufs
}

var (
	nodesCreated atomic.Int64
	tensorsSaved atomic.Int64
)

// Stats counts graph nodes created and tensors saved for backward since
// the process started (or since ResetStats). Tests use it to prove that
// NoGrad and InferenceMode record nothing.
type Stats struct {
	NodesCreated int64
	TensorsSaved int64
}

// ReadStats returns the current counters.
func ReadStats() Stats {
	return Stats{NodesCreated: nodesCreated.Load(), TensorsSaved: tensorsSaved.Load()}
}

// needsGrad reports whether an op over inputs must record a node.
func needsGrad(inputs ...*Var) bool {
	if !GradEnabled() {
		return false
	}
	for _, in := range inputs {
		if in != nil && in.requiresGrad {
			return true
		}
	}
	return false
}

// result wraps an op's output. When any input requires a gradient and
// grad mode is on, it records a node named op whose backward is made by
// mk; mk runs only then, so tensors it captures are saved only when a
// backward can happen. saved is the number of tensors mk retains.
//
// Every differentiable op calls result with a string literal name; the
// gradient-check table in ops_gradcheck_test.go must list every such name.
//
// result copies inputs, so callers may pass a slice literal.
func result(op string, out *tensor.Tensor, inputs []*Var, saved int, mk func() func(g *tensor.Tensor) []*tensor.Tensor) *Var {
	v, n := record(op, out, inputs, saved)
	if n != nil {
		n.backward = mk()
	}
	return v
}

// resultWith is result for an op whose backward uses the space its node
// lends it (opBufs): grads, to return its gradients without allocating a
// slice, and, when sinks is set, sink (see opBufs), to add gradients
// straight into its inputs' Grad.
func resultWith(op string, out *tensor.Tensor, inputs []*Var, saved int, sinks bool, mk func(b *opBufs) func(g *tensor.Tensor) []*tensor.Tensor) *Var {
	v, n := record(op, out, inputs, saved)
	if n != nil {
		n.backward, n.bufs.sinks = mk(&n.bufs), sinks
	}
	return v
}

// opBufs is the space a node lends its backward while it runs.
//
// grads has room for the gradients the backward returns (grads[:len]).
//
// sink[j], filled by Backward for a node made with sinks, is a tensor
// into which the backward may add input j's gradient, returning nil for
// j, or nil: the Grad of a leaf whose gradient is only summed there (no
// hooks; contiguous, in its value's dtype, F32 or F64), or else the sum
// of input j's gradients so far where Backward holds it in a tensor of
// its own (nothing else reads it; contiguous, of the input's shape and
// dtype, F32 or F64). The backward may also ignore the sink and return
// the gradient as usual. A linear layer accumulates its weight and bias
// gradients into their Grad this way with kernels.GradAccumulator, and
// its input's into the sum the input's other readers started, saving a
// tensor and an addition each. Adding into a sink rounds a gradient's
// terms in another order than summing them apart and then adding: the
// values agree to rounding, and a run is as deterministic as before.
//
// fresh[j], set by the backward, says that the gradient it returns for
// input j is a new tensor that nothing else holds or will read (not
// returned for another input, not saved): Backward then adds the
// input's later gradients into it in place, and offers it as a sink.
//
// sinks is resultWith's: the backward takes sinks.
type opBufs struct {
	grads, sink [3]*tensor.Tensor
	fresh       [3]bool
	sinks       bool
}

// record wraps out and, when any input requires a gradient and grad
// mode is on, gives it a node named op over inputs (nil otherwise) whose
// backward the caller sets.
func record(op string, out *tensor.Tensor, inputs []*Var, saved int) (*Var, *node) {
	if !needsGrad(inputs...) {
		return &Var{Value: out}, nil
	}
	// The output and its node are one allocation.
	vn := &varNode{}
	v, n := &vn.v, &vn.n
	v.Value, v.requiresGrad, v.node = out, true, n
	n.op, n.saved = op, saved
	if len(inputs) <= len(n.in) {
		n.inputs = append(n.in[:0:len(inputs)], inputs...)
	} else {
		n.inputs = append([]*Var(nil), inputs...)
	}
	nodesCreated.Add(1)
	tensorsSaved.Add(int64(saved))
	return v, n
}

// fillSinks sets n.bufs.sink[j], for each input j < 3 that can take its
// gradient directly (see opBufs), to the input's Grad when it is a leaf
// whose Grad takes it, else to sum(input), the sum Backward holds for it
// when that is Backward's own (nil otherwise). An input in more than one
// of the node's slots (Linear(x, x, nil)) gets no sink: two slots' sinks
// of one buffer would have one call add into it twice, which a device
// does from many threads at once.
func (n *node) fillSinks(sum func(in *Var) *tensor.Tensor) {
	for j, in := range n.inputs[:min(len(n.inputs), len(n.bufs.sink))] {
		n.bufs.sink[j] = nil
		if in == nil || !in.requiresGrad || repeated(n.inputs, j) {
			continue
		}
		if in.node == nil && in.hooks == nil && in.Grad != nil {
			g, val := in.Grad, in.Value
			if dt := g.DType(); (dt == tensor.F32 || dt == tensor.F64) && dt == val.DType() && g.Device() == val.Device() &&
				g.IsContiguous() && tensor.SameShape(g.Shape(), val.Shape()) {
				n.bufs.sink[j] = g
				continue
			}
		}
		n.bufs.sink[j] = sum(in)
	}
}

// repeated reports whether ins[j] is also another of ins.
func repeated(ins []*Var, j int) bool {
	for i, in := range ins {
		if i != j && in == ins[j] {
			return true
		}
	}
	return false
}

// The seeds of scalar CPU roots (a loss): 1, shared by every Backward
// and never written. No backward writes into the gradient it receives (it
// may pass it on as a view), and a leaf's first gradient is copied into
// a Grad of its own, so a root's seed can be one read-only tensor. The
// zeros are StraightThrough's scale, read only as well.
var (
	oneF32, oneF64   = tensor.Full(tensor.F32, 1), tensor.Full(tensor.F64, 1)
	zeroF32, zeroF64 = tensor.Full(tensor.F32, 0), tensor.Full(tensor.F64, 0)
)

// scalarOne returns the shared seed for a root shaped like v, or nil
// when there is none (v not an F32 or F64 scalar of shape []): on the
// CPU the package's, on a device one per device and dtype (sharedConst),
// so that a captured step's backward starts without a launch.
func scalarOne(v *tensor.Tensor) *tensor.Tensor {
	if v.Rank() != 0 {
		return nil
	}
	return sharedConst(v, oneF32, oneF64)
}

// sharedConst returns the read-only scalar (shape []) holding f32's or
// f64's value in v's dtype and on v's device, or nil when there is none
// (a dtype other than F32 and F64): on the CPU f32 or f64 itself, on a
// device one copy per device, dtype and value, made at the first call
// outside a capture (a capture's caller makes its own with a Fill: a copy
// cannot be recorded).
func sharedConst(v, f32, f64 *tensor.Tensor) *tensor.Tensor {
	if v.Device().IsCPU() {
		return sharedScalar(v, f32, f64)
	}
	dt := v.DType()
	host := f32
	switch dt {
	case tensor.F32:
	case tensor.F64:
		host = f64
	default:
		return nil
	}
	key := deviceScalarKey{v.Device(), dt, host}
	deviceOnesMu.Lock()
	defer deviceOnesMu.Unlock()
	if t, ok := deviceOnes[key]; ok {
		return t
	}
	if backendOf(v).Capturing() {
		return nil
	}
	t, err := host.ToDevice(v.Device())
	if err != nil {
		return nil // the Fill path reports the device's trouble
	}
	deviceOnes[key] = t
	return t
}

// deviceScalarKey names a device's shared constant: its device, dtype
// and the package scalar it copies.
type deviceScalarKey struct {
	dev  tensor.Device
	dt   tensor.DType
	host *tensor.Tensor
}

// deviceOnes are the shared constants on devices (sharedConst: the
// seeds, StraightThrough's zero), never written.
var (
	deviceOnesMu sync.Mutex
	deviceOnes   = map[deviceScalarKey]*tensor.Tensor{}
)

// sharedScalar returns f32 or f64, read-only scalars shared by every
// caller, for a CPU tensor like v of that dtype; nil otherwise.
func sharedScalar(v, f32, f64 *tensor.Tensor) *tensor.Tensor {
	if !v.Device().IsCPU() {
		return nil
	}
	switch v.DType() {
	case tensor.F32:
		return f32
	case tensor.F64:
		return f64
	}
	return nil
}

// varNode is an op's output Var allocated together with its node.
type varNode struct {
	v Var
	n node
}

// Backward computes the gradient of root with respect to every leaf that
// requires one and accumulates it into the leaf's Grad. root must hold a
// single element unless seed is given (one tensor shaped like root).
func Backward(root *Var, seed ...*tensor.Tensor) {
	if !root.requiresGrad {
		panic("autograd: Backward of a Var that does not require grad (no input requires a gradient, or it was computed under NoGrad)")
	}
	var g *tensor.Tensor
	switch {
	case len(seed) > 0:
		g = seed[0]
		if !tensor.SameShape(g.Shape(), root.Shape()) {
			panic(fmt.Sprintf("autograd: Backward seed shape %v does not match root shape %v", g.Shape(), root.Shape()))
		}
	case root.Value.Numel() == 1:
		g = scalarOne(root.Value)
		if g == nil {
			g = newLike(root.Value)
			backendOf(g).Fill(g, 1)
		}
	default:
		panic(fmt.Sprintf("autograd: Backward of a non-scalar root of shape %v needs a seed gradient", root.Shape()))
	}

	// Small graphs (a few layers) keep their bookkeeping on the stack and
	// find a Var's place by scanning; larger ones index it with a map.
	var orderBuf [smallGraph]*Var
	order := topoOrder(root, orderBuf[:0])
	var gradBuf [smallGraph]*tensor.Tensor
	var ownBuf [smallGraph]bool
	var grads []*tensor.Tensor // grads[i] is the gradient of order[i]
	// owned[i]: grads[i] is a tensor of Backward's own (a sum it made, or
	// a backward's fresh gradient), which it may add into in place.
	var owned []bool
	var index map[*Var]int
	if len(order) <= smallGraph {
		grads, owned = gradBuf[:len(order)], ownBuf[:len(order)]
	} else {
		grads, owned = make([]*tensor.Tensor, len(order)), make([]bool, len(order))
		index = make(map[*Var]int, len(order))
		for i, v := range order {
			index[v] = i
		}
	}
	pos := func(v *Var) int {
		if index != nil {
			return index[v]
		}
		for i, u := range order {
			if u == v {
				return i
			}
		}
		panic("autograd: Backward lost a Var of its graph")
	}
	grads[len(order)-1] = g // root comes last
	var leaves leafBatch
	// ownSum is the sum Backward holds for in when it is its own (a sink
	// fillSinks may offer), else nil.
	ownSum := func(in *Var) *tensor.Tensor {
		if k := pos(in); owned[k] && accTakes(grads[k], in) {
			return grads[k]
		}
		return nil
	}
	for i := len(order) - 1; i >= 0; i-- {
		v := order[i]
		gv := grads[i]
		grads[i], owned[i] = nil, false
		if gv == nil {
			continue
		}
		if v.node == nil {
			if !leaves.queue(v, gv) {
				if v.hooks != nil {
					// The leaves visited before it complete, as on the
					// CPU, for a hook that reads them.
					leaves.flush()
				}
				accumulateLeaf(v, gv)
			}
			continue
		}
		if v.retainGrad {
			accumulateInto(v, gv)
		}
		n := v.node
		if n.bufs.sinks {
			n.fillSinks(ownSum)
		}
		ins := n.backward(gv)
		fresh := n.bufs.fresh
		n.bufs.sink, n.bufs.fresh = [3]*tensor.Tensor{}, [3]bool{}
		for j, in := range n.inputs {
			if in == nil || !in.requiresGrad || j >= len(ins) || ins[j] == nil {
				continue
			}
			gi := ins[j]
			if !tensor.SameShape(gi.Shape(), in.Shape()) {
				panic(fmt.Sprintf("autograd: backward of %s produced gradient shape %v for input %d of shape %v", n.op, gi.Shape(), j, in.Shape()))
			}
			k := pos(in)
			switch prev := grads[k]; {
			case prev == nil:
				grads[k], owned[k] = gi, j < len(fresh) && fresh[j] && gi.IsContiguous()
			case owned[k]:
				backendOf(prev).Binary(kernels.Add, prev, prev, castTo(gi, prev.DType()))
			default:
				sum := newLike(prev)
				backendOf(prev).Binary(kernels.Add, sum, prev, castTo(gi, prev.DType()))
				grads[k], owned[k] = sum, true
			}
		}
		n.bufs.grads = [3]*tensor.Tensor{} // ins may be this space
	}
	leaves.flush()
}

// accTakes reports whether g, a gradient Backward holds for in, can be
// offered as an op's sink (opBufs): contiguous, of in's shape, dtype and
// device, F32 or F64.
func accTakes(g *tensor.Tensor, in *Var) bool {
	dt := g.DType()
	return (dt == tensor.F32 || dt == tensor.F64) && dt == in.Value.DType() && g.Device() == in.Value.Device() &&
		g.IsContiguous() && tensor.SameShape(g.Shape(), in.Shape())
}

// leafBatch holds the leaves' gradients that Backward adds into their
// Grad together once the pass is over: on a device (not the CPU, where
// a launch costs nothing), an F32 gradient for a leaf whose Grad exists
// and takes it in place (no hooks; contiguous, F32, of its shape, on its
// device) goes into one kernels.Backend ForeachAxpy (alpha 1: bit for
// bit the Add it replaces) instead of an Add each — one launch for the
// hundred small parameters of a graph policy, say. The sums are the
// same: a leaf is visited once, after every op that reads it, so
// nothing adds into its Grad after the visit in the same pass. The
// gradients it holds are tensors no backward writes into (Backward's
// contract), kept alive until the flush.
type leafBatch struct {
	dev    tensor.Device
	ys, xs []*tensor.Tensor
}

// queue queues g for v.Grad and reports whether it did; otherwise the
// caller accumulates it at once.
func (b *leafBatch) queue(v *Var, g *tensor.Tensor) bool {
	dev := g.Device()
	if dev.IsCPU() || v.hooks != nil || v.Grad == nil || g.DType() != tensor.F32 || !g.IsContiguous() {
		return false
	}
	gr := v.Grad
	if gr.DType() != tensor.F32 || !gr.IsContiguous() || gr.Device() != dev || !tensor.SameShape(gr.Shape(), g.Shape()) {
		return false
	}
	if len(b.ys) > 0 && dev != b.dev {
		return false
	}
	b.dev = dev
	b.ys, b.xs = append(b.ys, gr), append(b.xs, g)
	return true
}

// flush adds the queued gradients into their Grads: one ForeachAxpy
// (a single one as the Add it replaces).
func (b *leafBatch) flush() {
	switch len(b.ys) {
	case 0:
		return
	case 1:
		kernels.For(b.dev).Binary(kernels.Add, b.ys[0], b.ys[0], b.xs[0])
	default:
		kernels.For(b.dev).ForeachAxpy(b.ys, b.xs, 1)
	}
	b.ys, b.xs = nil, nil
}

// smallGraph is the number of Vars up to which Backward's bookkeeping
// needs no allocation.
const smallGraph = 32

// topoOrder appends to order the Vars reachable from root that require
// gradients, inputs before outputs (root last).
func topoOrder(root *Var, order []*Var) []*Var {
	type frame struct {
		v    *Var
		next int
	}
	var stackBuf [smallGraph]frame
	stack := append(stackBuf[:0], frame{v: root})
	// seen is a list while it is short and a map after.
	var seenBuf [smallGraph]*Var
	seenList := append(seenBuf[:0], root)
	var seenMap map[*Var]bool
	seen := func(v *Var) bool {
		if seenMap != nil {
			return seenMap[v]
		}
		for _, u := range seenList {
			if u == v {
				return true
			}
		}
		return false
	}
	mark := func(v *Var) {
		switch {
		case seenMap != nil:
			seenMap[v] = true
		case len(seenList) < cap(seenList):
			seenList = append(seenList, v)
		default:
			seenMap = make(map[*Var]bool, 2*len(seenList))
			for _, u := range seenList {
				seenMap[u] = true
			}
			seenMap[v] = true
		}
	}
	for len(stack) > 0 {
		f := &stack[len(stack)-1]
		if f.v.node != nil && f.next < len(f.v.node.inputs) {
			in := f.v.node.inputs[f.next]
			f.next++
			if in != nil && in.requiresGrad && !seen(in) {
				mark(in)
				stack = append(stack, frame{v: in})
			}
			continue
		}
		order = append(order, f.v)
		stack = stack[:len(stack)-1]
	}
	return order
}

func accumulateLeaf(v *Var, g *tensor.Tensor) {
	accumulateInto(v, g)
	if v.hooks != nil {
		for _, h := range *v.hooks {
			h(v)
		}
	}
}

// accumulateInto adds g into v.Grad in place, allocating Grad (in v's
// dtype) on first use.
func accumulateInto(v *Var, g *tensor.Tensor) {
	b := backendOf(g)
	if v.Grad == nil {
		v.Grad = newLike(v.Value)
		b.Copy(v.Grad, g)
		return
	}
	if !tensor.SameShape(v.Grad.Shape(), g.Shape()) {
		panic(fmt.Sprintf("autograd: gradient of shape %v cannot accumulate into Grad of shape %v (%s)", g.Shape(), v.Grad.Shape(), v.Name))
	}
	b.Binary(kernels.Add, v.Grad, v.Grad, castTo(g, v.Grad.DType()))
}

// newLike allocates a contiguous tensor with t's dtype, shape and device.
func newLike(t *tensor.Tensor) *tensor.Tensor { return tensor.EmptyLike(t) }

// castTo returns t converted to dt (t itself when it already matches).
func castTo(t *tensor.Tensor, dt tensor.DType) *tensor.Tensor {
	if t.DType() == dt {
		return t
	}
	out, err := tensor.EmptyOn(t.Device(), dt, t.Shape()...)
	if err != nil {
		panic(err)
	}
	backendOf(t).Copy(out, t)
	return out
}
