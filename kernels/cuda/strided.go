//go:build cuda

package cuda

import (
	"fmt"

	"gorgonia.org/cu"

	"github.com/esper-go/esper/tensor"
)

// Strided launches walk one shape over several operands that each have
// their own strides: broadcasting binary ops, where, and copies between
// views. The layout travels by value as a kernel argument (struct Geom
// in src/elementwise.cu), so a captured graph holds it too.

// maxRank and maxOperands bound a strided launch (MAX_RANK and MAX_OPS
// in src/elementwise.cu); axes are merged first where the strides allow,
// so maxRank limits only genuinely non-mergeable views.
const (
	maxRank     = 6
	maxOperands = 4
)

// geom is struct Geom, word for word.
type geom struct {
	rank  int64
	shape [maxRank]int64
	st    [maxOperands][maxRank]int64
}

// words returns g as the kernel argument's 8-byte words.
func (g *geom) words() []uint64 {
	w := make([]uint64, 0, 1+maxRank+maxOperands*maxRank)
	w = append(w, uint64(g.rank))
	for _, s := range g.shape {
		w = append(w, uint64(s))
	}
	for _, o := range g.st {
		for _, s := range o {
			w = append(w, uint64(s))
		}
	}
	return w
}

// newGeom lays out shape over the operands' strides (one slice of
// len(shape) per operand): axes of size 1 are dropped and adjacent axes
// merged when every operand steps through them as one, and the result
// must have at most maxRank axes.
func newGeom(op string, shape []int, strides ...[]int) (geom, error) {
	var g geom
	if len(strides) > maxOperands {
		return g, fmt.Errorf("cuda: %s: %d operands (at most %d)", op, len(strides), maxOperands)
	}
	type axis struct {
		n  int
		st [maxOperands]int
	}
	var axes []axis
	for d, n := range shape {
		if n == 1 {
			continue
		}
		var a axis
		a.n = n
		for k, s := range strides {
			a.st[k] = s[d]
		}
		if len(axes) > 0 {
			last := &axes[len(axes)-1]
			merge := true
			for k := range strides {
				if last.st[k] != a.st[k]*a.n {
					merge = false
					break
				}
			}
			if merge {
				last.n *= a.n
				last.st = a.st
				continue
			}
		}
		axes = append(axes, a)
	}
	if len(axes) > maxRank {
		return g, fmt.Errorf("cuda: %s: shape %v does not reduce to %d axes or fewer over its operands' strides", op, shape, maxRank)
	}
	g.rank = int64(len(axes))
	for d, a := range axes {
		g.shape[d] = int64(a.n)
		for k := range strides {
			g.st[k][d] = int64(a.st[k])
		}
	}
	return g, nil
}

// bcastStrides returns t's strides broadcast to shape (0 along an axis t
// lacks or has of size 1), or false when t does not broadcast to shape.
func bcastStrides(t *tensor.Tensor, shape []int) ([]int, bool) {
	ts, tst := t.Shape(), t.Strides()
	if len(ts) > len(shape) {
		return nil, false
	}
	lead := len(shape) - len(ts)
	st := make([]int, len(shape))
	for i := lead; i < len(shape); i++ {
		switch ts[i-lead] {
		case shape[i]:
			st[i] = tst[i-lead]
		case 1:
		default:
			return nil, false
		}
	}
	return st, true
}

// viewPtr is ptrOf for a view of any strides: t's address on d (its
// storage's plus its offset) after checking its device and dtype.
func (d *Device) viewPtr(op, what string, t *tensor.Tensor, dt tensor.DType) (cu.DevicePtr, error) {
	if t == nil {
		return 0, fmt.Errorf("cuda: %s: %s is nil", op, what)
	}
	if dev := t.Device(); dev != tensor.CUDA(d.ordinal) {
		return 0, fmt.Errorf("cuda: %s: %s is on %v, not cuda:%d", op, what, dev, d.ordinal)
	}
	if t.DType() != dt {
		return 0, fmt.Errorf("cuda: %s: %s is %v, want %v", op, what, t.DType(), dt)
	}
	return cu.DevicePtr(t.Storage().DevicePtr()) + cu.DevicePtr(t.Offset()*dt.Size()), nil
}

// bcastView checks that t (any strides, dtype dt) broadcasts to shape and
// returns its address and broadcast strides.
func (d *Device) bcastView(op, what string, t *tensor.Tensor, dt tensor.DType, shape []int) (cu.DevicePtr, []int, error) {
	p, err := d.viewPtr(op, what, t, dt)
	if err != nil {
		return 0, nil, err
	}
	st, ok := bcastStrides(t, shape)
	if !ok {
		return 0, nil, fmt.Errorf("cuda: %s: %s shape %v does not broadcast to %v", op, what, t.Shape(), shape)
	}
	return p, st, nil
}
