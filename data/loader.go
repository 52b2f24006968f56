package data

import (
	"errors"
	"fmt"
	"iter"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/esper-go/esper/kernels"
	"github.com/esper-go/esper/tensor"
)

// Loader defaults.
const (
	DefaultBatchSize = 128
	DefaultPrefetch  = 2
)

// LoaderOptions configure a Loader. The zero value means batches of 128
// in dataset order, the last partial batch kept, two batches prefetched
// by one worker.
type LoaderOptions struct {
	// BatchSize is the number of samples per batch; zero means
	// DefaultBatchSize.
	BatchSize int
	// Shuffle visits the samples in a fresh random order each epoch, a
	// function of Seed and the epoch number only.
	Shuffle bool
	// Seed of the per-epoch shuffle.
	Seed uint64
	// DropLast drops the last batch of an epoch when it would be smaller
	// than BatchSize; otherwise it is delivered with fewer rows.
	DropLast bool
	// Prefetch is the number of batches assembled ahead of the consumer;
	// zero means DefaultPrefetch. The loader owns Prefetch+1 batch
	// buffers.
	Prefetch int
	// Workers is the number of goroutines assembling batches; zero means
	// one, which keeps up with any in-memory dataset (a batch is a
	// gather-copy).
	Workers int
	// Device is where the batches are delivered. The zero value, the
	// CPU, delivers the host buffers themselves. On another device (sim,
	// cuda) each batch is assembled on the host as above and copied to the
	// device one batch ahead of the consumer, into device buffers the
	// loader owns (see the package documentation, "Batches on a device");
	// the device must be open (kernels/device.Open). Resident changes how.
	Device tensor.Device
	// Pinned, on a Device whose backend stages copies
	// (kernels.Stagers: the CUDA backend), copies the batches through
	// page-locked host buffers on the backend's copy stream, so that the
	// copy of batch i+1 runs behind step i. On a backend without staging
	// (sim), on the CPU and with Resident it has no effect: the copies
	// are synchronous. Loader.Pinned reports whether it took effect.
	Pinned bool
	// Resident, on a Device other than the CPU, copies the whole dataset
	// to the device once, when the loader is made, and assembles every
	// batch there: an index select (the backend's IndexSelect) of the
	// epoch's order, which is copied to the device once per epoch.
	// Without Shuffle there is no order to copy: the batches are views of
	// the dataset's rows, the same every epoch (Fixed), so writing into
	// one writes into the dataset. The batches are bitwise those of the
	// host loader with the same options. It suits a small dataset
	// (Fashion-MNIST's 60 000 images are 188 MB in F32); Prefetch,
	// Workers and Pinned do not apply. On the CPU it has no effect.
	Resident bool
}

// Batch is one batch of a Loader. Its tensors and Indices belong to the
// loader and are recycled: a Batch is valid until the next call to Next
// (or Reset, Close, or its own Release), after which its buffers are
// refilled with a later batch. Copy what must outlive it.
type Batch struct {
	// X holds the images, F32 [B, C, H, W]; Y the labels, I64 [B]. B is
	// BatchSize except for a partial last batch. They live on
	// LoaderOptions.Device.
	X, Y *tensor.Tensor
	// Epoch and Index locate the batch: the Index-th batch of Epoch.
	Epoch, Index int
	// Indices are the dataset indices of the rows of X and Y.
	Indices []int
	// InputWait is how long Next waited for this batch to be ready (the
	// consumer's input stall; zero or near zero when prefetching keeps
	// up). On a device it is the wait of this call for the host batch it
	// staged ahead (zero with Resident).
	InputWait time.Duration

	l *Loader
	s *slot
}

// Release hands the batch's buffers back before the next call to Next,
// so the loader can start refilling them at once. The batch must not be
// used afterwards. Releasing a batch twice, or one that Next has already
// recycled, does nothing. A batch on a device holds no host buffer (its
// host batch went back when its copy was issued): Release does nothing,
// and its device buffers are recycled by the next Next.
func (b *Batch) Release() {
	if b.l != nil && b.s != nil && b.l.held == b.s {
		b.l.releaseHeld()
	}
}

// LoaderStats are cumulative figures of a Loader.
type LoaderStats struct {
	// Batches delivered by Next since the loader was created.
	Batches int
	// InputWait is the total time Next waited for batches, and
	// MaxInputWait the longest single wait.
	InputWait, MaxInputWait time.Duration
	// Copies counts the host-to-device copies the loader issued (two per
	// batch — images and labels — on a device; with Resident two for the
	// dataset and, with Shuffle, one per epoch's order), and CopyTime is
	// the time the consumer spent issuing them: the wall time of the synchronous
	// copies, or with pinned staging the host time of the staging calls
	// (filling the pinned buffers, enqueuing the copies and the device
	// stream's waits for them) but not the transfers, which run behind
	// the steps. CopyTime includes ResidentCopyTime, the one-time copy of
	// a Resident dataset when the loader was made.
	Copies                     int
	CopyTime, ResidentCopyTime time.Duration
}

// slot is one batch buffer of the ring.
type slot struct {
	x, y         *tensor.Tensor // full-size buffers
	xTail, yTail *tensor.Tensor // views of the first rows for a partial last batch; nil if none
	ready        chan struct{}  // a worker signals here when the slot's job is done
	pending      bool           // a job was dispatched and its signal not yet received
	workerPanic  any            // set by the worker before it signals
	batch        Batch
}

// job asks a worker to fill one slot.
type job struct {
	s    *slot
	gen  uint64
	idx  []int
	x, y *tensor.Tensor
}

// Loader delivers a Dataset in batches assembled ahead of the consumer by
// background goroutines into a ring of Prefetch+1 recycled buffers.
// Every epoch visits each sample once (DropLast aside), in dataset order
// or, with Shuffle, in an order that is a function of Seed and the epoch
// number only, so a run is reproducible whatever the timing.
//
// Next, Reset, Epoch, Release and Close belong to one consumer goroutine;
// a Loader is not safe for concurrent use by several. In steady state
// Next allocates nothing on the CPU and with pinned staging; the
// synchronous copies to a device allocate each batch's device tensors
// (tensor.ToDevice), and a Resident loader a view of the order per
// batch. Close stops the goroutines; a Loader that is not closed keeps
// them alive.
type Loader struct {
	ds       Dataset
	o        LoaderOptions
	n        int // samples
	batches  int // per epoch
	tail     int // rows of the partial last batch; 0 if none
	slots    []*slot
	jobs     chan job
	wg       sync.WaitGroup
	gen      atomic.Uint64 // bumped by Reset and Close; workers skip stale jobs
	perm     []int
	pcg      *rand.PCG
	rng      *rand.Rand
	epoch    int
	started  bool
	dispatch int // next batch of the epoch to hand to a worker
	consumed int // batches of the epoch delivered by Next
	held     *slot
	closed   bool
	stats    LoaderStats
	// dp is the device input path (nil on the CPU or with Resident), res
	// the resident dataset (nil without Resident).
	dp  *devicePath
	res *resident
}

// NewLoader validates the options, allocates the batch buffers, starts
// the workers and begins prefetching epoch 0. On a device it allocates
// the device buffers (and with Resident copies the dataset there); a
// device that is not open, or memory it cannot give, is an error.
func NewLoader(ds Dataset, o LoaderOptions) (*Loader, error) {
	var stagers kernels.Stagers
	if !o.Device.IsCPU() {
		be, err := kernels.Lookup(o.Device)
		if err != nil {
			return nil, fmt.Errorf("data: NewLoader: device %v: %w (open it with kernels/device.Open first)", o.Device, err)
		}
		if o.Pinned && !o.Resident {
			stagers, _ = be.(kernels.Stagers)
		}
	}
	return newLoader(ds, o, stagers)
}

// newLoader is NewLoader staging through stagers on a device when it is
// not nil (a test passes its own).
func newLoader(ds Dataset, o LoaderOptions, stagers kernels.Stagers) (*Loader, error) {
	if ds == nil {
		return nil, errors.New("data: NewLoader: nil dataset")
	}
	if o.BatchSize == 0 {
		o.BatchSize = DefaultBatchSize
	}
	if o.Prefetch == 0 {
		o.Prefetch = DefaultPrefetch
	}
	if o.Workers == 0 {
		o.Workers = 1
	}
	n := ds.Len()
	switch {
	case n <= 0:
		return nil, fmt.Errorf("data: NewLoader: empty dataset (%d samples)", n)
	case o.BatchSize < 0:
		return nil, fmt.Errorf("data: NewLoader: BatchSize %d (want > 0)", o.BatchSize)
	case o.Prefetch < 0 || o.Prefetch > 64:
		return nil, fmt.Errorf("data: NewLoader: Prefetch %d (want 1 to 64)", o.Prefetch)
	case o.Workers < 0 || o.Workers > 256:
		return nil, fmt.Errorf("data: NewLoader: Workers %d (want 1 to 256)", o.Workers)
	case o.DropLast && o.BatchSize > n:
		return nil, fmt.Errorf("data: NewLoader: BatchSize %d with DropLast over %d samples gives no batch", o.BatchSize, n)
	}
	shape := ds.Shape()
	if len(shape) != 3 || shape[0] <= 0 || shape[1] <= 0 || shape[2] <= 0 {
		return nil, fmt.Errorf("data: NewLoader: sample shape %v (want [C H W])", shape)
	}
	b := min(o.BatchSize, n) // a batch never exceeds the dataset
	l := &Loader{ds: ds, o: o, n: n, batches: n / o.BatchSize, perm: make([]int, n)}
	if r := n % o.BatchSize; r != 0 && !o.DropLast {
		l.batches++
		l.tail = r
	}
	l.pcg = rand.NewPCG(0, 0)
	l.rng = rand.New(l.pcg)
	if !o.Device.IsCPU() {
		var err error
		if o.Resident {
			l.res, err = newResident(l, b, shape)
		} else {
			l.dp, err = newDevicePath(l, b, shape, stagers)
		}
		if err != nil {
			return nil, fmt.Errorf("data: NewLoader: %w", err)
		}
	}
	if l.res != nil { // batches are assembled on the device: no host ring
		l.jobs = make(chan job)
		l.Reset(0)
		return l, nil
	}
	l.slots = make([]*slot, o.Prefetch+1)
	for i := range l.slots {
		s := &slot{
			x:     tensor.Empty(tensor.F32, b, shape[0], shape[1], shape[2]),
			y:     tensor.Empty(tensor.I64, b),
			ready: make(chan struct{}, 1),
		}
		if l.tail != 0 {
			s.xTail, s.yTail = s.x.Narrow(0, 0, l.tail), s.y.Narrow(0, 0, l.tail)
		}
		s.batch.l, s.batch.s = l, s
		l.slots[i] = s
	}
	l.jobs = make(chan job, len(l.slots))
	for range o.Workers {
		l.wg.Go(l.work)
	}
	l.Reset(0)
	return l, nil
}

// work fills slots until the job channel closes.
func (l *Loader) work() {
	for j := range l.jobs {
		if j.gen == l.gen.Load() {
			l.fill(j)
		}
		j.s.ready <- struct{}{}
	}
}

// fill runs one job, handing a panic of the dataset to the consumer.
func (l *Loader) fill(j job) {
	defer func() {
		if r := recover(); r != nil {
			j.s.workerPanic = r
		}
	}()
	l.ds.Batch(j.idx, j.x, j.y)
}

// Len is the number of batches per epoch.
func (l *Loader) Len() int { return l.batches }

// Options returns the options with defaults filled in.
func (l *Loader) Options() LoaderOptions { return l.o }

// Pinned reports whether the batches reach the device through pinned
// buffers on a staging stream (see LoaderOptions.Pinned).
func (l *Loader) Pinned() bool { return l.dp != nil && l.dp.cp.pinned() }

// Device is the device the batches are delivered on
// (LoaderOptions.Device).
func (l *Loader) Device() tensor.Device { return l.o.Device }

// CopyTime is the time spent issuing host-to-device copies since the
// loader was made (LoaderStats.CopyTime): what a trainer reports as its
// input copy time.
func (l *Loader) CopyTime() time.Duration { return l.stats.CopyTime }

// Stats returns the cumulative figures.
func (l *Loader) Stats() LoaderStats { return l.stats }

// Reset starts epoch e from its first batch: it abandons what is left of
// the current epoch (waiting for batches in flight, whose copies are
// skipped when they have not begun), draws the epoch's order and starts
// prefetching. Resetting to the epoch already prefetched, before any of
// its batches was taken, keeps the prefetched batches.
func (l *Loader) Reset(e int) {
	if l.closed {
		panic("data: Loader.Reset after Close")
	}
	if l.started && e == l.epoch && l.consumed == 0 {
		return
	}
	if l.dp != nil {
		if err := l.dp.reset(); err != nil {
			panic(err.Error())
		}
	}
	l.drain()
	l.epoch, l.started = e, true
	l.dispatch, l.consumed = 0, 0
	for i := range l.perm {
		l.perm[i] = i
	}
	if l.o.Shuffle {
		// Fisher–Yates with a stream owned by (Seed, epoch).
		l.pcg.Seed(l.o.Seed, splitmix64(uint64(e)))
		for i := len(l.perm) - 1; i > 0; i-- {
			j := l.rng.IntN(i + 1)
			l.perm[i], l.perm[j] = l.perm[j], l.perm[i]
		}
	}
	for _, s := range l.slots {
		l.dispatchInto(s)
	}
}

// drain invalidates outstanding jobs and waits until every slot is idle.
func (l *Loader) drain() {
	l.gen.Add(1)
	l.held = nil
	for _, s := range l.slots {
		if s.pending {
			<-s.ready
			s.pending = false
		}
		s.workerPanic = nil
	}
}

// dispatchInto hands the next batch of the epoch, if any, to a worker to
// be assembled in s.
func (l *Loader) dispatchInto(s *slot) {
	if l.dispatch >= l.batches {
		return
	}
	i := l.dispatch
	l.dispatch++
	lo := i * l.o.BatchSize
	b := &s.batch
	b.Epoch, b.Index, b.InputWait = l.epoch, i, 0
	if i == l.batches-1 && l.tail != 0 {
		b.X, b.Y, b.Indices = s.xTail, s.yTail, l.perm[lo:lo+l.tail]
	} else {
		b.X, b.Y, b.Indices = s.x, s.y, l.perm[lo:lo+l.o.BatchSize]
	}
	s.pending = true
	l.jobs <- job{s: s, gen: l.gen.Load(), idx: b.Indices, x: b.X, y: b.Y}
}

// releaseHeld recycles the slot of the batch the consumer holds.
func (l *Loader) releaseHeld() {
	s := l.held
	l.held = nil
	l.dispatchInto(s)
}

// Next returns the next batch of the current epoch, waiting for it if it
// is not ready yet, and false when the epoch is exhausted (or the loader
// closed). The previous batch is recycled. A panic of the dataset's
// Batch on a worker is raised here, as is a failed copy to the device.
func (l *Loader) Next() (*Batch, bool) {
	if l.closed {
		return nil, false
	}
	var b *Batch
	var ok bool
	switch {
	case l.res != nil:
		b, ok = l.nextResident()
	case l.dp != nil:
		b, ok = l.nextDevice()
	default:
		b, ok = l.nextHost()
	}
	if ok {
		l.stats.Batches++
	}
	return b, ok
}

// nextHost is Next on the host ring: the next host batch, held by the
// consumer until the next call.
func (l *Loader) nextHost() (*Batch, bool) {
	if l.held != nil {
		l.releaseHeld()
	}
	if l.consumed >= l.batches {
		return nil, false
	}
	s := l.slots[l.consumed%len(l.slots)]
	start := time.Now()
	<-s.ready
	wait := time.Since(start)
	s.pending = false
	if p := s.workerPanic; p != nil {
		s.workerPanic = nil
		panic(fmt.Sprintf("data: loader worker: %v", p))
	}
	l.consumed++
	l.held = s
	s.batch.InputWait = wait
	l.stats.InputWait += wait
	l.stats.MaxInputWait = max(l.stats.MaxInputWait, wait)
	return &s.batch, true
}

// Epoch resets the loader to epoch e and iterates over its batches:
//
//	for b := range loader.Epoch(e) { … }
//
// Each batch is valid for one iteration (see Batch). Breaking out of the
// loop leaves the rest of the epoch to the next Reset.
func (l *Loader) Epoch(e int) iter.Seq[*Batch] {
	return func(yield func(*Batch) bool) {
		l.Reset(e)
		for {
			b, ok := l.Next()
			if !ok || !yield(b) {
				return
			}
		}
	}
}

// Batches resets the loader to epoch e and iterates over its batches as
// (images, labels) pairs: Epoch without the Batch around them, each pair
// valid for one iteration. It makes a *Loader the trainer's data source
// (tolaria.Batches):
//
//	tolaria.TrainerOptions{Train: trainLoader, Val: valLoader, …}
func (l *Loader) Batches(e int) iter.Seq2[*tensor.Tensor, *tensor.Tensor] {
	return func(yield func(*tensor.Tensor, *tensor.Tensor) bool) {
		for b := range l.Epoch(e) {
			if !yield(b.X, b.Y) {
				return
			}
		}
	}
}

// Fixed reports whether every epoch yields the very same batch tensors
// holding the same values (tolaria.FixedBatches): a Resident loader
// without Shuffle, whose batches are views of the dataset on the device.
// With such a validation source, a trainer with Capture replays each
// validation pass as one graph.
func (l *Loader) Fixed() bool { return l.res != nil && !l.o.Shuffle }

// Close stops the workers and waits for them; batches still being
// assembled are abandoned. Close is idempotent; after it Next returns
// false.
func (l *Loader) Close() {
	if l.closed {
		return
	}
	l.closed = true
	l.held = nil
	l.gen.Add(1)
	close(l.jobs)
	l.wg.Wait()
	if l.dp != nil {
		l.dp.close()
	}
	if l.res != nil {
		l.res.free()
	}
}
