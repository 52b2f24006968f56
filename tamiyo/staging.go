package tamiyo

import (
	"bytes"
	"fmt"
	"slices"

	"github.com/esper-go/esper/kernels"
	"github.com/esper-go/esper/tensor"
)

// staging gathers the small host-built tensors of one policy call (a
// graph's features and indices, Evaluate's masks and constants) and puts
// them on the policy's device with one host-to-device copy per element
// kind: every float tensor is a view of one buffer of the policy's dtype,
// every index tensor a view of one I64 buffer, every mask a view of one
// Bool buffer (ARCHITECTURE.md "Devices": crossing is an explicit copy,
// and few large copies beat many small ones). On the CPU there is nothing
// to cross: each tensor is built on its own where it is asked for,
// exactly as without staging, and upload has nothing left to do.
type staging struct {
	dev tensor.Device
	dt  tensor.DType // of the float tensors
	// floats holds the float tensors' values, or f32 when dt is F32 (the
	// usual policy: staged as they are, with no conversion per element).
	floats []float64
	f32    []float32
	ints   []int64
	bools  []bool
	// last is the index values of the last upload through reuse. While
	// every index slice staged so far equals last at the same offset
	// (lazy), nothing is appended to ints and nInts counts the values: a
	// graph of the last one's topology copies none of them (upload still
	// compares them with its kept buffer's). The first slice that differs
	// copies last's matching prefix into ints, and ints is built from
	// there on.
	last  []int64
	lazy  bool
	nInts int
	// lastKept is the kept buffer last's values went into: while it is
	// the one an unchanged upload takes again, it holds them (no second
	// comparison).
	lastKept *keptBuffer
	// Views waiting for upload, per buffer, and their shapes (flat).
	fViews, iViews, bViews []stagedView
	shapes                 []int
	// reuse, when set, keeps the device buffers of earlier uploads for
	// upload to copy into (see stagingBuffers).
	reuse *stagingBuffers
}

// stagingBuffers are device buffers a staging copies into instead of
// allocating new ones, one per dtype and length: a call whose buffers
// have the lengths of an earlier call's gets tensors at the same device
// addresses, which a captured graph bound to them (autograd's
// BoundInputs) reads in place, with no copy into static buffers. Only
// for a user that is done with the previous call's tensors when it
// stages the next (tamiyo.Inference), which also gets the same view
// tensors when it cuts a buffer as before (a graph of the same shape),
// and the same host staging (st), its slices grown once.
type stagingBuffers struct {
	bufs []*keptBuffer // most recently used first
	st   *staging
	// up, when set, copies into kept buffers without the host waiting
	// (upload.go): nil for a user that only wants the buffers kept.
	up *pinnedUpload
	// sorted are the relations' sortedEdges scratch, for graphs whose
	// edges do not come sorted by destination.
	sorted [NumRelations]sortedScratch
	// csrs are the relations' last CSRs, by their destinations: a graph
	// of the last one's topology reuses them (csr).
	csrs [NumRelations]csrCache
	// scratch are newGraphTensors' host slices (the slot iota, row
	// pointers and padding), staged (copied) before the next call.
	scratch [3][]int64
	// noMapped is set once the device declined mapped memory for inputs
	// (tensor.ErrNoMappedMemory, or a failed allocation): the float
	// buffers then go through up as before. lastMapped says whether the
	// latest upload's float buffer was mapped.
	noMapped, lastMapped bool
}

// newMapped returns a new kept float buffer of dtype dt and n elements
// in mapped host memory (tensor.EmptyMapped, MappedInput) holding raw:
// where the device's kernels read a forward's features across the bus,
// the host writing them with no driver call (tensor.CopyFromHostBytes)
// instead of staging them through a pinned buffer and a copy engine.
// Nil, with no error, where the device declines or the allocation fails
// (the caller copies as before; noMapped is set so that it is not asked
// again: a failed pinned allocation costs the forward nothing but its
// speed); an error only where the copy into a mapped buffer fails.
func (b *stagingBuffers) newMapped(dev tensor.Device, dt tensor.DType, n int, raw []byte) (*tensor.Tensor, error) {
	buf, err := tensor.EmptyMapped(dev, tensor.MappedInput, dt, n)
	if err != nil {
		b.noMapped = true
		return nil, nil
	}
	if err := tensor.CopyFromHostBytes(buf, raw); err != nil {
		return nil, err
	}
	return buf, nil
}

// csrCache is one relation's last CSR (kernels.BuildCSR) and the
// destinations and node count it was built from.
type csrCache struct {
	dst           []int64
	nd            int
	rowPtr, order []int64
	sorted        bool // order is the identity
	valid         bool
}

// csr returns relation r's CSR for destinations dst among nd nodes, and
// whether its order is the identity (the edges sorted by destination
// already): the last one's when they are the same (b may be nil: built
// anew).
func (b *stagingBuffers) csr(r int, dst []int64, nd int) (rowPtr, order []int64, sorted bool, err error) {
	if b == nil {
		rowPtr, order, err = kernels.BuildCSR(dst, nd)
		return rowPtr, order, err == nil && kernels.IsIdentity(order), err
	}
	c := &b.csrs[r]
	if c.valid && c.nd == nd && slices.Equal(c.dst, dst) {
		return c.rowPtr, c.order, c.sorted, nil
	}
	c.valid = false
	if rowPtr, order, err = kernels.BuildCSR(dst, nd); err != nil {
		return nil, nil, false, err
	}
	c.dst, c.nd, c.rowPtr, c.order, c.sorted, c.valid = append(c.dst[:0], dst...), nd, rowPtr, order, kernels.IsIdentity(order), true
	return rowPtr, order, c.sorted, nil
}

// sortedScratch is one relation's sortedEdges output, kept for the next
// call (the staging copies what it is given).
type sortedScratch struct {
	src, dst []int64
	attr     []float32
}

// sortedEdges returns a relation's sources, destinations and attributes
// (f a row) in the order order lists them (kernels.BuildCSR's: by
// destination, stable), in sc's slices (grown as needed; new ones for a
// nil sc).
func sortedEdges(sc *sortedScratch, order, src, dst []int64, attr []float32, f int) ([]int64, []int64, []float32) {
	if sc == nil {
		sc = &sortedScratch{}
	}
	n := len(order)
	if cap(sc.src) < n {
		sc.src, sc.dst = make([]int64, n), make([]int64, n)
	}
	if cap(sc.attr) < n*f {
		sc.attr = make([]float32, n*f)
	}
	s, d, a := sc.src[:n], sc.dst[:n], sc.attr[:n*f]
	for p, k := range order {
		s[p], d[p] = src[k], dst[k]
		copy(a[p*f:(p+1)*f], attr[int(k)*f:int(k+1)*f])
	}
	return s, d, a
}

// keptBuffer is a kept device buffer and the views its last upload cut
// from it: offsets, ranks and shapes (flat), and the tensors.
type keptBuffer struct {
	t             *tensor.Tensor
	offs, ranks   []int
	shapes        []int
	views         []*tensor.Tensor
	layoutIsValid bool
	// held is a copy of the bytes t holds, for the index and mask
	// buffers (a graph of the last one's topology stages the same
	// indices: their copy is skipped); nil when unknown.
	held []byte
}

// maxStagingBuffers bounds the buffers kept (graph sizes vary as seeds
// come and go; each buffer is a few kilobytes).
const maxStagingBuffers = 24

// staging returns the kept host staging for dev and dt, emptied (a new
// one the first time, or when dev or dt changed).
func (b *stagingBuffers) staging(dev tensor.Device, dt tensor.DType) *staging {
	if b.st == nil || b.st.dev != dev || b.st.dt != dt {
		// A policy moved (or a new dtype): the kept buffers are the
		// old device's.
		b.st = newStaging(dev, dt)
		clear(b.bufs)
		b.bufs = b.bufs[:0]
		b.noMapped, b.lastMapped = false, false // the new device may give mapped memory
		if b.up != nil {
			b.up.release()
			b.up.dev, b.up.pin = dev, nil
		}
	}
	b.st.reset()
	b.st.reuse = b
	b.st.lazy = len(b.st.last) > 0
	return b.st
}

// take returns a kept buffer of dtype dt and n elements (moved to the
// front), or nil.
func (b *stagingBuffers) take(dt tensor.DType, n int) *keptBuffer {
	for i, k := range b.bufs {
		if k.t.DType() == dt && k.t.Numel() == n {
			copy(b.bufs[1:i+1], b.bufs[:i])
			b.bufs[0] = k
			return k
		}
	}
	return nil
}

// keep adds a new buffer, dropping the least recently used past the
// bound, and returns its entry.
func (b *stagingBuffers) keep(t *tensor.Tensor) *keptBuffer {
	k := &keptBuffer{t: t}
	b.bufs = append([]*keptBuffer{k}, b.bufs...)
	if len(b.bufs) > maxStagingBuffers {
		clear(b.bufs[maxStagingBuffers:])
		b.bufs = b.bufs[:maxStagingBuffers]
	}
	return k
}

// cut points every view's tensor at its part of k's buffer: the tensors
// of the previous cut when the views are laid out as then, else new ones
// (remembered for the next).
func (k *keptBuffer) cut(s *staging, views []stagedView) {
	same := k.layoutIsValid && len(views) == len(k.views)
	at := 0
	for i := 0; same && i < len(views); i++ {
		v := views[i]
		shape := s.shapeOf(v)
		same = k.offs[i] == v.off && k.ranks[i] == len(shape) && slices.Equal(k.shapes[at:at+len(shape)], shape)
		at += len(shape)
	}
	if same {
		for i, v := range views {
			*v.dst = k.views[i]
		}
		return
	}
	k.offs, k.ranks, k.shapes, k.views = k.offs[:0], k.ranks[:0], k.shapes[:0], k.views[:0]
	for _, v := range views {
		shape := s.shapeOf(v)
		t := s.viewOf(k.t, v)
		*v.dst = t
		k.offs, k.ranks = append(k.offs, v.off), append(k.ranks, len(shape))
		k.shapes, k.views = append(k.shapes, shape...), append(k.views, t)
	}
	k.layoutIsValid = true
}

// stagedView is a tensor to be cut from a staging buffer: elements
// [off, off+Numel(shape)) shaped as shape (the staging's shapes[at :
// at+rank]), written to *dst by upload.
type stagedView struct {
	dst      **tensor.Tensor
	off      int
	at, rank int
}

func newStaging(dev tensor.Device, dt tensor.DType) *staging {
	return &staging{dev: dev, dt: dt}
}

// reset empties s for a new call, keeping its slices' capacity.
func (s *staging) reset() {
	s.floats, s.f32, s.ints, s.bools, s.shapes = s.floats[:0], s.f32[:0], s.ints[:0], s.bools[:0], s.shapes[:0]
	s.lazy, s.nInts = false, 0
	for _, v := range [...]*[]stagedView{&s.fViews, &s.iViews, &s.bViews} {
		clear(*v)
		*v = (*v)[:0]
	}
}

// host reports whether the staging builds CPU tensors where asked. The
// host paths below hand the tensors a copy of their shape (slices.Clone),
// so that the variadic shape of a device call does not escape to the
// heap: W2's batch-64 upload made some forty allocations a forward of
// them.
func (s *staging) host() bool { return s.dev.IsCPU() }

// intLen is the number of index values staged so far.
func (s *staging) intLen() int {
	if s.lazy {
		return s.nInts
	}
	return len(s.ints)
}

// indexValues returns the index values staged: last itself when they
// are all of it (no copy), else ints (built from last's prefix when
// they are fewer).
func (s *staging) indexValues() []int64 {
	if s.lazy && s.nInts == len(s.last) {
		return s.last
	}
	if s.lazy {
		s.ints, s.lazy = append(s.ints[:0], s.last[:s.nInts]...), false
	}
	return s.ints
}

func (s *staging) view(views *[]stagedView, dst **tensor.Tensor, off int, shape []int) {
	*views = append(*views, stagedView{dst: dst, off: off, at: len(s.shapes), rank: len(shape)})
	s.shapes = append(s.shapes, shape...)
}

// shapeOf is v's shape (in s.shapes).
func (s *staging) shapeOf(v stagedView) []int { return s.shapes[v.at : v.at+v.rank] }

// viewOf is v's tensor: its part of buf, shaped.
func (s *staging) viewOf(buf *tensor.Tensor, v stagedView) *tensor.Tensor {
	shape := s.shapeOf(v)
	return buf.Narrow(0, v.off, tensor.Numel(shape)).Reshape(shape...)
}

// nfloats is the number of float values staged so far.
func (s *staging) nfloats() int {
	if s.dt == tensor.F32 {
		return len(s.f32)
	}
	return len(s.floats)
}

// float32s stages v (converted to the float dtype) as a tensor of shape.
func (s *staging) float32s(dst **tensor.Tensor, v []float32, shape ...int) {
	if s.host() {
		*dst = floatTensor(s.dt, v, slices.Clone(shape)...)
		return
	}
	s.view(&s.fViews, dst, s.nfloats(), shape)
	if s.dt == tensor.F32 {
		s.f32 = append(s.f32, v...)
		return
	}
	for _, x := range v {
		s.floats = append(s.floats, float64(x))
	}
}

// float64s stages v (converted to the float dtype) as a tensor of shape.
func (s *staging) float64s(dst **tensor.Tensor, v []float64, shape ...int) {
	if s.host() {
		*dst = tensor.FromFloat64s(s.dt, v, slices.Clone(shape)...)
		return
	}
	s.view(&s.fViews, dst, s.nfloats(), shape)
	if s.dt == tensor.F32 {
		for _, x := range v {
			s.f32 = append(s.f32, float32(x)) // as FromFloat64s converts
		}
		return
	}
	s.floats = append(s.floats, v...)
}

// full stages a tensor of shape filled with v.
func (s *staging) full(dst **tensor.Tensor, v float64, shape ...int) {
	if s.host() {
		*dst = tensor.Full(s.dt, v, slices.Clone(shape)...)
		return
	}
	s.view(&s.fViews, dst, s.nfloats(), shape)
	n := tensor.Numel(shape)
	if s.dt == tensor.F32 {
		s.f32 = append(s.f32, slices.Repeat([]float32{float32(v)}, n)...)
		return
	}
	s.floats = append(s.floats, slices.Repeat([]float64{v}, n)...)
}

// int64s stages v as an I64 tensor of shape (a copy of v).
func (s *staging) int64s(dst **tensor.Tensor, v []int64, shape ...int) {
	if s.host() {
		*dst = tensor.FromSlice(v, slices.Clone(shape)...)
		return
	}
	off := s.intLen()
	s.view(&s.iViews, dst, off, shape)
	if s.lazy {
		if off+len(v) <= len(s.last) && bytes.Equal(bytesOf(s.last[off:off+len(v)]), bytesOf(v)) {
			s.nInts = off + len(v)
			return
		}
		s.ints, s.lazy = append(s.ints[:0], s.last[:off]...), false
	}
	s.ints = append(s.ints, v...)
}

// boolMask stages v as a Bool tensor of shape.
func (s *staging) boolMask(dst **tensor.Tensor, v []bool, shape ...int) {
	if s.host() {
		*dst = tensor.FromSlice(v, slices.Clone(shape)...)
		return
	}
	s.view(&s.bViews, dst, len(s.bools), shape)
	s.bools = append(s.bools, v...)
}

// upload copies each non-empty buffer to the device (one host-to-device
// copy each) and points every staged tensor at its view. The buffers are
// left empty, so the staging can be used again.
func (s *staging) upload() error {
	if s.host() {
		return nil
	}
	// put copies one buffer of dt and n elements to the device: through
	// the device's Stager from raw (its bytes; nil: not stageable) into a
	// kept buffer, else from host() synchronously.
	put := func(dt tensor.DType, n int, raw []byte, host func() *tensor.Tensor, views []stagedView) error {
		var kept *keptBuffer
		var buf *tensor.Tensor
		var err error
		if s.reuse != nil {
			kept = s.reuse.take(dt, n)
		}
		// The index and mask buffers are remembered, so that the same
		// values (a graph of the last one's topology) are not copied
		// again; the features change with every graph.
		remember := dt == tensor.I64 || dt == tensor.Bool
		// An index buffer whose every slice matched last, going into the
		// buffer last went into, holds these values already.
		known := dt == tensor.I64 && s.lazy && kept != nil && kept == s.lastKept
		held := kept != nil && remember && kept.held != nil && (known || bytes.Equal(kept.held, raw))
		// A float buffer of an Inference's (up set) may be mapped
		// (newMapped): the features change with every graph, and the
		// kernels read them once; the indices, held across forwards and
		// read through chains of loads, stay in device memory.
		mappable := !remember && raw != nil && s.reuse != nil && s.reuse.up != nil && !s.reuse.noMapped
		switch {
		case held:
			buf = kept.t // holds these values already
		case kept != nil:
			buf = kept.t
			kept.held = kept.held[:0:0] // unknown until the copy is done
			switch {
			case buf.IsMapped():
				err = tensor.CopyFromHostBytes(buf, raw)
			case !s.reuse.up.stage(buf, raw):
				err = tensor.CopyFromHost(buf, host())
			}
		case n > 0 && mappable:
			if buf, err = s.reuse.newMapped(s.dev, dt, n, raw); buf == nil && err == nil {
				buf, err = host().ToDevice(s.dev)
			}
		case n > 0:
			buf, err = host().ToDevice(s.dev)
		default:
			buf, err = tensor.EmptyOn(s.dev, dt, 0)
		}
		if err != nil {
			return fmt.Errorf("tamiyo: copying the %v inputs to %v: %w", dt, s.dev, err)
		}
		if s.reuse != nil && kept == nil {
			kept = s.reuse.keep(buf) // a new buffer (a reused one is first already)
		}
		if kept != nil && remember && raw != nil && !held {
			kept.held = append(kept.held[:0], raw...)
		}
		if kept != nil {
			if !remember {
				s.reuse.lastMapped = buf.IsMapped()
			}
			if !buf.IsMapped() { // a mapped buffer is no Stager's
				s.reuse.up.use(buf)
			}
			kept.cut(s, views)
			if dt == tensor.I64 {
				s.lastKept = kept
			}
			return nil
		}
		for _, v := range views {
			*v.dst = s.viewOf(buf, v)
		}
		return nil
	}
	if s.reuse != nil && len(s.reuse.bufs) > 0 {
		// A call after the first: its copies go into kept buffers.
		n := 8 * s.intLen()
		if s.dt == tensor.F32 && s.reuse.noMapped { // else the features are mapped (newMapped)
			n = max(n, 4*len(s.f32))
		}
		s.reuse.up.reserve(max(n, len(s.bools)))
	}
	if len(s.fViews) > 0 {
		var err error
		if s.dt == tensor.F32 {
			err = put(tensor.F32, len(s.f32), bytesOf(s.f32), func() *tensor.Tensor { return tensor.FromSlice(s.f32, len(s.f32)) }, s.fViews)
		} else {
			err = put(s.dt, len(s.floats), nil, func() *tensor.Tensor { return tensor.FromFloat64s(s.dt, s.floats, len(s.floats)) }, s.fViews)
		}
		if err != nil {
			return err
		}
	}
	if len(s.iViews) > 0 {
		ints := s.indexValues()
		if err := put(tensor.I64, len(ints), bytesOf(ints), func() *tensor.Tensor { return tensor.FromSlice(ints, len(ints)) }, s.iViews); err != nil {
			return err
		}
		if s.reuse != nil && !s.lazy { // the next call compares with these
			s.last, s.ints = s.ints, s.last
		}
	}
	if len(s.bViews) > 0 {
		if err := put(tensor.Bool, len(s.bools), bytesOf(s.bools), func() *tensor.Tensor { return tensor.FromSlice(s.bools, len(s.bools)) }, s.bViews); err != nil {
			return err
		}
	}
	s.reset()
	return nil
}
