package cuda

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// TestSlabBlocks: small classes share a slab of up to 2 MiB and 64
// blocks; classes past 1 MiB, and every class with slabs off, get an
// allocation each.
func TestSlabBlocks(t *testing.T) {
	for _, c := range []struct {
		class int64
		off   bool
		want  int64
	}{
		{512, false, 64}, {32 << 10, false, 64}, {64 << 10, false, 32}, {100 << 10, false, 20},
		{512 << 10, false, 4}, {1 << 20, false, 2}, {2 << 20, false, 1}, {14 << 20, false, 1},
		{512, true, 1}, {1 << 20, true, 1}, {0, false, 1},
	} {
		require.Equal(t, c.want, slabBlocks(c.class, c.off), "class %d, off %v", c.class, c.off)
		if c.class > 0 {
			require.LessOrEqual(t, c.want*c.class, int64(slabBytes)+max(c.class-slabBytes, 0), "class %d: a slab past 2 MiB", c.class)
		}
	}
}

// TestSlabCut: a slab's blocks are its base plus whole classes, the
// first the caller's, the rest the cache's, none outside the slab.
func TestSlabCut(t *testing.T) {
	sl := slab{base: 1 << 30, class: 1024, blocks: 4}
	require.Equal(t, []uint64{1<<30 + 1024, 1<<30 + 2048, 1<<30 + 3072}, sl.cut())
	require.Nil(t, slab{base: 4096, class: 4 << 20, blocks: 1}.cut())
}

// TestSlabReclaim: only slabs whose every block is free go back; their
// blocks leave the free list, the others' stay in order; a slab given
// back is forgotten, so a second reclaim of its addresses finds nothing;
// a block of no slab stays cached.
func TestSlabReclaim(t *testing.T) {
	const c = 512
	var s slabSet
	a := slab{base: 0x10000, class: c, blocks: 3}
	b := slab{base: 0x20000, class: c, blocks: 2}
	one := slab{base: 0x40000, class: c, blocks: 1}
	other := slab{base: 0x30000, class: 2 * c, blocks: 2}
	for _, sl := range []slab{b, a, one, other} {
		s.add(sl)
	}
	stray := uint64(0x90000)
	// a: all three free; b: one of two; one: free; other: another class.
	free := []uint64{0x20000, 0x10000 + c, stray, 0x10000, 0x40000, 0x10000 + 2*c}
	whole, keep := s.reclaim(c, free)
	require.ElementsMatch(t, []slab{a, one}, whole)
	require.Equal(t, []uint64{0x20000, stray}, keep)
	require.Equal(t, []slab{b}, s.byClass[c])
	require.Equal(t, []slab{other}, s.byClass[2*c], "another class untouched")

	whole, keep = s.reclaim(c, []uint64{0x10000, 0x10000 + c, 0x10000 + 2*c})
	require.Empty(t, whole, "a slab given back twice")
	require.Len(t, keep, 3)

	whole, keep = s.reclaim(c, []uint64{0x20000 + c, 0x20000})
	require.Equal(t, []slab{b}, whole)
	require.Empty(t, keep)
	_, ok := s.byClass[c]
	require.False(t, ok, "a class with no slab left is dropped")

	// A block listed twice does not stand in for a missing one.
	s.add(b)
	whole, keep = s.reclaim(c, []uint64{0x20000, 0x20000})
	require.Empty(t, whole, "a slab with a live block looked whole")
	require.Len(t, keep, 2)
	whole, _ = s.reclaim(c, []uint64{0x20000, 0x20000, 0x20000 + c})
	require.Equal(t, []slab{b}, whole)

	// A misaligned address inside a slab is no block of it.
	s.add(a)
	whole, keep = s.reclaim(c, []uint64{0x10000, 0x10000 + c, 0x10000 + c + 8})
	require.Empty(t, whole)
	require.Len(t, keep, 3)
}
