package kernels

// SoftmaxFamily is the softmax op family: softmax and log-softmax along
// an axis with their gradients, and the softmax cross-entropy loss.
type SoftmaxFamily interface {
	// Softmax and LogSoftmax normalise along axis.
	Softmax(dst, x *T, axis int)
	LogSoftmax(dst, x *T, axis int)
	// SoftmaxBackward computes dx = y*(dy - Σ y·dy) from y = softmax(x).
	SoftmaxBackward(dx, y, dy *T, axis int)
	// LogSoftmaxBackward computes dx = dy - exp(y)·Σdy from y = logsoftmax(x).
	LogSoftmaxBackward(dx, y, dy *T, axis int)
	// CrossEntropy computes the softmax cross-entropy of logits [N,C]
	// against class indices target [N] (I64 or I32). loss is a scalar
	// (shape []) for mean/sum, [N] for none. Out-of-range targets panic.
	CrossEntropy(loss, logits, target *T, p CrossEntropyParams)
	// CrossEntropyBackward overwrites dlogits given dloss (shaped like
	// loss).
	CrossEntropyBackward(dlogits, logits, target, dloss *T, p CrossEntropyParams)
}

// Reduction says how a loss combines per-sample values.
type Reduction uint8

// Loss reductions (zero value = mean, as in PyTorch).
const (
	ReduceMean Reduction = iota
	ReduceSum
	ReduceNone
)

// CrossEntropyParams configures softmax cross-entropy over class indices.
type CrossEntropyParams struct {
	Reduction      Reduction
	LabelSmoothing float64 // in [0, 1)
	// IgnoreIndex: targets equal to it contribute nothing (and are left
	// out of the mean). Use a negative value such as -100 (PyTorch's
	// default); HasIgnore enables it.
	IgnoreIndex int64
	HasIgnore   bool
}
