//go:build cuda

package cuda

import (
	"fmt"

	"github.com/esper-go/esper/kernels"
	"github.com/esper-go/esper/tensor"
)

// Concat copies its sources in one copy_blocks launch (src/elementwise.cu)
// when dst is contiguous: every source of dst's dtype laid out as rows
// one stride apart (contiguous, or a column block of a wider matrix:
// rowBlock) is a 2-D block of it (copy_blocks.go lays the launch out), up
// to cbMax a launch; the other sources (other strided views, other
// dtypes) are copied by Copy's kernels into views of dst, one launch
// each. Pad is a fill and a strided copy.

// Concat implements kernels.Backend.
func (b *Backend) Concat(dst *T, srcs []*T, axis int) { must(b.d.Concat(dst, srcs, axis)) }

// Pad implements kernels.Backend.
func (b *Backend) Pad(dst, x *T, pads []int, value float64) { must(b.d.Pad(dst, x, pads, value)) }

// Concat joins srcs (views of any strides, dst's dtype or one Copy
// converts from) along axis into dst. With dst contiguous, its
// contiguous sources of dst's dtype are copied together, up to cbMax in
// one launch (dst seen as [outer, total·inner] and source t as [outer,
// n_t·inner], outer and inner the products of the dims before and after
// axis: source t fills columns [off_t·inner, (off_t + n_t)·inner) of
// every row); every other non-empty source takes a Copy of its own into
// its view of dst.
func (d *Device) Concat(dst *tensor.Tensor, srcs []*tensor.Tensor, axis int) error {
	const op = "Concat"
	a, err := kernels.CheckConcat(op, dst, srcs, axis)
	if err := checked(err); err != nil {
		return err
	}
	return d.concatGroups(op, []*tensor.Tensor{dst}, srcs, []int{len(srcs)}, []int{a})
}

var _ kernels.ConcatManyer = (*Backend)(nil)

// ConcatMany implements kernels.ConcatManyer.
func (b *Backend) ConcatMany(dsts []*T, srcs []*T, counts []int, axis int) {
	must(b.d.ConcatMany(dsts, srcs, counts, axis))
}

// ConcatMany is Concat for several destinations, the row-laid-out
// sources of every contiguous one copied by the same copy_blocks
// launches (up to cbMax blocks a launch); other sources take a Copy each.
func (d *Device) ConcatMany(dsts []*tensor.Tensor, srcs []*tensor.Tensor, counts []int, axis int) error {
	const op = "ConcatMany"
	axes, err := kernels.CheckConcatMany(op, dsts, srcs, counts, axis)
	if err := checked(err); err != nil {
		return err
	}
	return d.concatGroups(op, dsts, srcs, counts, axes)
}

// concatGroups is checked Concats of the next counts[i] sources of srcs
// into dsts[i] along axes[i]: every row-laid-out source of a contiguous
// destination a block of the shared copy_blocks launches, the others a
// Copy each (before those launches).
func (d *Device) concatGroups(op string, dsts, srcs []*tensor.Tensor, counts, axes []int) error {
	var blocks []byteBlock
	off := 0
	for i, dst := range dsts {
		group, a := srcs[off:off+counts[i]], axes[i]
		off += counts[i]
		var together []bool // together[j]: source j is one of blocks
		if dst.IsContiguous() && dst.Numel() > 0 {
			var err error
			var bs []byteBlock
			if bs, together, err = d.concatBlocks(op, dst, group, a); err != nil {
				return err
			}
			blocks = append(blocks, bs...)
		}
		if err := d.concatRest(op, dst, group, a, together); err != nil {
			return err
		}
	}
	return d.copyBlocks(blocks)
}

var _ kernels.ZeroManyer = (*Backend)(nil)

// ZeroMany implements kernels.ZeroManyer.
func (b *Backend) ZeroMany(dsts []*T) { must(b.d.ZeroMany(dsts)) }

// ZeroMany zeroes every destination in copy_blocks launches from the
// device's block of zeros (zeroBlocks: at most two blocks a tensor, up to
// cbMax blocks a launch): several Fills in one launch.
func (d *Device) ZeroMany(dsts []*tensor.Tensor) error {
	const op = "ZeroMany"
	if err := checked(kernels.CheckZeroMany(op, dsts)); err != nil {
		return err
	}
	var ptrs, sizes []uint64
	for i, t := range dsts {
		if t.Numel() == 0 {
			continue
		}
		p, err := d.viewPtr(op, fmt.Sprintf("destination %d", i), t, t.DType())
		if err != nil {
			return err
		}
		ptrs, sizes = append(ptrs, uint64(p)), append(sizes, uint64(t.Numel()*t.DType().Size()))
	}
	// In a block sequence, a small zeroing is a step of the next
	// block_seq_f32 launch.
	if d.seqOn.Load() && len(ptrs) > 0 {
		if rs, ok := zeroRanges(ptrs, sizes); ok && d.deferStep(seqZero, zeroStepArgs(rs), 0, dsts...) {
			return nil
		}
	}
	var blocks []byteBlock
	for i, p := range ptrs {
		blocks = append(blocks, zeroBlocks(p, int64(sizes[i]), uint64(d.zero), zeroBytes)...)
	}
	return d.copyBlocks(blocks)
}

// concatRest copies the sources of a Concat along axis a that are not
// among its blocks (together[i] false, or together nil) into their views
// of dst, a Copy each.
func (d *Device) concatRest(op string, dst *tensor.Tensor, srcs []*tensor.Tensor, a int, together []bool) error {
	off := 0
	for i, t := range srcs {
		n := t.Dim(a)
		if n > 0 && (together == nil || !together[i]) {
			if err := d.Copy(dst.Narrow(a, off, n), t); err != nil {
				return fmt.Errorf("%w (in %s)", err, op)
			}
		}
		off += n
	}
	return nil
}

// copyBlocks launches copy_blocks over blocks, cbMax at a time.
func (d *Device) copyBlocks(blocks []byteBlock) error {
	if len(blocks) == 0 {
		return nil
	}
	fn, err := d.kernel("copy_blocks")
	if err != nil {
		return err
	}
	release := d.enter()
	defer release()
	var w [cbWords]uint64
	for len(blocks) > 0 {
		k := min(cbMax, len(blocks))
		_, most := cbPack(&w, blocks[:k])
		grid := [3]int{cbGrid(most, k, blockSize, d.sms), k, 1}
		if err := launchStruct(fn, grid, [3]int{blockSize, 1, 1}, d.stream, w[:]); err != nil {
			return err
		}
		blocks = blocks[k:]
	}
	return nil
}

// concatBlocks returns the copy_blocks blocks of the non-empty sources of
// dst's dtype laid out as rows (rowBlock) of a Concat into contiguous,
// non-empty dst along axis a, and which sources they are.
func (d *Device) concatBlocks(op string, dst *tensor.Tensor, srcs []*tensor.Tensor, a int) ([]byteBlock, []bool, error) {
	dt := dst.DType()
	pd, err := d.viewPtr(op, "dst", dst, dt)
	if err != nil {
		return nil, nil, err
	}
	outer, inner := int64(1), int64(1)
	for i, n := range dst.Shape() {
		if i < a {
			outer *= int64(n)
		} else if i > a {
			inner *= int64(n)
		}
	}
	total, esize := int64(dst.Dim(a)), int64(dt.Size())
	blocks := make([]byteBlock, 0, len(srcs))
	together := make([]bool, len(srcs))
	off := int64(0)
	for i, t := range srcs {
		n := int64(t.Dim(a))
		if stride, rows := rowBlock(t.Shape(), t.Strides(), a); n > 0 && t.DType() == dt && rows {
			ps, err := d.viewPtr(op, fmt.Sprintf("source %d", i), t, dt)
			if err != nil {
				return nil, nil, err
			}
			blocks = append(blocks, concatRowsBlock(uint64(pd), uint64(ps), outer, inner, total, off, n, esize, stride))
			together[i] = true
		}
		off += n
	}
	return blocks, together, nil
}

// Pad writes x into contiguous dst with pads[2i], pads[2i+1] elements of
// value before and after axis i (len(pads) = 2·rank).
func (d *Device) Pad(dst, x *tensor.Tensor, pads []int, value float64) error {
	const op = "Pad"
	if err := checked(kernels.CheckPad(op, dst, x, pads)); err != nil {
		return err
	}
	inner := dst
	for i, s := range x.Shape() {
		inner = inner.Narrow(i, pads[2*i], s)
	}
	if err := d.Fill(dst, value); err != nil {
		return err
	}
	if x.Numel() == 0 {
		return nil
	}
	return d.Copy(inner, x)
}
