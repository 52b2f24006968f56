package cuda

import "sort"

// Slabs: the caching allocator asks the driver for room for several
// blocks of a small size class at once and cuts it into blocks of that
// class (PyTorch's allocator grows its small-block pool by 2 MiB segments
// for the same reason). A cuMemAlloc costs 20 to 26 µs on an H200
// (2026-11-28): W4's bare loop made 2 020 of them in 48 env-epochs, one
// per block its 21 captures and its warm-ups could not find cached
// (0.04 to 0.05 s of a 0.22 to 0.24 s loop). A slab is returned to the
// driver only whole, once every block cut from it is back in the cache
// (EmptyCache, or a full device).
//
// ESPER_CUDA_SLABS=off gives every block an allocation of its own, as
// before: compute-sanitizer's memcheck then sees a write past a block's
// end as the error it is, where inside a slab it would land in the next
// block (gpu/run.sh runs memcheck so).

const (
	// slabBytes is a slab's size for the classes that fit several times.
	slabBytes = 2 << 20
	// slabMaxBlocks bounds the blocks a slab holds: a class used once
	// reserves at most this many blocks' room.
	slabMaxBlocks = 64
	// slabMaxClass is the largest class cut from slabs; larger blocks
	// (whole multiples of 2 MiB above 1 MiB) are allocations of their
	// own.
	slabMaxClass = 1 << 20
)

// slabBlocks is how many blocks of class c one driver allocation holds:
// 1 with slabs off or past slabMaxClass, else as many as fit in
// slabBytes, at most slabMaxBlocks.
func slabBlocks(c int64, off bool) int64 {
	if off || c <= 0 || c > slabMaxClass {
		return 1
	}
	return min(max(slabBytes/c, 1), slabMaxBlocks)
}

// slab is one driver allocation: blocks blocks of class bytes from base.
type slab struct {
	base, class, blocks uint64
}

// slabSet records the allocator's slabs by class.
type slabSet struct {
	byClass map[uint64][]slab
}

// add records a slab.
func (s *slabSet) add(sl slab) {
	if s.byClass == nil {
		s.byClass = map[uint64][]slab{}
	}
	s.byClass[sl.class] = append(s.byClass[sl.class], sl)
}

// cut returns the addresses of sl's blocks past its first (which goes to
// the caller that asked): the ones for the cache.
func (sl slab) cut() []uint64 {
	if sl.blocks < 2 {
		return nil
	}
	rest := make([]uint64, 0, sl.blocks-1)
	for i := uint64(1); i < sl.blocks; i++ {
		rest = append(rest, sl.base+i*sl.class)
	}
	return rest
}

// reclaim takes the cached (free) blocks of one class and returns the
// slabs every block of which is among them — those the driver may have
// back — and the free blocks left over, which stay cached, in their
// order. A free block of no recorded slab is an error of the caller's
// bookkeeping and stays cached; so does a slab's block listed twice
// while another of its blocks is missing.
func (s *slabSet) reclaim(class uint64, free []uint64) (whole []slab, keep []uint64) {
	slabs := s.byClass[class]
	if len(slabs) == 0 || len(free) == 0 {
		return nil, free
	}
	// Each free block's slab, by binary search over the slabs by base;
	// a block listed twice counts once (seen), so that a slip elsewhere
	// cannot make a slab with a live block look whole.
	sort.Slice(slabs, func(i, j int) bool { return slabs[i].base < slabs[j].base })
	count := make([]uint64, len(slabs))
	seen := make(map[uint64]bool, len(free))
	of := make([]int, len(free))
	for i, p := range free {
		j := sort.Search(len(slabs), func(j int) bool { return slabs[j].base > p }) - 1
		of[i] = -1
		if j >= 0 && p < slabs[j].base+slabs[j].blocks*class && (p-slabs[j].base)%class == 0 {
			of[i] = j
			if !seen[p] {
				seen[p] = true
				count[j]++
			}
		}
	}
	gone := make([]bool, len(slabs))
	live := slabs[:0:0]
	for j, sl := range slabs {
		if count[j] == sl.blocks {
			gone[j] = true
			whole = append(whole, sl)
		} else {
			live = append(live, sl)
		}
	}
	if len(whole) == 0 {
		return nil, free
	}
	for i, p := range free {
		if of[i] < 0 || !gone[of[i]] {
			keep = append(keep, p)
		}
	}
	if len(live) == 0 {
		delete(s.byClass, class)
	} else {
		s.byClass[class] = live
	}
	return whole, keep
}
