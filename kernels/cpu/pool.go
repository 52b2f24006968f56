package cpu

import (
	"runtime"
	"sync"
	"sync/atomic"
)

// The worker pool: persistent goroutines that join a parallelFor when it
// hands them its state on a channel and take chunks of its items until
// none are left. parallelFor never allocates, so it can run inside
// replayed launches.

// forState is one parallelFor's shared state: its items are dealt out in
// chunks from next, first come first served, so that a worker slowed by
// another tenant of its core takes fewer of them instead of holding the
// launch up (a static split waits for the slower half).
type forState struct {
	wg     sync.WaitGroup
	next   atomic.Int64
	n      int
	chunk  int
	chunks int64
	body   func(lo, hi int)
}

// run takes chunks until none are left.
func (st *forState) run() {
	for {
		i := st.next.Add(1) - 1
		if i >= st.chunks {
			return
		}
		lo := int(i) * st.chunk
		st.body(lo, min(lo+st.chunk, st.n))
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
			for st := range tasks {
				st.run()
				st.wg.Done()
			}
		}()
	}
}

// chunksPerWorker is how many chunks parallelFor deals per worker.
const chunksPerWorker = 8

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
	st.chunk = (n + parts*chunksPerWorker - 1) / (parts * chunksPerWorker)
	st.chunks = int64((n + st.chunk - 1) / st.chunk)
	st.next.Store(0)
	for w := 1; w < parts; w++ {
		st.wg.Add(1)
		select {
		case tasks <- st:
		default:
			st.wg.Done() // the queue is full: the caller takes its share
		}
	}
	st.run()
	st.wg.Wait()
	st.body = nil
	stFree <- st
}
