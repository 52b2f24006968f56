package rollback

import (
	"container/list"
	"errors"
	"fmt"
	"sync"
)

// DefaultFastCapMB is the fast tier's capacity when FastOptions leaves it
// zero (G1 TOLARIA_ROLLBACK_FAST_CAP_MB).
const DefaultFastCapMB = 32

// mib is the unit of FastOptions.CapMB (G1 cap_MB·1024·1024).
const mib = 1 << 20

// ErrTooLarge is wrapped by FastCache.Put when a single state exceeds the
// whole capacity.
var ErrTooLarge = errors.New("rollback: state larger than the fast cache capacity")

// FastOptions configure NewFastCache. The zero value is a 32 MiB cache.
type FastOptions struct {
	// CapMB is the capacity in MiB (CapMB·1 MiB bytes); 0 means
	// DefaultFastCapMB. Must not be negative.
	CapMB int
	// CapBytes, when non-zero, sets the capacity in bytes exactly and
	// overrides CapMB (small models, tests). Must not be negative.
	CapBytes int64
}

// FastCache is the fast rollback tier: an in-memory LRU of States keyed
// by global step and bounded in bytes (State.Size). Putting a state makes
// it the most recently used, and so does returning it from Nearest; when
// the total exceeds the capacity the least recently used snapshots are
// evicted until it fits. It is safe for concurrent use.
//
// The cache owns deep copies: Put clones its argument and Nearest returns
// a clone, so neither the caller's later training nor its restore can
// change what is cached.
type FastCache struct {
	capBytes int64

	mu      sync.Mutex
	order   *list.List // of *fastEntry, front = most recently used
	byStep  map[int64]*list.Element
	size    int64
	puts    uint64
	hits    uint64
	misses  uint64
	evicted uint64
}

type fastEntry struct {
	step  int64
	state State
	size  int64
}

// FastStats is a snapshot of a FastCache's counters.
type FastStats struct {
	// SizeBytes is the total State.Size of the snapshots held; CapBytes
	// the capacity.
	SizeBytes, CapBytes int64
	// Snapshots is the number of snapshots held now.
	Snapshots int
	// SnapshotsTotal counts successful Puts (replacements included).
	SnapshotsTotal uint64
	// Hits and Misses count Nearest calls that did and did not find a
	// snapshot.
	Hits, Misses uint64
	// Evictions counts snapshots dropped to make room (replacing a step
	// is not an eviction).
	Evictions uint64
}

// NewFastCache returns an empty cache with the capacity of o.
func NewFastCache(o FastOptions) (*FastCache, error) {
	if o.CapMB < 0 || o.CapBytes < 0 {
		return nil, fmt.Errorf("rollback: fast cache capacity must not be negative (CapMB %d, CapBytes %d)", o.CapMB, o.CapBytes)
	}
	c := o.CapBytes
	if c == 0 {
		mb := o.CapMB
		if mb == 0 {
			mb = DefaultFastCapMB
		}
		c = int64(mb) * mib
	}
	return &FastCache{capBytes: c, order: list.New(), byStep: map[int64]*list.Element{}}, nil
}

// Cap returns the capacity in bytes.
func (c *FastCache) Cap() int64 { return c.capBytes }

// Put stores a deep copy of s as the snapshot of step, replacing an
// earlier snapshot of the same step (whose size no longer counts), and
// evicts least recently used snapshots until the total fits. A state
// whose size alone exceeds the capacity is refused with an error wrapping
// ErrTooLarge and the cache is left unchanged, as it is for a state that
// does not validate.
func (c *FastCache) Put(step int64, s State) error {
	if err := s.validate(); err != nil {
		return err
	}
	size, err := s.Size()
	if err != nil {
		return err
	}
	if size > c.capBytes {
		return fmt.Errorf("%w: step %d needs %d bytes, capacity %d", ErrTooLarge, step, size, c.capBytes)
	}
	cp := s.Clone() // outside the lock: copying a model is the slow part

	c.mu.Lock()
	defer c.mu.Unlock()
	if el, ok := c.byStep[step]; ok {
		c.size -= el.Value.(*fastEntry).size
		c.order.Remove(el)
		delete(c.byStep, step)
	}
	c.byStep[step] = c.order.PushFront(&fastEntry{step: step, state: cp, size: size})
	c.size += size
	c.puts++
	for c.size > c.capBytes {
		el := c.order.Back() // never the new entry: it fits on its own
		e := el.Value.(*fastEntry)
		c.order.Remove(el)
		delete(c.byStep, e.step)
		c.size -= e.size
		c.evicted++
	}
	return nil
}

// Nearest returns a copy of the latest snapshot whose step is ≤ stepLEQ,
// with its step, and marks it most recently used; ok is false when there
// is none. It counts a hit or a miss.
func (c *FastCache) Nearest(stepLEQ int64) (s State, step int64, ok bool) {
	c.mu.Lock()
	var best *list.Element
	for st, el := range c.byStep {
		if st <= stepLEQ && (best == nil || st > best.Value.(*fastEntry).step) {
			best = el
		}
	}
	if best == nil {
		c.misses++
		c.mu.Unlock()
		return State{}, 0, false
	}
	c.hits++
	c.order.MoveToFront(best)
	e := best.Value.(*fastEntry)
	held := e.state // entries are never mutated, only dropped
	c.mu.Unlock()
	return held.Clone(), e.step, true
}

// Steps returns the steps held, most recently used first.
func (c *FastCache) Steps() []int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]int64, 0, c.order.Len())
	for el := c.order.Front(); el != nil; el = el.Next() {
		out = append(out, el.Value.(*fastEntry).step)
	}
	return out
}

// Clear drops every snapshot (the counters are kept). A trainer clears
// the cache when the parameter set changes shape, since older snapshots
// can no longer be applied.
func (c *FastCache) Clear() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.order.Init()
	clear(c.byStep)
	c.size = 0
}

// Stats returns the current counters.
func (c *FastCache) Stats() FastStats {
	c.mu.Lock()
	defer c.mu.Unlock()
	return FastStats{
		SizeBytes: c.size, CapBytes: c.capBytes, Snapshots: c.order.Len(),
		SnapshotsTotal: c.puts, Hits: c.hits, Misses: c.misses, Evictions: c.evicted,
	}
}
