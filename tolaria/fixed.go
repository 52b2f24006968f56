package tolaria

import (
	"fmt"
	"iter"

	"github.com/esper-go/esper/tensor"
)

// FixedBatches is implemented by a Batches source whose every epoch
// yields the very same batch tensors, in the same order, holding the
// same values: a dataset kept on the model's device and cut into views
// once, never shuffled nor refilled (a *Fixed is one). With
// TrainerOptions.Capture and both Train and Val fixed, the trainer
// captures the whole epoch — every training step and every validation
// batch — as one graph, replayed with one launch a epoch instead of one
// per batch (see TrainerOptions.Capture).
type FixedBatches interface {
	Batches
	// Fixed reports whether the promise holds now; a source may
	// implement the interface and decline.
	Fixed() bool
}

// Fixed is a FixedBatches over two tensors already where the model
// is: consecutive views of Size rows of x and y, the last one shorter
// when Size does not divide the rows (unless DropLast). The views are
// made once, by NewFixed; every epoch yields them in order.
type Fixed struct {
	xs, ys []*tensor.Tensor
	rows   int
	seq    iter.Seq2[*tensor.Tensor, *tensor.Tensor]
}

// FixedOptions configures NewFixed.
type FixedOptions struct {
	// Size is the batch size (rows per batch), at least 1.
	Size int
	// DropLast leaves out a last batch shorter than Size (training
	// batches should all have the same size: a captured step
	// re-captures for every new shape).
	DropLast bool
}

// NewFixed cuts x (F32 [N, ...]) and y (I64 [N]) into batches of
// o.Size rows. They must be on the same device, the model's: the
// trainer copies nothing from a Fixed source. It is an error when the
// rows do not match or no batch results.
func NewFixed(x, y *tensor.Tensor, o FixedOptions) (*Fixed, error) {
	switch {
	case x == nil || y == nil:
		return nil, fmt.Errorf("%w: NewFixed: nil images or labels", ErrOptions)
	case o.Size < 1:
		return nil, fmt.Errorf("%w: NewFixed: batch size %d must be at least 1", ErrOptions, o.Size)
	case x.Rank() < 1 || y.Rank() != 1:
		return nil, fmt.Errorf("%w: NewFixed: images %v and labels %v: want images [N, ...] and labels [N]", ErrOptions, x.Shape(), y.Shape())
	case x.Dim(0) != y.Dim(0):
		return nil, fmt.Errorf("%w: NewFixed: %d images and %d labels", ErrOptions, x.Dim(0), y.Dim(0))
	case x.Device() != y.Device():
		return nil, fmt.Errorf("%w: NewFixed: images on %v and labels on %v", ErrOptions, x.Device(), y.Device())
	}
	n := x.Dim(0)
	if o.DropLast {
		n -= n % o.Size
	}
	if n == 0 {
		return nil, fmt.Errorf("%w: NewFixed: %d rows make no batch of %d (DropLast %v)", ErrOptions, x.Dim(0), o.Size, o.DropLast)
	}
	f := &Fixed{rows: n}
	for at := 0; at < n; at += o.Size {
		k := min(o.Size, n-at)
		f.xs = append(f.xs, x.Narrow(0, at, k))
		f.ys = append(f.ys, y.Narrow(0, at, k))
	}
	f.seq = func(yield func(*tensor.Tensor, *tensor.Tensor) bool) {
		for i := range f.xs {
			if !yield(f.xs[i], f.ys[i]) {
				return
			}
		}
	}
	return f, nil
}

// Batches returns the batches, the same every epoch.
func (f *Fixed) Batches(int) iter.Seq2[*tensor.Tensor, *tensor.Tensor] { return f.seq }

// Fixed reports true: the views never change.
func (f *Fixed) Fixed() bool { return true }

// Len returns the number of batches an epoch yields.
func (f *Fixed) Len() int { return len(f.xs) }

// Rows returns the number of rows an epoch yields (after DropLast).
func (f *Fixed) Rows() int { return f.rows }
