package cpu

import (
	"runtime"
	"sync"
	"sync/atomic"
	"time"
)

// The worker pool: persistent goroutines that join a parallelFor when it
// hands them its state (through the polling worker's slot or a channel,
// see post) and take chunks of its items until none are left.
// parallelFor never allocates, so it can run inside replayed launches.

// forState is one parallelFor's shared state: its items are dealt out in
// chunks from next, first come first served, so that a worker slowed by
// another tenant of its core takes fewer of them instead of holding the
// launch up (a static split waits for the slower half). The chunks shrink
// as the items run out (guided scheduling): each is the items left over
// div (twice the workers), and at least chunk (a 32nd of a worker's
// share). Large early chunks keep a GEMM's B panels in use over many A
// panels; small late ones leave little for one worker to finish alone
// (with equal chunks of an eighth of a worker's share, 1024³ GEMMs peaked
// about 3% lower).
type forState struct {
	wg     sync.WaitGroup
	active atomic.Int32 // workers that joined and have not finished
	next   atomic.Int64 // items taken
	n      int
	chunk  int // the smallest chunk
	div    int
	body   func(lo, hi int)
}

// run takes chunks until none are left.
func (st *forState) run() {
	for {
		lo := st.next.Load()
		left := int64(st.n) - lo
		if left <= 0 {
			return
		}
		hi := lo + min(left, max(int64(st.chunk), left/int64(st.div)))
		if st.next.CompareAndSwap(lo, hi) {
			st.body(int(lo), int(hi))
		}
	}
}

var (
	poolOnce sync.Once
	tasks    chan *forState // a parallelFor for a worker to join
	stFree   chan *forState
)

func startPool() {
	n := runtime.NumCPU()
	tasks = make(chan *forState, 4*n)
	stFree = make(chan *forState, 64)
	for i := 0; i < cap(stFree); i++ {
		stFree <- new(forState)
	}
	for i := 0; i < n; i++ {
		go func() {
			for {
				st := nextTask()
				st.run()
				st.active.Add(-1)
				st.wg.Done()
			}
		}()
	}
}

// spinNanos is how long an idle worker polls for its next task, and a
// launch for its workers to finish, before blocking. Launches come in
// runs (a GEMM's packing then its panels, a training step's layers),
// and waking a blocked goroutine on another core costs 20–70 µs on a
// virtual machine (measured here: a worker joined a 380 µs launch 67 µs
// late), so the pool polls for a while first, as OpenMP runtimes do.
const spinNanos = 50_000

// One idle worker at a time polls spinSlot for its next launch (spinning
// is 1 while it does); parallelFor hands that worker a launch through the
// slot, every other worker through tasks. (A send on tasks would go to a
// worker blocked on it, not to the polling one.) One poller at most, so
// that with GOMAXPROCS = 2 a polling worker never keeps the caller from
// a P; it yields its P between polls all the same.
var (
	spinning atomic.Int32
	spinSlot atomic.Pointer[forState]
)

// nextTask returns the next launch for a worker to join: through
// spinSlot, polled for up to spinNanos when no other worker polls, else
// from tasks, waited for. A poller clears spinning before its last look
// at the slot, so a launch left there by post is always taken.
func nextTask() *forState {
	if spinning.CompareAndSwap(0, 1) {
		for deadline := nanotime() + spinNanos; nanotime() < deadline; {
			if st := spinSlot.Swap(nil); st != nil {
				spinning.Store(0)
				return st
			}
			runtime.Gosched()
		}
		spinning.Store(0)
		if st := spinSlot.Swap(nil); st != nil {
			return st
		}
	}
	return <-tasks
}

// post hands st to one more worker: the polling one if there is one,
// else through tasks. It reports false when the queue is full.
func post(st *forState) bool {
	if spinning.Load() == 1 && spinSlot.CompareAndSwap(nil, st) {
		// If the poller stopped before taking st, take it back.
		if spinning.Load() == 1 || !spinSlot.CompareAndSwap(st, nil) {
			return true
		}
	}
	select {
	case tasks <- st:
		return true
	default:
		return false
	}
}

// waitWorkers waits for the workers that joined st: polling first (see
// spinNanos), then blocking.
func (st *forState) waitWorkers() {
	for deadline := nanotime() + spinNanos; st.active.Load() > 0 && nanotime() < deadline; {
		runtime.Gosched()
	}
	st.wg.Wait()
}

// minChunksPerWorker is how many of the smallest chunks make a worker's
// share of a parallelFor.
const minChunksPerWorker = 32

// minWork is the amount of work (items × cost) below which a launch runs
// inline on the calling goroutine.
const minWork = 1 << 15

// parallelFor calls body over disjoint ranges covering [0, n). cost is
// the rough work per item, used to decide whether splitting pays. body
// must compute each item independently of how [0, n) is split (the
// determinism rule), and must not call parallelFor itself.
func parallelFor(n, cost int, body func(lo, hi int)) {
	if n <= 0 {
		return
	}
	// The cheap tests first: GOMAXPROCS(0) takes a scheduler lock, which
	// small launches (most of a tiny model's) should not pay for.
	if n == 1 || n*cost < minWork {
		body(0, n)
		return
	}
	p := runtime.GOMAXPROCS(0)
	if p == 1 {
		body(0, n)
		return
	}
	poolOnce.Do(startPool)
	parts := min(p, n)
	var st *forState
	select {
	case st = <-stFree:
	default:
		body(0, n) // every state busy: run inline rather than allocate
		return
	}
	st.n, st.body = n, body
	st.chunk = (n + parts*minChunksPerWorker - 1) / (parts * minChunksPerWorker)
	st.div = 2 * parts
	st.next.Store(0)
	for w := 1; w < parts; w++ {
		st.wg.Add(1)
		st.active.Add(1)
		if !post(st) {
			// The queue is full: the caller takes its share.
			st.active.Add(-1)
			st.wg.Done()
		}
	}
	st.run()
	st.waitWorkers()
	st.body = nil
	stFree <- st
}

// nanotime is a monotonic clock in nanoseconds.
func nanotime() int64 { return int64(time.Since(clockBase)) }

var clockBase = time.Now()
