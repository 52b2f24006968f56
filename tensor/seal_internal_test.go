package tensor

import (
	"github.com/stretchr/testify/require"
	"testing"
	"unsafe"
)

// TestConstructorsSeal: every way of making a tensor records its element
// count and contiguity (seal), and the recorded values are those computed
// from its shape and strides.
func TestConstructorsSeal(t *testing.T) {
	x := FromFloat64s(F64, []float64{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11}, 3, 4)
	big := Empty(F32, 2, 3, 4, 5, 6) // rank above inlineRank
	made := map[string]*Tensor{
		"Empty small":     Empty(F32, 2, 2),
		"Empty large":     Empty(F32, 64, 64),
		"Empty rank 5":    big,
		"Empty scalar":    Empty(F32),
		"Empty empty":     Empty(F32, 0, 3),
		"Full":            Full(F64, 2, 3),
		"FromFloat64s":    x,
		"New":             New(x.Storage(), []int{2, 2}, []int{4, 1}, 1),
		"Reshape":         x.Reshape(4, 3),
		"Reshape -1":      x.Reshape(-1),
		"Narrow":          x.Narrow(1, 1, 2),
		"Narrow again":    x.Narrow(1, 1, 2),
		"Narrow rows":     x.Narrow(0, 1, 2),
		"Permute":         x.Permute(1, 0),
		"T":               x.T(),
		"Squeeze":         x.Narrow(0, 1, 1).Squeeze(),
		"Unsqueeze":       x.Unsqueeze(1),
		"Expand":          x.Narrow(0, 0, 1).Expand(3, 4),
		"Select":          x.Select(1, 2),
		"Flatten":         x.Flatten(),
		"Contiguous":      x.T().Contiguous(),
		"Clone":           x.Clone(),
		"Cast":            x.Cast(F32),
		"Permute rank 5":  big.Permute(4, 3, 2, 1, 0),
		"Narrow rank 5":   big.Narrow(2, 1, 2),
		"Reshape rank 5":  big.Reshape(6, 4, 5, 6),
		"Unsqueeze rank5": big.Unsqueeze(0),
	}
	for name, v := range made {
		if !v.sealed {
			t.Errorf("%s: not sealed", name)
			continue
		}
		if v.numel != Numel(v.shape) || v.contig != v.computeContiguous() {
			t.Errorf("%s: sealed numel %d contig %v, computed %d %v", name, v.numel, v.contig, Numel(v.shape), v.computeContiguous())
		}
	}
}

// TestSmallTensorOneAllocation: a small tensor is one allocation, of
// the size class just above its tier's object, with its elements inside
// it, aligned for the dtype, for every small size and dtype.
func TestSmallTensorOneAllocation(t *testing.T) {
	require.Equal(t, uintptr(224), unsafe.Sizeof(tinyTensorStorage{}))
	require.Equal(t, uintptr(280), unsafe.Sizeof(smallTensorStorage{}))
	for _, d := range []DType{F32, F64, I64, BF16} {
		for n := 1; n*d.Size() <= smallBytes; n++ {
			if a := testing.AllocsPerRun(50, func() { _ = Empty(d, n) }); a != 1 {
				t.Fatalf("Empty(%v, %d): %v allocations, want 1", d, n, a)
			}
			x := Empty(d, n)
			p := uintptr(unsafe.Pointer(&x.storage.host[0]))
			base := uintptr(unsafe.Pointer(x))
			if p < base || p >= base+unsafe.Sizeof(smallTensorStorage{}) {
				t.Fatalf("Empty(%v, %d): elements at %#x, not inside the tensor's object at %#x", d, n, p, base)
			}
			if p%uintptr(d.Size()) != 0 || len(x.storage.host) != n*d.Size() || cap(x.storage.host) != n*d.Size() {
				t.Fatalf("Empty(%v, %d): elements at %#x, len %d cap %d", d, n, p, len(x.storage.host), cap(x.storage.host))
			}
		}
	}
}
