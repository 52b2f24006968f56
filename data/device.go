package data

import (
	"errors"
	"fmt"
	"time"

	"github.com/esper-go/esper/kernels"
	"github.com/esper-go/esper/tensor"
)

// The device input path (LoaderOptions.Device without Resident): the
// host ring assembles batches as on the CPU, and Next copies them to the
// device one batch ahead of the consumer, through a copier — pinned
// staging on a backend that offers it (kernels.Stagers), synchronous
// copies (tensor.ToDevice) otherwise. Both run the same sequence; for
// batch i of an epoch, Next does
//
//	await(i%2)                       // batch i's copy, issued by the previous call
//	release((i+1)%2)                 // its buffers were read by step i−1, enqueued already
//	ahead((i+1)%2, host batch i+1)   // runs behind step i
//	return buffers i%2
//
// (the first call of an epoch issues batch 0's copy and awaits it at
// once). A device buffer is released only once the consumer has asked
// for the batch after the one it holds, so the copy into it waits for
// every step that read it; the host batch goes back to the workers as
// soon as its copy has been issued (into a pinned buffer, or to the
// device).

// copier copies host batches into two device buffer sets, k = 0 and 1.
type copier interface {
	// ahead issues the copy of the host batch (x, y) into buffer set k.
	ahead(k int, x, y *tensor.Tensor) error
	// await returns buffer set k's batch, ready for the work enqueued
	// after this call.
	await(k int) (x, y *tensor.Tensor, err error)
	// release marks the work enqueued so far as the last reader of
	// buffer set k: the next copy into it waits for that work.
	release(k int) error
	// pinned reports whether the copies go through pinned staging.
	pinned() bool
	close() error
}

// devicePath is the state of the device input path.
type devicePath struct {
	l         *Loader
	cp        copier
	delivered int  // batches of the epoch delivered
	staged    bool // a batch's copy was issued and not yet awaited
	// indices are the dataset indices of the batch staged in each set.
	indices [2][]int
	batch   Batch
}

func newDevicePath(l *Loader, rows int, shape []int, stagers kernels.Stagers) (*devicePath, error) {
	p := &devicePath{l: l}
	p.batch.l = l
	if stagers == nil {
		p.cp = &syncCopier{dev: l.o.Device}
		return p, nil
	}
	c := &stagedCopier{}
	for k := range 2 {
		var err error
		if c.x[k], err = tensor.EmptyOn(l.o.Device, tensor.F32, rows, shape[0], shape[1], shape[2]); err == nil {
			c.y[k], err = tensor.EmptyOn(l.o.Device, tensor.I64, rows)
		}
		if err != nil {
			c.free()
			return nil, fmt.Errorf("device batch buffers on %v: %w", l.o.Device, err)
		}
		if l.tail != 0 {
			c.xt[k], c.yt[k] = c.x[k].Narrow(0, 0, l.tail), c.y[k].Narrow(0, 0, l.tail)
		}
	}
	// Two batches in flight, images and labels each: four pinned
	// buffers, so that filling one never waits for a copy still running.
	st, err := stagers.NewStager(4, max(c.x[0].Nbytes(), c.y[0].Nbytes()))
	if err != nil {
		c.free()
		return nil, fmt.Errorf("pinned staging on %v: %w", l.o.Device, err)
	}
	c.st = st
	p.cp = c
	return p, nil
}

// stage takes the next host batch (batch i of the epoch) and issues its
// copy into buffer set k, after releasing k. It returns the time it
// waited for the host batch.
func (p *devicePath) stage(i, k int) time.Duration {
	l := p.l
	hb, ok := l.nextHost()
	if !ok || hb.Index != i {
		panic(fmt.Sprintf("data: Loader: the host ring gave no batch %d of epoch %d to copy to %v", i, l.epoch, l.o.Device))
	}
	t0 := time.Now()
	err := p.cp.release(k)
	if err == nil {
		err = p.cp.ahead(k, hb.X, hb.Y)
	}
	l.stats.CopyTime += time.Since(t0)
	if err != nil {
		panic(fmt.Sprintf("data: Loader: copying batch %d of epoch %d to %v: %v", i, l.epoch, l.o.Device, err))
	}
	l.stats.Copies += 2
	p.indices[k] = hb.Indices
	p.staged = true
	l.releaseHeld() // the host buffers were copied: back to the workers
	return hb.InputWait
}

// nextDevice is Next on the device input path.
func (l *Loader) nextDevice() (*Batch, bool) {
	p := l.dp
	i := p.delivered
	if i >= l.batches {
		return nil, false
	}
	k := i % 2
	var wait time.Duration
	if !p.staged { // the epoch's first batch
		wait = p.stage(i, k)
	}
	t0 := time.Now()
	x, y, err := p.cp.await(k)
	l.stats.CopyTime += time.Since(t0)
	if err != nil {
		panic(fmt.Sprintf("data: Loader: awaiting the copy of batch %d of epoch %d to %v: %v", i, l.epoch, l.o.Device, err))
	}
	p.staged = false
	if i+1 < l.batches {
		wait += p.stage(i+1, 1-k)
	}
	p.delivered++
	b := &p.batch
	b.X, b.Y, b.Epoch, b.Index, b.Indices, b.InputWait = x, y, l.epoch, i, p.indices[k], wait
	return b, true
}

// reset abandons the epoch: a copy issued and not awaited is awaited
// (the device's stream orders after it; the host does not wait), and
// both buffer sets are released, so that the next copies wait for all
// the work enqueued so far.
func (p *devicePath) reset() error {
	var err error
	if p.staged {
		_, _, err = p.cp.await(p.delivered % 2)
		p.staged = false
	}
	for k := range 2 {
		err = errors.Join(err, p.cp.release(k))
	}
	p.delivered = 0
	p.indices = [2][]int{}
	p.batch.X, p.batch.Y, p.batch.Indices = nil, nil, nil
	if err != nil {
		return fmt.Errorf("data: Loader: abandoning the copies to %v: %w", p.l.o.Device, err)
	}
	return nil
}

// close waits for the copies in flight and frees the staging resources;
// an error is dropped (Close has no error to return, and the loader is
// finished).
func (p *devicePath) close() {
	_ = p.reset()
	_ = p.cp.close()
}

// syncCopier copies with tensor.ToDevice: each batch gets new device
// tensors, copied before ahead returns.
type syncCopier struct {
	dev  tensor.Device
	x, y [2]*tensor.Tensor
}

func (c *syncCopier) ahead(k int, x, y *tensor.Tensor) error {
	var err error
	if c.x[k], err = x.ToDevice(c.dev); err != nil {
		return fmt.Errorf("images: %w", err)
	}
	if c.y[k], err = y.ToDevice(c.dev); err != nil {
		return fmt.Errorf("labels: %w", err)
	}
	return nil
}

func (c *syncCopier) await(k int) (x, y *tensor.Tensor, err error) {
	if c.x[k] == nil {
		return nil, nil, fmt.Errorf("await of buffer set %d: nothing was copied", k)
	}
	return c.x[k], c.y[k], nil
}

// release drops the set's tensors: their storage goes when no step
// holds them.
func (c *syncCopier) release(k int) error {
	c.x[k], c.y[k] = nil, nil
	return nil
}

func (c *syncCopier) pinned() bool { return false }
func (c *syncCopier) close() error { return nil }

// stagedCopier copies through a kernels.Stager into two device buffer
// sets of full batches, with views of their first rows for a partial
// last batch.
type stagedCopier struct {
	st     kernels.Stager
	x, y   [2]*tensor.Tensor // full-size device buffers
	xt, yt [2]*tensor.Tensor // their first rows, for the partial last batch; nil if none
	cx, cy [2]*tensor.Tensor // where the batch staged into each set went
}

// hostBytes is the bytes of x, a contiguous CPU tensor.
func hostBytes(x *tensor.Tensor) []byte {
	off := x.Offset() * x.DType().Size()
	return x.Storage().Bytes()[off : off+x.Nbytes()]
}

func (c *stagedCopier) ahead(k int, x, y *tensor.Tensor) error {
	dx, dy := c.x[k], c.y[k]
	if x.Dim(0) != dx.Dim(0) {
		dx, dy = c.xt[k], c.yt[k]
		if dx == nil || x.Dim(0) != dx.Dim(0) {
			return fmt.Errorf("a batch of %d rows for buffers of %d", x.Dim(0), c.x[k].Dim(0))
		}
	}
	c.cx[k], c.cy[k] = dx, dy
	for _, cp := range [2][2]*tensor.Tensor{{dx, x}, {dy, y}} {
		dst, src := cp[0], hostBytes(cp[1])
		short := false
		if err := c.st.StageAhead(dst, func(pinned []byte) { short = copy(pinned, src) != len(pinned) }); err != nil {
			return err
		}
		if short {
			return fmt.Errorf("%d bytes of %v %v for a %v %v device buffer", len(src), cp[1].DType(), cp[1].Shape(), dst.DType(), dst.Shape())
		}
	}
	return nil
}

func (c *stagedCopier) await(k int) (x, y *tensor.Tensor, err error) {
	if c.cx[k] == nil {
		return nil, nil, fmt.Errorf("await of buffer set %d: nothing was staged", k)
	}
	if err := c.st.Await(c.cx[k]); err != nil {
		return nil, nil, err
	}
	if err := c.st.Await(c.cy[k]); err != nil {
		return nil, nil, err
	}
	x, y = c.cx[k], c.cy[k]
	c.cx[k], c.cy[k] = nil, nil
	return x, y, nil
}

func (c *stagedCopier) release(k int) error {
	return errors.Join(c.st.Release(c.x[k]), c.st.Release(c.y[k]))
}

func (c *stagedCopier) pinned() bool { return true }

func (c *stagedCopier) close() error {
	err := c.st.Close()
	c.free()
	return err
}

// free gives the device buffers back.
func (c *stagedCopier) free() {
	for k := range 2 {
		for _, t := range []*tensor.Tensor{c.x[k], c.y[k]} {
			if t != nil {
				t.Storage().Free()
			}
		}
	}
}

// resident is a dataset copied to the device whole (LoaderOptions.Resident),
// with the current epoch's order there and the batch buffers the index
// selects fill.
type resident struct {
	l      *Loader
	be     kernels.Backend
	x, y   *tensor.Tensor // the dataset on the device, [N, C, H, W] and [N]
	host   *tensor.Tensor // the order on the host, I64 [N], copied to ord
	ord    *tensor.Tensor // the order of epoch ordOf on the device
	ordOf  int
	bx, by *tensor.Tensor // the batch buffers, [B, …]
	tx, ty *tensor.Tensor // their first rows, for the partial last batch; nil if none
	// vx and vy are the batches of an unshuffled loader, views of x and
	// y made at their first use (the order is the identity).
	vx, vy []*tensor.Tensor
	batch  Batch
}

// newResident copies l's dataset to the device and, with Shuffle,
// allocates the batch buffers of rows rows.
func newResident(l *Loader, rows int, shape []int) (*resident, error) {
	dev := l.o.Device
	be, err := kernels.Lookup(dev)
	if err != nil {
		return nil, fmt.Errorf("device %v: %w (open it with kernels/device.Open first)", dev, err)
	}
	r := &resident{l: l, be: be, ordOf: -1, host: tensor.Empty(tensor.I64, l.n)}
	r.batch.l = l
	t0 := time.Now()
	hx, hy, err := wholeDataset(l.ds, l.n, shape)
	if err != nil {
		return nil, err
	}
	if r.x, err = hx.ToDevice(dev); err == nil {
		r.y, err = hy.ToDevice(dev)
	}
	// Without Shuffle the batches are views of the dataset: no buffers.
	if err == nil && l.o.Shuffle {
		if r.bx, err = tensor.EmptyOn(dev, tensor.F32, rows, shape[0], shape[1], shape[2]); err == nil {
			r.by, err = tensor.EmptyOn(dev, tensor.I64, rows)
		}
	}
	if err != nil {
		r.free()
		return nil, fmt.Errorf("the resident dataset on %v: %w", dev, err)
	}
	if l.tail != 0 && l.o.Shuffle {
		r.tx, r.ty = r.bx.Narrow(0, 0, l.tail), r.by.Narrow(0, 0, l.tail)
	}
	d := time.Since(t0)
	l.stats.Copies += 2
	l.stats.CopyTime += d
	l.stats.ResidentCopyTime += d
	return r, nil
}

// wholeDataset returns every sample of ds on the host: a TensorDataset's
// own tensors, else all of them gathered by its Batch.
func wholeDataset(ds Dataset, n int, shape []int) (x, y *tensor.Tensor, err error) {
	if td, ok := ds.(*TensorDataset); ok {
		return td.Images(), td.Labels(), nil
	}
	x, y = tensor.Empty(tensor.F32, n, shape[0], shape[1], shape[2]), tensor.Empty(tensor.I64, n)
	all := make([]int, n)
	for i := range all {
		all[i] = i
	}
	defer func() {
		if p := recover(); p != nil {
			x, y, err = nil, nil, fmt.Errorf("reading the dataset: %v", p)
		}
	}()
	ds.Batch(all, x, y)
	return x, y, nil
}

// order puts epoch e's order (the loader's perm) on the device, at the
// epoch's first batch: one copy, skipped when it is there already (the
// same epoch again, or any epoch without Shuffle).
func (r *resident) order(e int) {
	l := r.l
	if r.ord != nil && (r.ordOf == e || !l.o.Shuffle) {
		return
	}
	t0 := time.Now()
	h := r.host.I64()
	for i, v := range l.perm {
		h[i] = int64(v)
	}
	ord, err := r.host.ToDevice(l.o.Device)
	if err != nil {
		panic(fmt.Sprintf("data: Loader: copying the order of epoch %d to %v: %v", e, l.o.Device, err))
	}
	if r.ord != nil {
		r.ord.Storage().Free()
	}
	r.ord, r.ordOf = ord, e
	l.stats.Copies++
	l.stats.CopyTime += time.Since(t0)
}

// nextResident is Next on a resident dataset: batch i is the index
// select of the dataset by the order's rows [i·B, i·B+rows), into the
// batch buffers (enqueued after the steps that read the previous batch);
// without Shuffle it is a view of those rows of the dataset.
func (l *Loader) nextResident() (*Batch, bool) {
	r := l.res
	i := l.consumed
	if i >= l.batches {
		return nil, false
	}
	if i == 0 && l.o.Shuffle {
		r.order(l.epoch)
	}
	lo, rows := i*l.o.BatchSize, l.o.BatchSize
	dx, dy := r.bx, r.by
	if i == l.batches-1 && l.tail != 0 {
		rows, dx, dy = l.tail, r.tx, r.ty
	}
	if l.o.Shuffle {
		idx := r.ord.Narrow(0, lo, rows)
		r.be.IndexSelect(dx, r.x, 0, idx)
		r.be.IndexSelect(dy, r.y, 0, idx)
	} else {
		// The identity order: the batch is the dataset's rows [lo,
		// lo+rows) themselves, no launch, the same views every epoch
		// (Loader.Fixed).
		if r.vx == nil {
			r.vx, r.vy = make([]*tensor.Tensor, l.batches), make([]*tensor.Tensor, l.batches)
		}
		if r.vx[i] == nil {
			r.vx[i], r.vy[i] = r.x.Narrow(0, lo, rows), r.y.Narrow(0, lo, rows)
		}
		dx, dy = r.vx[i], r.vy[i]
	}
	l.consumed++
	b := &r.batch
	b.X, b.Y, b.Epoch, b.Index, b.Indices, b.InputWait = dx, dy, l.epoch, i, l.perm[lo:lo+rows], 0
	return b, true
}

// free gives the device memory back.
func (r *resident) free() {
	for _, t := range []*tensor.Tensor{r.x, r.y, r.ord, r.bx, r.by} {
		if t != nil {
			t.Storage().Free()
		}
	}
}
