package cuda

// The layout of a copy_blocks launch (src/elementwise.cu), which copies up
// to cbMax 2-D blocks at once (Device.Concat: one block per source): pure
// Go, with no cgo, so that it is tested without a GPU
// (copy_blocks_test.go runs a packed launch the way the kernel does).

// cbMax is CB_MAX of src/elementwise.cu: the most blocks one copy_blocks
// launch copies.
const cbMax = 32

// cbWords is the size of struct CopyBlocks in 8-byte words: n and unit,
// then cbMax blocks of six words (src, dst, rows, width, sld, dld).
const cbWords = 2 + 6*cbMax

// byteBlock is one block of a copy_blocks launch, in bytes: rows rows of
// width bytes each from address src (rows sld bytes apart) to dst (rows
// dld bytes apart).
type byteBlock struct {
	src, dst              uint64
	rows, width, sld, dld int64
}

// concatBlock is the block of one source of a concatenation into a
// contiguous tensor at address dst, seen as [outer, total·inner] elements
// of esize bytes: the contiguous source at src, [outer, n·inner], goes to
// columns [off·inner, (off + n)·inner) of every row.
func concatBlock(dst, src uint64, outer, inner, total, off, n, esize int64) byteBlock {
	return concatRowsBlock(dst, src, outer, inner, total, off, n, esize, n*inner)
}

// concatRowsBlock is concatBlock for a source whose outer rows of n·inner
// contiguous elements start stride elements apart (rowBlock): a column
// block of a wider matrix, say.
func concatRowsBlock(dst, src uint64, outer, inner, total, off, n, esize, stride int64) byteBlock {
	return byteBlock{
		src:   src,
		dst:   dst + uint64(off*inner*esize),
		rows:  outer,
		width: n * inner * esize,
		sld:   stride * esize,
		dld:   total * inner * esize,
	}
}

// rowBlock reports whether a view of shape and strides (in elements) is,
// for a concatenation along axis a, rows of contiguous elements (its dims
// from a on laid out contiguously) one row stride apart (its dims before
// a collapsing to a single stride), and returns that stride: a
// contiguous view's is its row width; a column block [N, w] of an [N, W]
// matrix has W. Dims of size 1 place no constraint.
func rowBlock(shape, strides []int, a int) (stride int64, ok bool) {
	width := 1
	for i := len(shape) - 1; i >= a; i-- {
		if shape[i] != 1 && strides[i] != width {
			return 0, false
		}
		width *= shape[i]
	}
	stride, next, rows := int64(width), int64(0), false // a single row: its width
	for i := a - 1; i >= 0; i-- {
		switch {
		case shape[i] == 1:
		case !rows:
			stride, next, rows = int64(strides[i]), int64(strides[i])*int64(shape[i]), true
		case int64(strides[i]) != next:
			return 0, false
		default:
			next *= int64(shape[i])
		}
	}
	return stride, stride >= 0
}

// cbPack writes blocks (1 to cbMax of them, none empty) into w as struct
// CopyBlocks and returns the unit the kernel copies in and the largest
// block's size in units: the unit is the largest of 16, 8, 4, 2 and 1
// bytes dividing every block's addresses, width and (for blocks of more
// than one row) row strides. The blocks past len(blocks) are zeroed.
func cbPack(w *[cbWords]uint64, blocks []byteBlock) (unit, most int64) {
	unit = 16
	for _, b := range blocks {
		for _, v := range []int64{int64(b.src), int64(b.dst), b.width} {
			for v%unit != 0 {
				unit /= 2
			}
		}
		if b.rows > 1 {
			for _, v := range []int64{b.sld, b.dld} {
				for v%unit != 0 {
					unit /= 2
				}
			}
		}
	}
	*w = [cbWords]uint64{}
	w[0], w[1] = uint64(len(blocks)), uint64(unit)
	for t, b := range blocks {
		o := 2 + 6*t
		w[o], w[o+1] = b.src, b.dst
		w[o+2], w[o+3], w[o+4], w[o+5] = uint64(b.rows), uint64(b.width/unit), uint64(b.sld/unit), uint64(b.dld/unit)
		most = max(most, b.rows*(b.width/unit))
	}
	return unit, most
}

// cbGrid is the x dimension of a copy_blocks grid of nb blocks (its y
// dimension) whose largest block has most units, with threads threads a
// block, on sms multiprocessors: one thread per unit of the largest
// block, at most about eight thread blocks per multiprocessor over the
// whole grid, at least one per copy block.
func cbGrid(most int64, nb, threads, sms int) int {
	gx := (most + int64(threads) - 1) / int64(threads)
	limit := max(int64(sms)*8/int64(nb), 1)
	return int(max(min(gx, limit), 1))
}

// zeroBytes is the size of a device's block of zeros (Device.ZeroMany's
// source).
const zeroBytes = 4096

// zeroBlocks are the copy_blocks blocks that zero n bytes at dst from a
// block of zbytes zeros at zero: whole rows of zbytes, every one read
// from the same zeros (a row stride of 0), then the rest as one row.
func zeroBlocks(dst uint64, n int64, zero uint64, zbytes int64) []byteBlock {
	var bs []byteBlock
	if rows := n / zbytes; rows > 0 {
		bs = append(bs, byteBlock{src: zero, dst: dst, rows: rows, width: zbytes, sld: 0, dld: zbytes})
	}
	if rest := n % zbytes; rest > 0 {
		bs = append(bs, byteBlock{src: zero, dst: dst + uint64(n-rest), rows: 1, width: rest, sld: rest, dld: rest})
	}
	return bs
}
