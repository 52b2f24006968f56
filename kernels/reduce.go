package kernels

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
