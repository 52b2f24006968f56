package data

import (
	"fmt"

	"github.com/esper-go/esper/tensor"
)

// Dataset is a labelled image-classification set held in memory. The
// Loader only needs these four methods, so any in-memory source can feed
// it.
type Dataset interface {
	// Len is the number of samples.
	Len() int
	// Classes is the number of classes; labels lie in [0, Classes).
	Classes() int
	// Shape is the shape of one sample, [C, H, W] (a fresh slice).
	Shape() []int
	// Batch copies samples indices[0], indices[1], … into x (F32
	// [len(indices), C, H, W], contiguous, on the CPU) and y (I64
	// [len(indices)]). It allocates nothing. An index out of range or a
	// mis-shaped destination is a programming error and panics.
	Batch(indices []int, x, y *tensor.Tensor)
}

// Normalization maps a raw pixel p in [0, 255] to the stored value
// (p/255 − Mean)/Std.
type Normalization struct {
	Mean, Std float64
}

// Apply normalises raw pixel p.
func (n Normalization) Apply(p uint8) float32 {
	return float32((float64(p)/255 - n.Mean) / n.Std)
}

// Invert maps a stored value back to the [0, 1] pixel scale (p/255).
func (n Normalization) Invert(v float32) float64 { return float64(v)*n.Std + n.Mean }

// lut returns the 256 normalised values, so that normalising a pixel is
// one table lookup and gives bitwise the same value as Apply.
func (n Normalization) lut() *[256]float32 {
	var t [256]float32
	for p := range t {
		t[p] = n.Apply(uint8(p))
	}
	return &t
}

// TensorDataset is a Dataset over two tensors: images F32 [N, C, H, W]
// and labels I64 [N]. Synthetic and OpenFashionMNIST return one.
type TensorDataset struct {
	name    string
	x, y    *tensor.Tensor
	classes int
	sample  int // C·H·W
	norm    Normalization
}

// NewTensorDataset wraps images x (F32 [N, C, H, W], contiguous, CPU)
// and labels y (I64 [N], every label in [0, classes)). The tensors are
// kept, not copied. norm records how x was normalised (informational).
func NewTensorDataset(name string, x, y *tensor.Tensor, classes int, norm Normalization) (*TensorDataset, error) {
	switch {
	case x == nil || y == nil:
		return nil, fmt.Errorf("data: %s: nil images or labels", name)
	case x.DType() != tensor.F32 || x.Rank() != 4 || !x.IsContiguous() || !x.Device().IsCPU():
		return nil, fmt.Errorf("data: %s: images must be a contiguous CPU F32 tensor [N, C, H, W], got %v %v", name, x.DType(), x.Shape())
	case y.DType() != tensor.I64 || y.Rank() != 1 || !y.IsContiguous() || !y.Device().IsCPU():
		return nil, fmt.Errorf("data: %s: labels must be a contiguous CPU I64 tensor [N], got %v %v", name, y.DType(), y.Shape())
	case x.Dim(0) != y.Dim(0):
		return nil, fmt.Errorf("data: %s: %d images but %d labels", name, x.Dim(0), y.Dim(0))
	case classes < 1:
		return nil, fmt.Errorf("data: %s: %d classes (want ≥ 1)", name, classes)
	}
	for i, l := range y.I64() {
		if l < 0 || l >= int64(classes) {
			return nil, fmt.Errorf("data: %s: label %d of sample %d outside [0, %d)", name, l, i, classes)
		}
	}
	s := x.Shape()
	return &TensorDataset{name: name, x: x, y: y, classes: classes, sample: s[1] * s[2] * s[3], norm: norm}, nil
}

// Name identifies the set in messages ("synthetic/train").
func (d *TensorDataset) Name() string { return d.name }

// Len is the number of samples.
func (d *TensorDataset) Len() int { return d.x.Dim(0) }

// Classes is the number of classes.
func (d *TensorDataset) Classes() int { return d.classes }

// Shape is [C, H, W].
func (d *TensorDataset) Shape() []int { return append([]int(nil), d.x.Shape()[1:]...) }

// Images is the whole image tensor [N, C, H, W] (the dataset's own: do
// not write to it).
func (d *TensorDataset) Images() *tensor.Tensor { return d.x }

// Labels is the whole label tensor [N] (the dataset's own).
func (d *TensorDataset) Labels() *tensor.Tensor { return d.y }

// Normalization says how raw pixels became the stored values.
func (d *TensorDataset) Normalization() Normalization { return d.norm }

// Batch copies the samples at indices into x and y; see Dataset.
func (d *TensorDataset) Batch(indices []int, x, y *tensor.Tensor) {
	d.checkBatch(len(indices), x, y)
	src, lab := d.x.F32(), d.y.I64()
	dx, dy := x.F32(), y.I64()
	n, s := len(lab), d.sample
	for i, idx := range indices {
		if idx < 0 || idx >= n {
			panic(fmt.Sprintf("data: %s: Batch index %d out of range [0, %d)", d.name, idx, n))
		}
		copy(dx[i*s:(i+1)*s], src[idx*s:(idx+1)*s])
		dy[i] = lab[idx]
	}
}

// checkBatch panics unless x is F32 [b, C, H, W] and y I64 [b], both
// contiguous on the CPU.
func (d *TensorDataset) checkBatch(b int, x, y *tensor.Tensor) {
	xs, want := x.Shape(), d.x.Shape()
	okX := x.DType() == tensor.F32 && len(xs) == 4 && xs[0] == b && xs[1] == want[1] && xs[2] == want[2] && xs[3] == want[3] && x.IsContiguous() && x.Device().IsCPU()
	okY := y.DType() == tensor.I64 && y.Rank() == 1 && y.Dim(0) == b && y.IsContiguous() && y.Device().IsCPU()
	if !okX || !okY {
		panic(fmt.Sprintf("data: %s: Batch of %d into x %v %v, y %v %v: want contiguous CPU F32 [%d %d %d %d] and I64 [%d]",
			d.name, b, x.DType(), xs, y.DType(), y.Shape(), b, want[1], want[2], want[3], b))
	}
}
