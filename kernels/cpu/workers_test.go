package cpu

import (
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// checkCover runs parallelFor over n items and checks that body saw
// every item exactly once, in ranges inside [0, n).
func checkCover(t *testing.T, n, cost int) {
	t.Helper()
	seen := make([]atomic.Int32, n)
	var bad atomic.Bool
	parallelFor(n, cost, func(lo, hi int) {
		if lo < 0 || hi > n || lo >= hi {
			bad.Store(true)
			return
		}
		for i := lo; i < hi; i++ {
			seen[i].Add(1)
		}
	})
	if bad.Load() {
		t.Fatalf("parallelFor(%d, %d): a range outside [0, %d) or empty", n, cost, n)
	}
	for i := range seen {
		if c := seen[i].Load(); c != 1 {
			t.Fatalf("parallelFor(%d, %d): item %d seen %d times", n, cost, i, c)
		}
	}
}

// TestParallelForCovers: every item once, for sizes that run inline and
// sizes that are split, back to back (the polling worker joins) and
// after pauses longer than the pool polls (workers blocked again).
func TestParallelForCovers(t *testing.T) {
	if runtime.GOMAXPROCS(0) < 2 {
		t.Skip("needs GOMAXPROCS ≥ 2 to split")
	}
	for _, n := range []int{1, 2, 3, 7, 64, 1000, 4097} {
		for _, cost := range []int{1, minWork} {
			checkCover(t, n, cost)
			checkCover(t, n, cost)
			time.Sleep(2 * spinNanos * time.Nanosecond)
			checkCover(t, n, cost)
		}
	}
}

// TestParallelForConcurrentCallers: launches from several goroutines at
// once, with and without pauses, each cover their items once; afterwards
// no launch is left in the polling worker's slot and the worker stops
// polling (run with -race).
func TestParallelForConcurrentCallers(t *testing.T) {
	if runtime.GOMAXPROCS(0) < 2 {
		t.Skip("needs GOMAXPROCS ≥ 2 to split")
	}
	var wg sync.WaitGroup
	for g := 0; g < 6; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 150; i++ {
				checkCover(t, 100+37*g+i%50, minWork)
				if (i+g)%40 == 0 {
					time.Sleep(time.Duration(30_000+20_000*(g%3)) * time.Nanosecond)
				}
			}
		}()
	}
	wg.Wait()
	if st := spinSlot.Load(); st != nil {
		t.Fatalf("a launch was left in the polling slot")
	}
	deadline := time.Now().Add(time.Second)
	for spinning.Load() != 0 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	if spinning.Load() != 0 {
		t.Fatalf("a worker still polls a second after the last launch")
	}
}
