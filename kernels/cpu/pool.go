package cpu

import (
	"runtime"
	"sync"
)

// The worker pool: persistent goroutines taking ranges from a channel.
// parallelFor never allocates, so it can run inside replayed launches.

type task struct {
	body   func(lo, hi int)
	lo, hi int
	wg     *sync.WaitGroup
}

var (
	poolOnce sync.Once
	tasks    chan task
	wgFree   chan *sync.WaitGroup
)

func startPool() {
	n := runtime.NumCPU()
	tasks = make(chan task, 4*n)
	wgFree = make(chan *sync.WaitGroup, 64)
	for i := 0; i < cap(wgFree); i++ {
		wgFree <- new(sync.WaitGroup)
	}
	for i := 0; i < n; i++ {
		go func() {
			for t := range tasks {
				t.body(t.lo, t.hi)
				t.wg.Done()
			}
		}()
	}
}

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
	var wg *sync.WaitGroup
	select {
	case wg = <-wgFree:
	default:
		body(0, n) // every wait group busy: run inline rather than allocate
		return
	}
	step := (n + parts - 1) / parts
	for lo := step; lo < n; lo += step {
		hi := min(lo+step, n)
		wg.Add(1)
		select {
		case tasks <- task{body: body, lo: lo, hi: hi, wg: wg}:
		default:
			wg.Done()
			body(lo, hi)
		}
	}
	body(0, min(step, n))
	wg.Wait()
	wgFree <- wg
}
