package tensor

import (
	"fmt"
	"sync"
)

// Reshape returns a tensor with the same elements and a new shape. One
// dimension may be -1 and is inferred. A contiguous tensor gives a view
// sharing storage (t itself when the shape is t's, as Contiguous returns
// t); a non-contiguous one gives a contiguous copy.
func (t *Tensor) Reshape(shape ...int) *Tensor {
	if !t.IsContiguous() {
		shape = InferShape(t.Numel(), shape, "Reshape", t.shape)
		return t.Contiguous().Reshape(shape...)
	}
	if len(shape) == len(t.shape) && len(shape) <= inlineRank {
		var buf [inlineRank]int
		want := buf[:len(shape)]
		inferShape(want, t.Numel(), shape, "Reshape", t.shape)
		if SameShape(want, t.shape) {
			return t
		}
	}
	v := newTensor(len(shape), t.storage, t.offset)
	inferShape(v.shape, t.Numel(), shape, "Reshape", t.shape)
	v.setContiguous(v.shape)
	return v.seal()
}

// InferShape resolves a single -1 in shape for n elements, panicking with
// op and the source shape in the message when impossible.
func InferShape(n int, shape []int, op string, from []int) []int {
	var out []int
	if len(shape) > 0 {
		out = make([]int, len(shape))
	}
	inferShape(out, n, shape, op, from)
	return out
}

// inferShape is InferShape writing into out (len(out) == len(shape)).
// Neither shape nor from escapes: the panic messages format copies.
func inferShape(out []int, n int, shape []int, op string, from []int) {
	copy(out, shape)
	neg := -1
	known := 1
	for i, d := range out {
		switch {
		case d == -1 && neg < 0:
			neg = i
		case d < 0:
			panic(fmt.Sprintf("tensor: %s from %v to %v: invalid dimension %d", op, clone(from), clone(shape), d))
		default:
			known *= d
		}
	}
	if neg >= 0 {
		if known == 0 || n%known != 0 {
			panic(fmt.Sprintf("tensor: %s from %v to %v: cannot infer -1", op, clone(from), clone(shape)))
		}
		out[neg] = n / known
		known *= out[neg]
	}
	if known != n {
		panic(fmt.Sprintf("tensor: %s from %v to %v: element counts differ (%d vs %d)", op, clone(from), clone(shape), n, known))
	}
}

// clone copies s, so that formatting the copy in a panic message does not
// make s itself escape to the heap.
func clone(s []int) []int { return append([]int(nil), s...) }

// Narrow returns the view of elements start..start+length-1 along axis.
//
// A tensor narrowed more than once remembers its last few views and
// returns the same view again for the same arguments: a training loop
// that slices its batches out of the same tensors every epoch gets them
// without allocating. (A tensor's shape, strides and offset never change
// after it is made, so a view can be shared.)
func (t *Tensor) Narrow(axis, start, length int) *Tensor {
	a := t.Axis(axis)
	if start < 0 || length < 0 || start+length > t.shape[a] {
		panic(fmt.Sprintf("tensor: Narrow(axis %d, start %d, length %d) out of range for shape %v", axis, start, length, t.shape))
	}
	key := narrowKey{axis: a, start: start, length: length}
	c := t.views.Load()
	if c == nil && t.narrowed.Swap(true) {
		// The second view of t: from now on t keeps a cache.
		t.views.CompareAndSwap(nil, &viewCache{})
		c = t.views.Load()
	}
	if c != nil {
		if v := c.get(key); v != nil {
			return v
		}
	}
	v := newTensor(len(t.shape), t.storage, t.offset+start*t.strides[a])
	copy(v.shape, t.shape)
	copy(v.strides, t.strides)
	v.shape[a] = length
	v.seal()
	if c != nil {
		c.put(key, v)
	}
	return v
}

// narrowKey identifies a Narrow view of a tensor.
type narrowKey struct{ axis, start, length int }

// viewCacheLen is the number of views a tensor remembers: enough for
// the batches of a small epoch and a metrics tensor's fields.
const viewCacheLen = 8

// viewCache holds a tensor's recent Narrow views, replaced round-robin.
type viewCache struct {
	mu    sync.Mutex
	keys  [viewCacheLen]narrowKey
	views [viewCacheLen]*Tensor
	next  int
}

func (c *viewCache) get(k narrowKey) *Tensor {
	c.mu.Lock()
	defer c.mu.Unlock()
	for i, v := range c.views {
		if v != nil && c.keys[i] == k {
			return v
		}
	}
	return nil
}

func (c *viewCache) put(k narrowKey, v *Tensor) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.keys[c.next], c.views[c.next] = k, v
	c.next = (c.next + 1) % viewCacheLen
}

// Slice returns the view of indices [start, end) along axis.
func (t *Tensor) Slice(axis, start, end int) *Tensor { return t.Narrow(axis, start, end-start) }

// Select returns the view at index i along axis, with that axis removed.
// A negative i counts from the end of the axis.
func (t *Tensor) Select(axis, i int) *Tensor {
	a := t.Axis(axis)
	j := i
	if j < 0 {
		j += t.shape[a]
	}
	if j < 0 || j >= t.shape[a] {
		panic(fmt.Sprintf("tensor: Select(axis %d, index %d) out of range for shape %v", axis, i, t.shape))
	}
	v := t.Narrow(a, j, 1)
	return v.Squeeze(a)
}

// Permute returns a strided view with the axes reordered: result axis i is
// source axis dims[i]. No data moves; call Contiguous for a packed copy.
func (t *Tensor) Permute(dims ...int) *Tensor {
	if len(dims) != len(t.shape) {
		panic(fmt.Sprintf("tensor: Permute%v of shape %v: wrong number of axes", dims, t.shape))
	}
	var seenBuf [inlineRank]bool
	seen := seenBuf[:]
	if len(dims) > inlineRank {
		seen = make([]bool, len(dims))
	}
	v := newTensor(len(dims), t.storage, t.offset)
	shape, strides := v.shape, v.strides
	for i, d := range dims {
		d = t.Axis(d)
		if seen[d] {
			panic(fmt.Sprintf("tensor: Permute%v of shape %v: repeated axis", clone(dims), t.shape))
		}
		seen[d] = true
		shape[i] = t.shape[d]
		strides[i] = t.strides[d]
	}
	return v.seal()
}

// Transpose swaps two axes (a strided view).
func (t *Tensor) Transpose(a, b int) *Tensor {
	dims := make([]int, len(t.shape))
	for i := range dims {
		dims[i] = i
	}
	a, b = t.Axis(a), t.Axis(b)
	dims[a], dims[b] = dims[b], dims[a]
	return t.Permute(dims...)
}

// T transposes the last two axes.
func (t *Tensor) T() *Tensor { return t.Transpose(-2, -1) }

// Squeeze removes the given axes, which must have size 1; with no axes it
// removes every size-1 axis.
func (t *Tensor) Squeeze(axes ...int) *Tensor {
	drop := make([]bool, len(t.shape))
	if len(axes) == 0 {
		for i, d := range t.shape {
			drop[i] = d == 1
		}
	}
	for _, a := range axes {
		a = t.Axis(a)
		if t.shape[a] != 1 {
			panic(fmt.Sprintf("tensor: Squeeze axis %d of shape %v has size %d", a, t.shape, t.shape[a]))
		}
		drop[a] = true
	}
	var shape, strides []int
	for i := range t.shape {
		if !drop[i] {
			shape = append(shape, t.shape[i])
			strides = append(strides, t.strides[i])
		}
	}
	v := &Tensor{shape: shape, strides: strides, offset: t.offset, storage: t.storage}
	return v.seal()
}

// Unsqueeze inserts a size-1 axis at position axis (0..Rank()).
func (t *Tensor) Unsqueeze(axis int) *Tensor {
	r := len(t.shape)
	if axis < 0 {
		axis += r + 1
	}
	if axis < 0 || axis > r {
		panic(fmt.Sprintf("tensor: Unsqueeze axis %d out of range for shape %v", axis, t.shape))
	}
	st := 1
	if axis < r {
		st = t.strides[axis] * t.shape[axis]
	}
	v := newTensor(r+1, t.storage, t.offset)
	copy(v.shape, t.shape[:axis])
	copy(v.strides, t.strides[:axis])
	v.shape[axis], v.strides[axis] = 1, st
	copy(v.shape[axis+1:], t.shape[axis:])
	copy(v.strides[axis+1:], t.strides[axis:])
	return v.seal()
}

// Expand returns a broadcast view of t with the given shape: size-1 axes
// (and missing leading axes) get stride 0. As in PyTorch, -1 keeps the
// size of an existing axis. Writing through an expanded view is undefined.
func (t *Tensor) Expand(shape ...int) *Tensor {
	if len(shape) < len(t.shape) {
		panic(fmt.Sprintf("tensor: Expand of shape %v to lower rank %v", t.shape, shape))
	}
	lead := len(shape) - len(t.shape)
	out := append([]int(nil), shape...)
	strides := make([]int, len(shape))
	for i := range out {
		if i < lead {
			if out[i] < 0 {
				panic(fmt.Sprintf("tensor: Expand of shape %v to %v: new leading axis %d has invalid size %d", t.shape, shape, i, out[i]))
			}
			continue
		}
		src := t.shape[i-lead]
		if out[i] == -1 {
			out[i] = src
		}
		switch {
		case out[i] < 0:
			panic(fmt.Sprintf("tensor: Expand of shape %v to %v: axis %d has invalid size %d", t.shape, shape, i, out[i]))
		case src == out[i]:
			strides[i] = t.strides[i-lead]
		case src == 1:
			strides[i] = 0
		default:
			panic(fmt.Sprintf("tensor: Expand of shape %v to %v: axis %d has size %d", t.shape, shape, i, src))
		}
	}
	v := &Tensor{shape: out, strides: strides, offset: t.offset, storage: t.storage}
	return v.seal()
}

// Flatten reshapes to [Numel()].
func (t *Tensor) Flatten() *Tensor { return t.Reshape(t.Numel()) }

// BroadcastShapes returns the broadcast of two shapes under NumPy rules,
// or an error naming both.
func BroadcastShapes(a, b []int) ([]int, error) {
	n := max(len(a), len(b))
	out := make([]int, n)
	for i := 0; i < n; i++ {
		da, db := 1, 1
		if j := i - (n - len(a)); j >= 0 {
			da = a[j]
		}
		if j := i - (n - len(b)); j >= 0 {
			db = b[j]
		}
		switch {
		case da == db:
			out[i] = da
		case da == 1:
			out[i] = db
		case db == 1:
			out[i] = da
		default:
			return nil, fmt.Errorf("shapes %v and %v do not broadcast", a, b)
		}
	}
	return out, nil
}
