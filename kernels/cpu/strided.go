package cpu

// Strided iteration shared by the elementwise, copy and broadcast kernels.
// A geom describes up to maxOps operands walked together over one shape
// in row-major order. Dimensions of size 1 are dropped and neighbours that
// are contiguous with each other in every operand are merged, so most
// walks reduce to a few long rows. Rows are cut into items of at most
// itemLen elements; an item's offsets are computed from its number alone,
// which keeps every item independent of how parallelFor splits the work.

const (
	maxOps  = 4
	itemLen = 8192
)

type geom struct {
	nops  int
	shape []int // coalesced, rank >= 1
	st    [maxOps][]int
	base  [maxOps]int
	inner int // shape[last]
	rows  int // product of the other dims
	split int // items per row
	items int
	numel int
}

// newGeom builds the walk of shape for operands with the given strides
// and base offsets (len(strides) == len(offs) <= maxOps).
func newGeom(shape []int, strides [][]int, offs []int) *geom {
	g := &geom{nops: len(strides)}
	copy(g.base[:], offs)
	var sh []int
	var st [maxOps][]int
	for d, s := range shape {
		if s == 1 {
			continue
		}
		if k := len(sh) - 1; k >= 0 {
			merge := true
			for o := 0; o < g.nops; o++ {
				if st[o][k] != strides[o][d]*s {
					merge = false
					break
				}
			}
			if merge {
				sh[k] *= s
				for o := 0; o < g.nops; o++ {
					st[o][k] = strides[o][d]
				}
				continue
			}
		}
		sh = append(sh, s)
		for o := 0; o < g.nops; o++ {
			st[o] = append(st[o], strides[o][d])
		}
	}
	n := 1
	for _, s := range shape {
		n *= s
	}
	g.numel = n
	if len(sh) == 0 || n == 0 {
		sh = []int{n}
		for o := 0; o < g.nops; o++ {
			st[o] = []int{1}
		}
	}
	g.shape, g.st = sh, st
	g.inner = sh[len(sh)-1]
	g.rows = 1
	for _, s := range sh[:len(sh)-1] {
		g.rows *= s
	}
	if g.inner > 0 {
		g.split = (g.inner + itemLen - 1) / itemLen
	}
	g.items = g.rows * g.split
	return g
}

// item returns the operands' storage offsets at the start of item it and
// the number of elements it covers along the inner axis.
func (g *geom) item(it int) (o [maxOps]int, n int) {
	// 64-bit divisions cost tens of cycles: rows that fit one item (the
	// usual case) need none for the split, and the outermost dimension
	// none for its index, so a 2-D walk divides nowhere.
	r, c := it, 0
	if g.split != 1 {
		r, c = it/g.split, (it%g.split)*itemLen
	}
	n = min(itemLen, g.inner-c)
	o = g.base
	last := len(g.shape) - 1
	if c != 0 {
		for k := 0; k < g.nops; k++ {
			o[k] += c * g.st[k][last]
		}
	}
	for d := last - 1; d > 0; d-- {
		sz := g.shape[d]
		q := r % sz
		r /= sz
		for k := 0; k < g.nops; k++ {
			o[k] += q * g.st[k][d]
		}
	}
	if last > 0 {
		for k := 0; k < g.nops; k++ {
			o[k] += r * g.st[k][0]
		}
	}
	return o, n
}

// innerStride is operand k's stride along the inner axis.
func (g *geom) innerStride(k int) int { return g.st[k][len(g.shape)-1] }

// bcastStrides returns t's strides for a broadcast to shape (size-1 and
// missing leading axes get stride 0), or ok=false when t's shape does not
// expand to shape.
func bcastStrides(t *T, shape []int) (st []int, ok bool) {
	ts, tst := t.Shape(), t.Strides()
	if len(ts) > len(shape) {
		return nil, false
	}
	lead := len(shape) - len(ts)
	st = make([]int, len(shape))
	for i := lead; i < len(shape); i++ {
		switch ts[i-lead] {
		case shape[i]:
			st[i] = tst[i-lead]
		case 1:
			st[i] = 0
		default:
			return nil, false
		}
	}
	return st, true
}

// contigStrides is tensor.ContiguousStrides, local for brevity.
func contigStrides(shape []int) []int {
	st := make([]int, len(shape))
	acc := 1
	for i := len(shape) - 1; i >= 0; i-- {
		st[i] = acc
		acc *= shape[i]
	}
	return st
}
