package aggregation

import (
	"slices"
	"strconv"

	"github.com/esper-go/esper/kernels"
	"github.com/esper-go/esper/nn"
	"github.com/esper-go/esper/tensor"
)

// The accumulator's device part. RecordTensors, RecordTeacherNormTensor
// and RecordCombineTensor keep the figures that depend on the gradients
// (norms, shares, pairwise conflicts, layer norms, the teacher's norm,
// the combination's conflict count) as running F64 sums on the
// gradients' device; what the caller passes as numbers (weights, alphas,
// attribution, use counts) goes into the host sums as Record does. Flush
// brings the device sums over in one explicit copy (one host sync per
// epoch) and adds them to the host sums; Finalize flushes first.

// devBlock holds the device sums of one participant list (in order): the
// trainer's seeds are usually the same from step to step, so a step adds
// its figures to one block with a single launch.
type devBlock struct {
	names  []string
	k, nl  int            // participants, layers
	acc    *tensor.Tensor // F64 [k·(3+nl)]: norm | share | conflicts | layer norms (k×nl)
	step   *tensor.Tensor // the step's figures, same layout
	norms  *tensor.Tensor // views of step: [k] norms
	shares *tensor.Tensor // [k]
	confs  *tensor.Tensor // [k, 1]
	layers *tensor.Tensor // [k·nl]

	normSum *tensor.Tensor // F64 [1]
	normPos *tensor.Tensor // Bool [1]
	zero64  *tensor.Tensor // F64 [1] 0
	one64   *tensor.Tensor // F64 [1] 1
	gram    *tensor.Tensor // [k·k] in the gradients' dtype: pairwise inner products
	gramV   []*tensor.Tensor
	neg     *tensor.Tensor // Bool [k·k]
	negKK   *tensor.Tensor // neg as [k, k]
	flags   *tensor.Tensor // F64 [k, k]
}

// devSums are the accumulator's pending device sums.
type devSums struct {
	blocks []*devBlock
	glob   *tensor.Tensor // F64 [2]: teacher norm sum, combination conflicts
	tnorm  *tensor.Tensor // view glob[0]
	confs  *tensor.Tensor // view glob[1]
	prod   *tensor.Tensor // scratch of the inner products: [n] in the gradients' dtype
	xs     []*tensor.Tensor
}

// RecordTensors is Record for a step whose per-seed vectors are tensors
// on a device (SeedTensors.Flats): the same validation and the same
// figures, with the norms, shares, pairwise conflicts and layer norms
// computed and summed on that device by its backend — a ForeachNorm for
// the norms, one inner product per pair (2 to 16 participants), a
// ForeachNorm over the layer ranges and one Add into the participant
// list's running sums — and nothing read on the host. flats are
// contiguous float tensors of one dtype, length and device. The device
// sums reach the report at Flush (or Finalize); weights, alphas and the
// attribution are host numbers and are summed at once, as Record does.
//
// The figures agree with Record's within float32 rounding: the norms are
// float64 sums as on the host, the inner products of the conflict test
// round their products to the gradients' dtype.
func (a *SeedMetricsAccumulator) RecordTensors(names []string, flats []*tensor.Tensor, weights []float64, alphaBySeed, attribSums map[string]float64, attribUses int) error {
	const op = "SeedMetricsAccumulator.RecordTensors"
	n := len(names)
	if n == 0 {
		return nil
	}
	if len(flats) != n || len(weights) != n {
		return invalid(op, "%d names, %d gradients and %d weights", n, len(flats), len(weights))
	}
	if flats[0] == nil {
		return invalid(op, "gradient 0 is nil")
	}
	size, dev, dt := flats[0].Numel(), flats[0].Device(), flats[0].DType()
	for i := range n {
		if err := checkVector(op, "gradient "+strconv.Itoa(i), flats[i], size); err != nil {
			return err
		}
		if flats[i].Device() != dev || flats[i].DType() != dt {
			return invalid(op, "gradient %d is %v on %v, gradient 0 %v on %v", i, flats[i].DType(), flats[i].Device(), dt, dev)
		}
	}
	if err := a.checkParticipants(op, names, weights, size); err != nil {
		return err
	}
	be, err := backendFor(op, dev)
	if err != nil {
		return err
	}
	b, err := a.block(op, be, names, dev, dt, size)
	if err != nil {
		return err
	}

	// Device figures.
	be.ForeachNorm(b.norms, flats)
	be.Reduce(kernels.Sum, b.normSum, b.norms, axis0)
	be.BinaryScalar(kernels.Gt, b.normPos, b.normSum, 0, false)
	be.Binary(kernels.Div, b.shares, b.norms, b.normSum)
	be.Where(b.shares, b.normPos, b.shares, b.zero64)
	if n >= 2 && n <= maxConflictSeeds {
		be.Fill(b.gram, 0)
		for i := range n {
			fi := vectorView(flats[i])
			for j := i + 1; j < n; j++ {
				dotInto(be, b.gramV[i*n+j], fi, vectorView(flats[j]), a.dev.prod)
				be.Copy(b.gramV[j*n+i], b.gramV[i*n+j])
			}
		}
		be.BinaryScalar(kernels.Lt, b.neg, b.gram, 0, false)
		be.Where(b.flags, b.negKK, b.one64, b.zero64)
		be.Reduce(kernels.Sum, b.confs, b.flags, axis1)
	} else {
		be.Fill(b.confs, 0)
	}
	if b.nl > 0 {
		a.dev.xs = a.dev.xs[:0]
		for _, f := range flats {
			fv := vectorView(f)
			for _, l := range a.opts.Layers {
				a.dev.xs = append(a.dev.xs, segment(fv, l.Start, l.Len()))
			}
		}
		be.ForeachNorm(b.layers, a.dev.xs)
		clear(a.dev.xs)
	}
	be.Binary(kernels.Add, b.acc, b.acc, b.step)

	// Host figures, as Record.
	wmean := 0.0
	for _, w := range weights {
		wmean += w
	}
	a.weightsSum += wmean / float64(n)
	a.weightsUses++
	attribTotal := 0.0
	if attribUses > 0 {
		for _, v := range attribSums {
			attribTotal += v
		}
	}
	for i, name := range names {
		t := a.seed(name)
		t.weight += weights[i]
		t.alpha += alphaBySeed[name]
		if attribTotal > 0 {
			t.teacherSplit += attribSums[name] / attribTotal
		}
		t.uses++
	}
	if attribUses > a.attribUses {
		a.attribUses = attribUses
	}
	return nil
}

// RecordTeacherNormTensor is RecordTeacherNorm for a norm that is a
// one-element F64 tensor on a device (SeedTensors.TeacherNorm): it is
// added to the teacher's norm and to teacher_share on the device. Since
// the value is not read, a NaN or negative norm is not refused as
// RecordTeacherNorm refuses it; it shows in the epoch's figures instead.
func (a *SeedMetricsAccumulator) RecordTeacherNormTensor(norm *tensor.Tensor) error {
	const op = "SeedMetricsAccumulator.RecordTeacherNormTensor"
	if err := checkScalar(op, "norm", norm); err != nil {
		return err
	}
	be, err := a.globals(op, norm.Device())
	if err != nil {
		return err
	}
	be.Binary(kernels.Add, a.dev.tnorm, a.dev.tnorm, vectorView(norm))
	a.seed(TeacherID).uses++
	a.teacherUses++
	return nil
}

// RecordCombineTensor is RecordCombine for a conflict count that is a
// one-element F64 tensor on a device (what TensorCombiner.CombineInto
// returns): microbatches is added at once, the count on the device.
func (a *SeedMetricsAccumulator) RecordCombineTensor(microbatches int, conflicts *tensor.Tensor) error {
	const op = "SeedMetricsAccumulator.RecordCombineTensor"
	if microbatches < 0 {
		return invalid(op, "%d microbatches", microbatches)
	}
	if err := checkScalar(op, "conflicts", conflicts); err != nil {
		return err
	}
	be, err := a.globals(op, conflicts.Device())
	if err != nil {
		return err
	}
	be.Binary(kernels.Add, a.dev.confs, a.dev.confs, vectorView(conflicts))
	a.microTotal += microbatches
	return nil
}

// Flush brings the device sums of RecordTensors, RecordTeacherNormTensor
// and RecordCombineTensor to the host — all of them gathered and copied
// at once (nn.HostCopies: one host sync per device) — adds them to the
// host sums and drops them. Without pending device sums it does nothing
// and costs nothing. Finalize calls it; a trainer that wants the copy's
// error, or the sync outside its timed region, calls it first, or reads
// PendingSums with its own tensors and hands their copies to FlushFrom.
// On error the device sums stay pending.
func (a *SeedMetricsAccumulator) Flush() error {
	ts := a.PendingSums()
	if ts == nil {
		return nil
	}
	host, err := nn.HostCopies(ts)
	if err != nil {
		return invalid("SeedMetricsAccumulator.Flush", "reading the device sums: %v", err)
	}
	return a.FlushFrom(host)
}

// PendingSums returns the device sums Flush would read (nil when there
// are none), for a caller that reads them together with its own tensors
// in one host sync; their host copies, in the same order, go to
// FlushFrom. Nothing may be recorded on a device in between.
func (a *SeedMetricsAccumulator) PendingSums() []*tensor.Tensor {
	if len(a.dev.blocks) == 0 && a.dev.glob == nil {
		return nil
	}
	ts := make([]*tensor.Tensor, 0, len(a.dev.blocks)+1)
	for _, b := range a.dev.blocks {
		ts = append(ts, b.acc)
	}
	if a.dev.glob != nil {
		ts = append(ts, a.dev.glob)
	}
	return ts
}

// FlushFrom is Flush with the host copies of PendingSums (host, in its
// order): it adds them to the host sums and drops the device sums. Copies
// that do not match the pending sums (count, dtype, size) are an error,
// and the device sums stay pending.
func (a *SeedMetricsAccumulator) FlushFrom(host []*tensor.Tensor) error {
	const op = "SeedMetricsAccumulator.FlushFrom"
	ts := a.PendingSums()
	if len(host) != len(ts) {
		return invalid(op, "%d host copies for %d pending device sums", len(host), len(ts))
	}
	for i, h := range host {
		if h == nil || !h.Device().IsCPU() || h.DType() != ts[i].DType() || h.Numel() != ts[i].Numel() || !h.IsContiguous() {
			return invalid(op, "host copy %d does not match its device sum (%v %v on %v)", i, ts[i].DType(), ts[i].Shape(), ts[i].Device())
		}
	}
	if len(ts) == 0 {
		return nil
	}
	for bi, b := range a.dev.blocks {
		v := host[bi].F64()
		k := b.k
		for i, name := range b.names {
			t := a.seed(name)
			t.norm += v[i]
			t.share += v[k+i]
			t.conflicts += int(v[2*k+i])
			for l := range b.nl {
				t.layers[l] += v[3*k+i*b.nl+l]
			}
		}
	}
	if a.dev.glob != nil {
		g := host[len(host)-1].F64()
		if a.teacherUses > 0 {
			a.seed(TeacherID).norm += g[0]
			a.teacherNormSum += g[0]
		}
		a.conflictsTotal += int(g[1])
	}
	a.dropDevice()
	return nil
}

// dropDevice forgets the pending device sums.
func (a *SeedMetricsAccumulator) dropDevice() {
	clear(a.dev.blocks)
	a.dev.blocks = a.dev.blocks[:0]
	a.dev.glob, a.dev.tnorm, a.dev.confs = nil, nil, nil
}

// block returns the device sums of the participant list names on dev,
// made (zeroed) on first use. A step whose list matches an earlier one
// adds to its block, so the usual epoch (the same seeds every step) has
// one block and one Add a step. The scratch vector of the inner products
// (a.dev.prod, made here for dt and size) is shared by all blocks and
// kept across epochs.
func (a *SeedMetricsAccumulator) block(op string, be kernels.Backend, names []string, dev tensor.Device, dt tensor.DType, size int) (*devBlock, error) {
	if p := a.dev.prod; p == nil || p.Device() != dev || p.DType() != dt || p.Numel() != size {
		p, err := emptyOn(op, dev, dt, size)
		if err != nil {
			return nil, err
		}
		a.dev.prod = p
	}
	for _, b := range a.dev.blocks {
		if b.acc.Device() == dev && slices.Equal(b.names, names) {
			if b.gram.DType() != dt {
				// Same seeds, gradients of another dtype.
				g, err := emptyOn(op, dev, dt, b.k*b.k)
				if err != nil {
					return nil, err
				}
				b.gram, b.gramV = g, elemViews(g)
			}
			return b, nil
		}
	}
	k, nl := len(names), len(a.opts.Layers)
	b := &devBlock{names: slices.Clone(names), k: k, nl: nl}
	var err error
	alloc := func(dt tensor.DType, v float64, shape ...int) *tensor.Tensor {
		if err != nil {
			return nil
		}
		var t *tensor.Tensor
		t, err = filledOn(op, be, dev, dt, v, shape...)
		return t
	}
	w := k * (3 + nl)
	b.acc = alloc(tensor.F64, 0, w)
	b.step = alloc(tensor.F64, 0, w)
	b.normSum = alloc(tensor.F64, 0, 1)
	b.normPos = alloc(tensor.Bool, 0, 1)
	b.zero64 = alloc(tensor.F64, 0, 1)
	b.one64 = alloc(tensor.F64, 1, 1)
	b.gram = alloc(dt, 0, k*k)
	b.neg = alloc(tensor.Bool, 0, k*k)
	b.flags = alloc(tensor.F64, 0, k, k)
	if err != nil {
		return nil, err
	}
	b.norms = segment(b.step, 0, k)
	b.shares = segment(b.step, k, k)
	b.confs = tensor.New(b.step.Storage(), []int{k, 1}, []int{1, 1}, b.step.Offset()+2*k)
	b.layers = segment(b.step, 3*k, k*nl)
	b.gramV = elemViews(b.gram)
	b.negKK = b.neg.Reshape(k, k)
	a.dev.blocks = append(a.dev.blocks, b)
	return b, nil
}

// globals returns the backend of dev and makes the device's global sums
// (teacher norm, combination conflicts) there on first use. Sums pending
// on another device are flushed first (a model that moved mid-epoch).
func (a *SeedMetricsAccumulator) globals(op string, dev tensor.Device) (kernels.Backend, error) {
	be, err := backendFor(op, dev)
	if err != nil {
		return nil, err
	}
	if a.dev.glob != nil && a.dev.glob.Device() != dev {
		if err := a.Flush(); err != nil {
			return nil, err
		}
	}
	if a.dev.glob == nil {
		g, err := filledOn(op, be, dev, tensor.F64, 0, 2)
		if err != nil {
			return nil, err
		}
		a.dev.glob, a.dev.tnorm, a.dev.confs = g, segment(g, 0, 1), segment(g, 1, 1)
	}
	return be, nil
}

// checkScalar checks a one-element contiguous F64 tensor named what.
func checkScalar(op, what string, t *tensor.Tensor) error {
	switch {
	case t == nil:
		return invalid(op, "%s is nil", what)
	case t.Numel() != 1 || t.DType() != tensor.F64 || !t.IsContiguous():
		return invalid(op, "%s is %v %v, want one contiguous f64 element", what, t.DType(), t.Shape())
	}
	return nil
}
