package kernels

import (
	"fmt"

	"github.com/esper-go/esper/tensor"
)

// ReduceFamily is the reduction op family: reductions over axes, the
// arg-max and the accuracy counter built on it.
type ReduceFamily interface {
	// Reduce reduces x over axes into dst, which has x's rank with the
	// reduced axes of size 1 (keep-dims form). LogSumExp is stable
	// (max-shifted). The order of accumulation is fixed.
	Reduce(op ReduceOp, dst, x *T, axes []int)
	// ArgMax writes the index (I64) of the first maximum along axis; dst
	// has x's rank with that axis of size 1.
	ArgMax(dst, x *T, axis int)
	// CountCorrect adds to acc (F32 [N]) 1 for each row i of logits
	// ([N, C]) whose first maximum (NaN counting as the maximum, as in
	// ArgMax) lies at index target[i] (I64 or I32 [N]), and 0 for the
	// others: ArgMax, the comparison and the accumulation in one launch,
	// for accuracy counters kept on the device.
	CountCorrect(acc, logits, target *T)
}

// ReduceOp selects a reduction.
type ReduceOp uint8

// Reductions.
const (
	Sum ReduceOp = iota
	Mean
	Max
	Min
	LogSumExp
	numReduce
)

var reduceNames = [...]string{"sum", "mean", "max", "min", "logsumexp"}

func (o ReduceOp) String() string {
	if o < numReduce {
		return reduceNames[o]
	}
	return "reduce?"
}

// ReduceOps lists every ReduceOp.
func ReduceOps() []ReduceOp {
	out := make([]ReduceOp, numReduce)
	for i := range out {
		out[i] = ReduceOp(i)
	}
	return out
}

// CheckReduce checks a Reduce and marks the reduced axes in red (len
// x.Rank(), cleared first, supplied by the caller so that a small rank
// needs no allocation): a known op, a float x, every axis in range and
// dst of x's shape with the reduced axes of size 1.
func CheckReduce(name string, op ReduceOp, dst, x *T, axes []int, red []bool) error {
	xs := x.Shape()
	clear(red)
	for _, ax := range axes {
		a, err := NormAxis(name, ax, xs)
		if err != nil {
			return err
		}
		red[a] = true
	}
	ds := dst.Shape()
	ok := len(ds) == len(xs)
	for i := 0; ok && i < len(xs); i++ {
		if red[i] {
			ok = ds[i] == 1
		} else {
			ok = ds[i] == xs[i]
		}
	}
	if !ok {
		want := append([]int(nil), xs...)
		for i := range want {
			if red[i] {
				want[i] = 1
			}
		}
		return fmt.Errorf("%s: x shape %v reduced over axes %v gives %v, dst has shape %v", name, xs, append([]int(nil), axes...), want, ds)
	}
	if op >= numReduce {
		return fmt.Errorf("%s: unknown op %d", name, op)
	}
	if !x.DType().IsFloat() {
		return floatError(name, "x", x)
	}
	return nil
}

// CheckArgMax checks an ArgMax and returns the axis resolved: dst (I64)
// of x's shape with that axis of size 1, a float x, a non-empty axis.
func CheckArgMax(name string, dst, x *T, axis int) (int, error) {
	xs, ds := x.Shape(), dst.Shape()
	a, err := NormAxis(name, axis, xs)
	if err != nil {
		return 0, err
	}
	ok := len(ds) == len(xs)
	for i := 0; ok && i < len(xs); i++ {
		if i == a {
			ok = ds[i] == 1
		} else {
			ok = ds[i] == xs[i]
		}
	}
	if !ok {
		want := append([]int(nil), xs...)
		want[a] = 1
		return 0, fmt.Errorf("%s: x shape %v along axis %d gives %v, dst has shape %v", name, xs, axis, want, ds)
	}
	if dst.DType() != tensor.I64 {
		return 0, fmt.Errorf("%s: dst (shape %v) has dtype %v, want i64", name, ds, dst.DType())
	}
	if !x.DType().IsFloat() {
		return 0, floatError(name, "x", x)
	}
	if xs[a] == 0 {
		return 0, fmt.Errorf("%s: axis %d of shape %v is empty", name, axis, xs)
	}
	return a, nil
}

// CheckCountCorrect checks a CountCorrect and returns N and C: float
// logits [N, C] with C > 0, target [N] of I64 or I32 indices, acc [N]
// F32.
func CheckCountCorrect(name string, acc, logits, target *T) (n, c int, err error) {
	ls := logits.Shape()
	if len(ls) != 2 || ls[1] == 0 {
		return 0, 0, fmt.Errorf("%s: logits shape %v, want [N, C] with C > 0", name, ls)
	}
	n, c = ls[0], ls[1]
	if !logits.DType().IsFloat() {
		return 0, 0, floatError(name, "logits", logits)
	}
	if ts := target.Shape(); len(ts) != 1 || ts[0] != n {
		return 0, 0, fmt.Errorf("%s: target has shape %v, want [%d]", name, ts, n)
	}
	if as := acc.Shape(); len(as) != 1 || as[0] != n {
		return 0, 0, fmt.Errorf("%s: acc has shape %v, want [%d]", name, as, n)
	}
	if acc.DType() != tensor.F32 {
		return 0, 0, fmt.Errorf("%s: acc (shape %v) has dtype %v, want f32", name, acc.Shape(), acc.DType())
	}
	if !isIndex(target) {
		return 0, 0, indexError(name, "target", target)
	}
	return n, c, nil
}
