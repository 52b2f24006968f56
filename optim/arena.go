package optim

import (
	"errors"
	"fmt"

	"github.com/esper-go/esper/autograd"
	"github.com/esper-go/esper/kernels"
	"github.com/esper-go/esper/tensor"
)

// ErrArena is wrapped by every error NewArena and Arena.Rebuild return, so
// callers can match bad parameter lists with errors.Is.
var ErrArena = errors.New("optim: invalid parameter list")

// Arena lays parameters and their gradients out contiguously: per dtype,
// one flat parameter buffer and one flat gradient buffer, with every
// parameter's Value and Grad repointed to a view of them. Modules read
// v.Value at every forward and Backward accumulates into v.Grad in place,
// so both keep working on the arena, while an optimizer updates all
// parameters of a dtype with one kernel launch.
//
// Parameters are grouped into buckets by dtype in order of first
// appearance; within a bucket they are laid out in the order given,
// without padding. Models are normally all F32, giving one bucket.
//
// An Arena is not safe for concurrent use.
type Arena struct {
	params  []*autograd.Var
	buckets []*Bucket
	grads   []*tensor.Tensor // the buckets' FlatGrad, prebuilt for foreach kernels
	where   map[*autograd.Var]slot
	device  tensor.Device
	version uint64
}

// slot locates a parameter: its bucket and its offset in the flat buffers.
type slot struct {
	bucket, offset, numel int
}

// Bucket is the part of an Arena holding the parameters of one dtype.
type Bucket struct {
	dtype   tensor.DType
	params  []*autograd.Var
	offsets []int
	flat    *tensor.Tensor
	grad    *tensor.Tensor
}

// DType is the dtype of the bucket's parameters.
func (b *Bucket) DType() tensor.DType { return b.dtype }

// Params returns the bucket's parameters in layout order (a copy).
func (b *Bucket) Params() []*autograd.Var { return append([]*autograd.Var(nil), b.params...) }

// Offset returns the element offset of the bucket's i-th parameter in the
// flat buffers.
func (b *Bucket) Offset(i int) int { return b.offsets[i] }

// Flat is the bucket's flat parameter buffer, shape [Len()].
func (b *Bucket) Flat() *tensor.Tensor { return b.flat }

// FlatGrad is the bucket's flat gradient buffer, shape [Len()].
func (b *Bucket) FlatGrad() *tensor.Tensor { return b.grad }

// Len is the number of elements in the bucket.
func (b *Bucket) Len() int { return b.flat.Numel() }

// NewArena copies params into fresh flat buffers and repoints each
// parameter's Value to a view of them and its Grad to a zeroed view of the
// gradient buffer (any previous Grad is dropped). Parameters must be
// distinct leaves that require gradients, have a float dtype and all live
// on one device; the list must not be empty. Errors wrap ErrArena.
func NewArena(params []*autograd.Var) (*Arena, error) {
	a := &Arena{}
	if err := a.Rebuild(params); err != nil {
		return nil, err
	}
	return a, nil
}

// Rebuild lays the arena out again for a new parameter set (seeds grown or
// pruned) and bumps Version. Parameters that were already in the arena
// keep their current values; every gradient is zeroed. On error the arena
// is left unchanged. Optimizers notice the new version at their next Step
// and carry their state over for the parameters they already had.
//
// Views of the old buffers (Flat, FlatGrad, an earlier Value or Grad) no
// longer alias the parameters after a Rebuild, and captured steps that
// recorded them are stale: capture guards key on Version for that reason.
func (a *Arena) Rebuild(params []*autograd.Var) error {
	if err := validateParams(params); err != nil {
		return err
	}
	dev := params[0].Value.Device()

	var buckets []*Bucket
	byType := map[tensor.DType]*Bucket{}
	where := make(map[*autograd.Var]slot, len(params))
	sizes := map[tensor.DType]int{}
	for _, v := range params {
		dt := v.Value.DType()
		b := byType[dt]
		if b == nil {
			b = &Bucket{dtype: dt}
			byType[dt] = b
			buckets = append(buckets, b)
		}
		where[v] = slot{bucket: indexOf(buckets, b), offset: sizes[dt], numel: v.Value.Numel()}
		b.params = append(b.params, v)
		b.offsets = append(b.offsets, sizes[dt])
		sizes[dt] += v.Value.Numel()
	}

	for _, b := range buckets {
		b.flat = emptyOn(dev, b.dtype, sizes[b.dtype])
		b.grad = emptyOn(dev, b.dtype, sizes[b.dtype])
	}
	// Copy values first, then repoint: a parameter may appear in the old
	// layout, and its old view must stay readable until it is copied.
	values := make([]*tensor.Tensor, len(params))
	grads := make([]*tensor.Tensor, len(params))
	for i, v := range params {
		s := where[v]
		b := buckets[s.bucket]
		shape := v.Value.Shape()
		strides := tensor.ContiguousStrides(shape)
		values[i] = tensor.New(b.flat.Storage(), shape, strides, s.offset)
		grads[i] = tensor.New(b.grad.Storage(), shape, strides, s.offset)
		copyTensor(values[i], v.Value)
	}
	for i, v := range params {
		v.Value = values[i]
		v.Grad = grads[i]
	}

	a.params = append([]*autograd.Var(nil), params...)
	a.buckets = buckets
	a.grads = make([]*tensor.Tensor, len(buckets))
	for i, b := range buckets {
		a.grads[i] = b.grad
	}
	a.where = where
	a.device = dev
	a.version++
	return nil
}

func indexOf(bs []*Bucket, b *Bucket) int {
	for i, x := range bs {
		if x == b {
			return i
		}
	}
	return -1
}

func validateParams(params []*autograd.Var) error {
	if len(params) == 0 {
		return fmt.Errorf("%w: empty parameter list", ErrArena)
	}
	seen := make(map[*autograd.Var]int, len(params))
	var dev tensor.Device
	for i, v := range params {
		if v == nil || v.Value == nil {
			return fmt.Errorf("%w: parameter %d is nil", ErrArena, i)
		}
		name := paramName(v, i)
		if j, dup := seen[v]; dup {
			return fmt.Errorf("%w: parameter %s appears twice (positions %d and %d)", ErrArena, name, j, i)
		}
		seen[v] = i
		if !v.IsLeaf() {
			return fmt.Errorf("%w: parameter %s is not a leaf (it is the output of %s)", ErrArena, name, v.Op())
		}
		if !v.RequiresGrad() {
			return fmt.Errorf("%w: parameter %s does not require a gradient", ErrArena, name)
		}
		if !v.Value.DType().IsFloat() {
			return fmt.Errorf("%w: parameter %s has non-float dtype %v", ErrArena, name, v.Value.DType())
		}
		if i == 0 {
			dev = v.Value.Device()
		} else if d := v.Value.Device(); d != dev {
			return fmt.Errorf("%w: parameter %s is on %v but parameter %s is on %v", ErrArena, name, d, paramName(params[0], 0), dev)
		}
	}
	return nil
}

func paramName(v *autograd.Var, i int) string {
	if v.Name != "" {
		return fmt.Sprintf("%q", v.Name)
	}
	return fmt.Sprintf("#%d", i)
}

// Params returns the parameters in the order given (a copy).
func (a *Arena) Params() []*autograd.Var { return append([]*autograd.Var(nil), a.params...) }

// Buckets returns the per-dtype buckets in order of first appearance.
func (a *Arena) Buckets() []*Bucket { return append([]*Bucket(nil), a.buckets...) }

// Flat returns the flat parameter buffer of a single-dtype arena (the usual
// case). It panics when the arena holds several dtypes; use Buckets then.
func (a *Arena) Flat() *tensor.Tensor { return a.single("Flat").flat }

// FlatGrad returns the flat gradient buffer of a single-dtype arena. It
// panics when the arena holds several dtypes; use Buckets then.
func (a *Arena) FlatGrad() *tensor.Tensor { return a.single("FlatGrad").grad }

func (a *Arena) single(op string) *Bucket {
	if len(a.buckets) != 1 {
		panic(fmt.Sprintf("optim: Arena.%s on an arena of %d dtypes (use Buckets)", op, len(a.buckets)))
	}
	return a.buckets[0]
}

// Len is the total number of parameter elements over all buckets.
func (a *Arena) Len() int {
	n := 0
	for _, b := range a.buckets {
		n += b.Len()
	}
	return n
}

// Version counts parameter-set changes: 1 after NewArena, bumped by every
// Rebuild. Capture guards include it in their key.
func (a *Arena) Version() uint64 { return a.version }

// Device is where the arena's buffers live.
func (a *Arena) Device() tensor.Device { return a.device }

// ZeroGrad zeroes every gradient: one backend Fill per bucket, so it is
// recorded by a capture.
func (a *Arena) ZeroGrad() {
	be := kernels.For(a.device)
	for _, b := range a.buckets {
		be.Fill(b.grad, 0)
	}
}

// AppendGradBuffers appends the arena's gradient buffers (one flat
// tensor per bucket, every parameter's Grad a view of one) to bufs and
// returns it: for a caller that zeroes them together with other buffers
// in one launch (kernels.ZeroManyer), as ZeroGrad's Fills would. They are
// the arena's own tensors: write nothing but what a gradient may hold.
func (a *Arena) AppendGradBuffers(bufs []*tensor.Tensor) []*tensor.Tensor {
	for _, b := range a.buckets {
		bufs = append(bufs, b.grad)
	}
	return bufs
}

// Verify reports a parameter whose Value or Grad no longer views the arena
// (replaced by a checkpoint load, or Grad set to nil), which would make an
// optimizer step silently miss it.
func (a *Arena) Verify() error {
	for i, v := range a.params {
		b := a.buckets[a.where[v].bucket]
		if v.Value == nil || v.Value.Storage() != b.flat.Storage() {
			return fmt.Errorf("optim: parameter %s no longer views the arena (its Value was replaced; copy into it instead, or call Arena.Rebuild)", paramName(v, i))
		}
		if v.Grad == nil || v.Grad.Storage() != b.grad.Storage() {
			return fmt.Errorf("optim: gradient of parameter %s no longer views the arena (its Grad was replaced or set to nil; use Arena.ZeroGrad)", paramName(v, i))
		}
	}
	return nil
}

// mustVerify panics with Verify's error; optimizers call it before each
// eager step (a few pointer compares per parameter).
func (a *Arena) mustVerify() {
	if err := a.Verify(); err != nil {
		panic(err)
	}
}
