package cuda

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math/rand"
	"testing"
)

// cbRun is copy_blocks of src/elementwise.cu in Go: it decodes the words
// of struct CopyBlocks as the kernel does and copies every block's words
// in mem, whose byte 0 sits at address base.
func cbRun(w *[cbWords]uint64, mem []byte, base uint64) {
	n, unit := int64(w[0]), int64(w[1])
	for t := int64(0); t < n; t++ {
		o := 2 + 6*t
		src, dst := int64(w[o]-base), int64(w[o+1]-base)
		rows, width, sld, dld := int64(w[o+2]), int64(w[o+3]), int64(w[o+4]), int64(w[o+5])
		for i := int64(0); i < rows*width; i++ {
			r, c := i/width, i%width
			s, d := src+(r*sld+c)*unit, dst+(r*dld+c)*unit
			copy(mem[d:d+unit], mem[s:s+unit])
		}
	}
}

// pow2Unit is the largest of 16, 8, 4, 2, 1 dividing every value.
func pow2Unit(vals []int64) int64 {
	u := int64(16)
	for _, v := range vals {
		for v%u != 0 {
			u /= 2
		}
	}
	return u
}

// TestCopyBlocksConcatenates: concatenations into a contiguous tensor
// (element sizes 1 to 8 bytes, along every axis, sources of random sizes
// including empty ones, addresses aligned to various degrees, more
// sources than one launch takes), planned with concatBlock and packed by
// cbPack in launches of at most cbMax blocks, then run as the kernel
// runs them, write exactly the concatenation (every byte of dst, and
// nothing outside it), and each launch copies in the largest unit its
// addresses and sizes allow. It runs without a GPU.
func TestCopyBlocksConcatenates(t *testing.T) {
	rng := rand.New(rand.NewSource(7))
	units := map[int64]int{}
	// A second launch's source narrows dst's rows below 16 bytes a
	// column block: the first launch's blocks, of whole 16-byte rows at
	// 16-byte addresses, must still copy in 4-byte units.
	along := make([]int, cbMax+1)
	for i := range along {
		along[i] = 4
	}
	along[cbMax] = 1
	concatCase(t, rng, "33 sources, the last narrow", 4, []int{2, 4*cbMax + 1}, 1, along, true, units)
	for trial := 0; trial < 300; trial++ {
		esize := []int64{1, 2, 4, 8}[rng.Intn(4)]
		rank := 1 + rng.Intn(3)
		shape := make([]int, rank)
		for d := range shape {
			shape[d] = 1 + rng.Intn(4)
		}
		axis := rng.Intn(rank)
		nsrc := 1 + rng.Intn(6)
		if trial%10 == 0 {
			nsrc = cbMax + 1 + rng.Intn(cbMax) // two launches
		}
		along := make([]int, nsrc)
		total := 0
		for i := range along {
			along[i] = rng.Intn(4) // 0: an empty source
			if trial%3 == 0 {
				along[i] *= 4 // rows of whole 16-byte words more often
			}
			total += along[i]
		}
		shape[axis] = total
		name := fmt.Sprintf("trial %d: esize %d shape %v axis %d along %v", trial, esize, shape, axis, along)
		concatCase(t, rng, name, esize, shape, axis, along, false, units)
	}
	for _, u := range []int64{1, 2, 4, 8, 16} {
		if units[u] == 0 {
			t.Errorf("no launch copied in %d-byte units (%v): the trials miss a case", u, units)
		}
	}
}

// concatCase concatenates sources of along[i] elements along axis of
// shape (shape[axis] = Σ along) with elements of esize bytes through
// copy_blocks launches run by cbRun and checks the result; aligned puts
// every tensor at a 16-byte address, else each is 16-byte aligned by
// chance. units counts the launches by unit.
func concatCase(t *testing.T, rng *rand.Rand, name string, esize int64, shape []int, axis int, along []int, aligned bool, units map[int64]int) {
	t.Helper()
	const base = uint64(1) << 40 // a 256-byte-aligned device address
	total := 0
	for _, a := range along {
		total += a
	}
	if total != shape[axis] {
		t.Fatalf("%s: along %v does not sum to %d", name, along, shape[axis])
	}
	outer, inner := int64(1), int64(1)
	for d, n := range shape {
		if d < axis {
			outer *= int64(n)
		} else if d > axis {
			inner *= int64(n)
		}
	}
	// Lay out dst and the sources in one arena, each at an offset aligned
	// to esize and, by chance or when aligned, to 16 bytes.
	var mem []byte
	place := func(n int64) int64 {
		align := int64(16)
		if !aligned && rng.Intn(2) == 0 {
			align = esize
		}
		at := (int64(len(mem)) + 64 + align - 1) / align * align
		if align == esize && at%16 == 0 {
			at += esize // really misaligned to 16 (when esize < 16)
		}
		mem = append(mem, make([]byte, at-int64(len(mem))+n)...)
		return at
	}
	dstAt := place(outer * int64(total) * inner * esize)
	srcAt := make([]int64, len(along))
	for i, a := range along {
		srcAt[i] = place(outer * int64(a) * inner * esize)
	}
	mem = append(mem, make([]byte, 64)...)
	rng.Read(mem) // sources and poison around and in dst alike
	want := append([]byte(nil), mem...)
	row := int64(total) * inner * esize
	off := int64(0)
	for i, a := range along {
		w := int64(a) * inner * esize
		for o := int64(0); o < outer; o++ {
			copy(want[dstAt+o*row+off*inner*esize:], mem[srcAt[i]+o*w:srcAt[i]+(o+1)*w])
		}
		off += int64(a)
	}

	var blocks []byteBlock
	off = 0
	for i, a := range along {
		if a > 0 {
			blocks = append(blocks, concatBlock(base+uint64(dstAt), base+uint64(srcAt[i]), outer, inner, int64(total), off, int64(a), esize))
		}
		off += int64(a)
	}
	var w [cbWords]uint64
	for len(blocks) > 0 {
		k := min(cbMax, len(blocks))
		unit, most := cbPack(&w, blocks[:k])
		var vals []int64
		var big int64
		for _, b := range blocks[:k] {
			vals = append(vals, int64(b.src), int64(b.dst), b.width)
			if b.rows > 1 {
				vals = append(vals, b.sld, b.dld)
			}
			big = max(big, b.rows*b.width)
		}
		// Every address and size is a multiple of the element size, so
		// the unit is never narrower than an element.
		if u := pow2Unit(vals); unit != u || unit < esize {
			t.Fatalf("%s: unit %d, want %d (≥ %d)", name, unit, u, esize)
		}
		if most != big/unit {
			t.Fatalf("%s: largest block %d units, want %d", name, most, big/unit)
		}
		if w[0] != uint64(k) {
			t.Fatalf("%s: n = %d, want %d", name, w[0], k)
		}
		for i := 2 + 6*k; i < cbWords; i++ {
			if w[i] != 0 {
				t.Fatalf("%s: word %d past the blocks is %d", name, i, w[i])
			}
		}
		units[unit]++
		cbRun(&w, mem, base)
		blocks = blocks[k:]
	}
	if !bytes.Equal(mem, want) {
		t.Fatalf("%s: the arena differs from the concatenation", name)
	}
}

// TestCopyBlocksGrid: one thread per unit of the largest block, never
// more than about eight thread blocks per multiprocessor over all the
// copy blocks, never fewer than one.
func TestCopyBlocksGrid(t *testing.T) {
	for _, c := range []struct {
		most         int64
		nb, sms, out int
	}{
		{1, 1, 132, 1},
		{256, 1, 132, 1},
		{257, 1, 132, 2},
		{1 << 30, 1, 132, 1056},
		{1 << 30, 2, 132, 528},
		{1 << 30, 32, 132, 33},
		{1 << 30, 32, 2, 1},
		{1000, 32, 132, 4},
	} {
		if got := cbGrid(c.most, c.nb, 256, c.sms); got != c.out {
			t.Errorf("cbGrid(%d, %d, 256, %d) = %d, want %d", c.most, c.nb, c.sms, got, c.out)
		}
	}
}

// TestRowBlock: rowBlock takes contiguous views and column blocks of
// wider matrices (rows one stride apart, size-1 dims free), and refuses
// what copy_blocks cannot copy as rows: transposes, broadcast inner dims,
// outer dims that do not collapse, negative strides.
func TestRowBlock(t *testing.T) {
	for _, c := range []struct {
		shape, strides []int
		axis           int
		stride         int64
		ok             bool
	}{
		{[]int{4, 3}, []int{3, 1}, 1, 3, true},         // contiguous
		{[]int{4, 3}, []int{8, 1}, 1, 8, true},         // column block of [4, 8]
		{[]int{4, 3}, []int{8, 1}, 0, 0, false},        // along rows: not one block of rows
		{[]int{4, 3}, []int{1, 4}, 1, 0, false},        // a transpose
		{[]int{4, 3}, []int{3, 0}, 1, 0, false},        // an expanded column
		{[]int{4, 3}, []int{0, 1}, 1, 0, true},         // an expanded row: every row reads one
		{[]int{2, 4, 3}, []int{32, 8, 1}, 2, 8, true},  // outer dims collapse
		{[]int{2, 4, 3}, []int{40, 8, 1}, 2, 0, false}, // they do not
		{[]int{1, 5, 3}, []int{99, 7, 1}, 2, 7, true},  // a size-1 outer dim
		{[]int{5, 1}, []int{9, 4}, 1, 9, true},         // a size-1 inner dim
		{[]int{3}, []int{1}, 0, 3, true},               // one row
		{[]int{4, 3}, []int{-3, 1}, 1, 0, false},       // negative stride
	} {
		stride, ok := rowBlock(c.shape, c.strides, c.axis)
		if ok != c.ok || (ok && stride != c.stride) {
			t.Errorf("rowBlock(%v, %v, %d) = %d, %v; want %d, %v", c.shape, c.strides, c.axis, stride, ok, c.stride, c.ok)
		}
	}

	// A column block [4, 3] of a [4, 8] float32 matrix (its columns 2..4)
	// and a contiguous [4, 2] joined along columns into [4, 5], run as
	// the kernel runs the packed blocks.
	const esize = 4
	mem := make([]byte, 4096)
	wide, small, dst := uint64(0), uint64(256), uint64(512)
	for i := 0; i < 32; i++ {
		binary.LittleEndian.PutUint32(mem[int(wide)+4*i:], uint32(100+i))
	}
	for i := 0; i < 8; i++ {
		binary.LittleEndian.PutUint32(mem[int(small)+4*i:], uint32(900+i))
	}
	stride, ok := rowBlock([]int{4, 3}, []int{8, 1}, 1)
	if !ok {
		t.Fatal("a column block is not rows")
	}
	blocks := []byteBlock{
		concatRowsBlock(dst, wide+2*esize, 4, 1, 5, 0, 3, esize, stride),
		concatBlock(dst, small, 4, 1, 5, 3, 2, esize),
	}
	var w [cbWords]uint64
	cbPack(&w, blocks)
	cbRun(&w, mem, 0)
	for r := 0; r < 4; r++ {
		for c := 0; c < 5; c++ {
			want := uint32(100 + 8*r + 2 + c)
			if c >= 3 {
				want = uint32(900 + 2*r + c - 3)
			}
			if got := binary.LittleEndian.Uint32(mem[int(dst)+4*(5*r+c):]); got != want {
				t.Fatalf("dst[%d, %d] = %d, want %d", r, c, got, want)
			}
		}
	}
}

// TestZeroBlocks: the blocks of Device.ZeroMany, run as the kernel runs
// them, zero exactly the destinations' bytes (sizes below, at and above
// the block of zeros, a multiple of it, and odd ones) from a block of
// zeros smaller than most of them, and nothing else.
func TestZeroBlocks(t *testing.T) {
	const zb = 64
	mem := make([]byte, 8192)
	zero := uint64(0) // mem[0:zb] holds the zeros
	type dst struct{ at, n int64 }
	dsts := []dst{{256, 48}, {512, 64}, {1024, 200}, {2048, 7}, {4096, 640}, {6000, 1}}
	for i := range mem {
		if i >= zb {
			mem[i] = byte(1 + i%251)
		}
	}
	want := append([]byte(nil), mem...)
	var blocks []byteBlock
	for _, d := range dsts {
		blocks = append(blocks, zeroBlocks(uint64(d.at), d.n, zero, zb)...)
		for i := d.at; i < d.at+d.n; i++ {
			want[i] = 0
		}
	}
	if len(blocks) > 2*len(dsts) {
		t.Fatalf("%d blocks for %d destinations, want at most two each", len(blocks), len(dsts))
	}
	for len(blocks) > 0 {
		k := min(cbMax, len(blocks))
		var w [cbWords]uint64
		cbPack(&w, blocks[:k])
		cbRun(&w, mem, 0)
		blocks = blocks[k:]
	}
	if !bytes.Equal(mem, want) {
		for i := range mem {
			if mem[i] != want[i] {
				t.Fatalf("byte %d is %d, want %d", i, mem[i], want[i])
			}
		}
	}
}
