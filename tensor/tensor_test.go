package tensor_test

import (
	"testing"
	"unsafe"

	"github.com/esper-go/esper/tensor"
)

func TestNewBounds(t *testing.T) {
	s := tensor.NewStorage(tensor.F32, 12)
	ok := []struct {
		name            string
		shape, strides  []int
		offset          int
		firstStorageIdx int
	}{
		{"whole", ints(3, 4), ints(4, 1), 0, 0},
		{"transposed", ints(4, 3), ints(1, 4), 0, 0},
		{"last element", ints(1), ints(1), 11, 11},
		{"negative stride", ints(4), ints(-1), 3, 3},
		{"negative stride reaching 0", ints(3, 4), ints(-4, 1), 8, 8},
		{"broadcast", ints(5, 12), ints(0, 1), 0, 0},
		{"scalar", ints(), ints(), 7, 7},
		{"empty with any offset", ints(0, 4), ints(4, 1), 100, -1},
	}
	for _, tc := range ok {
		t.Run(tc.name, func(t *testing.T) {
			v := tensor.New(s, tc.shape, tc.strides, tc.offset)
			sameInts(t, v.Shape(), tc.shape, "shape")
			sameInts(t, v.Strides(), tc.strides, "strides")
			if tc.firstStorageIdx >= 0 {
				equal(t, v.StorageIndices()[0], tc.firstStorageIdx, "first storage index")
			}
		})
	}
	// New copies its slices: changing the caller's afterwards has no effect.
	shape := []int{3, 4}
	v := tensor.New(s, shape, []int{4, 1}, 0)
	shape[0] = 99
	sameInts(t, v.Shape(), ints(3, 4), "New must copy shape")

	bad := []struct {
		name           string
		shape, strides []int
		offset         int
		want           string
	}{
		{"one past end", ints(13), ints(1), 0, "tensor: view shape [13] strides [1] offset 0 reaches outside storage of 12 elements"},
		{"offset past end", ints(2), ints(1), 11, "tensor: view shape [2] strides [1] offset 11 reaches outside storage of 12 elements"},
		{"stride too big", ints(3, 4), ints(5, 1), 0, "tensor: view shape [3 4] strides [5 1] offset 0 reaches outside storage of 12 elements"},
		{"negative offset", ints(1), ints(1), -1, "tensor: view shape [1] strides [1] offset -1 reaches outside storage of 12 elements"},
		{"negative stride below 0", ints(4), ints(-1), 2, "tensor: view shape [4] strides [-1] offset 2 reaches outside storage of 12 elements"},
		{"rank mismatch", ints(3, 4), ints(1), 0, "tensor: New with shape [3 4] and strides [1] of different rank"},
		// A negative dimension makes the element count negative; this
		// used to skip every check and return a broken tensor.
		{"negative dim", ints(-2, 3), ints(3, 1), 0, "tensor: New with negative dimension in shape [-2 3]"},
		{"negative vector", ints(-1), ints(1), 0, "tensor: New with negative dimension in shape [-1]"},
		{"two negative dims", ints(-1, -1), ints(1, 1), 0, "tensor: New with negative dimension in shape [-1 -1]"},
	}
	for _, tc := range bad {
		t.Run(tc.name, func(t *testing.T) {
			mustPanicWith(t, tc.want, func() { tensor.New(s, tc.shape, tc.strides, tc.offset) })
		})
	}
}

func TestElementAccessOnStridedViews(t *testing.T) {
	for _, d := range allDTypes {
		t.Run(d.String(), func(t *testing.T) {
			// Values 0..11 fit every dtype exactly, bool aside.
			x := tensor.FromFloat64s(d, iota64(24), 2, 3, 4)
			v := x.Permute(2, 0, 1).Narrow(0, 1, 2) // shape [2 2 3], strides [1 12 4], offset 1
			sameInts(t, v.Shape(), ints(2, 2, 3), "shape")
			want := func(i, j, k int) float64 { return float64(12*j + 4*k + 1 + i) }
			if d == tensor.Bool {
				want = func(i, j, k int) float64 { return 1 }
			}
			var all []float64
			for i := 0; i < 2; i++ {
				for j := 0; j < 2; j++ {
					for k := 0; k < 3; k++ {
						equal(t, v.At(i, j, k), want(i, j, k), "At", []int{i, j, k})
						all = append(all, want(i, j, k))
					}
				}
			}
			equal(t, v.Float64s(), all, "Float64s")

			v.Set(0, 1, 1, 2) // storage index 2 + 12 + 8 = 22
			equal(t, x.At(1, 2, 2), 0.0, "Set through view")
			equal(t, v.At(1, 1, 2), 0.0, "At after Set")

			one := v.Narrow(0, 1, 1).Narrow(1, 0, 1).Narrow(2, 2, 1)
			equal(t, one.Item(), want(1, 0, 2), "Item of a one-element view")
			equal(t, v.Select(0, 1).Select(0, 0).Select(0, 2).Item(), want(1, 0, 2), "Item of rank 0")
		})
	}
}

func TestElementAccessPanics(t *testing.T) {
	x := tensor.Zeros(tensor.F32, 2, 3)
	mustPanicWith(t, "tensor: index [2 0] out of range for shape [2 3]", func() { x.At(2, 0) })
	mustPanicWith(t, "tensor: index [0 -1] out of range for shape [2 3]", func() { x.Set(1, 0, -1) })
	mustPanicWith(t, "tensor: index [1] has rank 1, tensor shape [2 3]", func() { x.At(1) })
	mustPanicWith(t, "tensor: Item of tensor with shape [2 3] (want one element)", func() { x.Item() })
	mustPanicWith(t, "tensor: Item of tensor with shape [0] (want one element)", func() { tensor.Zeros(tensor.F32, 0).Item() })
}

func TestDataAliasesStorage(t *testing.T) {
	x := tensor.Zeros(tensor.I32, 2, 3)
	row := x.Select(0, 1)
	row.I32()[2] = 7
	equal(t, x.At(1, 2), 7.0)
	equal(t, len(row.I32()), 3)
	equal(t, tensor.Data[int32](x)[5], int32(7))
	// A view's slice ends where the view does: its capacity is its
	// length, small (elements in the tensor's own object) or not.
	equal(t, cap(row.I32()), 3)
	big := tensor.Arange(tensor.F64, 0, 40, 1).Reshape(8, 5)
	mid := big.Narrow(0, 2, 3)
	d := mid.F64()
	equal(t, len(d), 15)
	equal(t, cap(d), 15)
	equal(t, d[0], 10.0)
	equal(t, d[14], 24.0)
	// Empty views, at the end of their storage too, give empty slices.
	equal(t, len(big.Narrow(0, 8, 0).F64()), 0)
	equal(t, len(tensor.Zeros(tensor.F32, 0).F32()), 0)
}

func TestHalfDataIsBits(t *testing.T) {
	b := tensor.FromFloat64s(tensor.BF16, []float64{1, -2})
	equal(t, b.U16(), []uint16{0x3f80, 0xc000})
	h := tensor.FromFloat64s(tensor.F16, []float64{1, -2})
	equal(t, h.U16(), []uint16{0x3c00, 0xc000})
	equal(t, b.Nbytes(), 4)
	equal(t, len(b.Storage().Bytes()), 4)
}

func TestStorageAlignment(t *testing.T) {
	for _, n := range []int{1, 3, 17, 1000} {
		s := tensor.NewStorage(tensor.F32, n)
		equal(t, len(s.Bytes()), 4*n)
		equal(t, s.Len(), n)
		equal(t, s.Device(), tensor.CPU)
		equal(t, s.DType(), tensor.F32)
	}
	equal(t, len(tensor.NewStorage(tensor.I64, 0).Bytes()), 0)
	mustPanicWith(t, "tensor: cannot allocate f32 [-1]: negative dimension", func() { tensor.NewStorage(tensor.F32, -1) })
}

func TestString(t *testing.T) {
	equal(t, tensor.FromSlice([]float32{1, 2.5}).String(), "Tensor(f32 [2] cpu [1 2.5])")
	equal(t, tensor.Scalar(tensor.I64, 3).String(), "Tensor(i64 [] cpu [3])")
	equal(t, tensor.Zeros(tensor.BF16, 4, 5).String(), "Tensor(bf16 [4 5] cpu)")
}

func TestDimAndAxis(t *testing.T) {
	x := tensor.Zeros(tensor.F32, 2, 3, 4)
	equal(t, x.Rank(), 3)
	equal(t, x.Dim(0), 2)
	equal(t, x.Dim(-1), 4)
	equal(t, x.Axis(-3), 0)
	equal(t, x.Nbytes(), 96)
	mustPanicWith(t, "tensor: axis -4 out of range for shape [2 3 4]", func() { x.Dim(-4) })
	mustPanicWith(t, "tensor: axis 3 out of range for shape [2 3 4]", func() { x.Axis(3) })
}

// TestEmptySmallInline: tensors of up to 64 bytes, allocated in one piece
// with their storage, are zeroed, aligned for their dtype, one
// allocation, and do not share elements with one another; larger ones
// start on a 64-byte boundary.
func TestEmptySmallInline(t *testing.T) {
	for _, c := range []struct {
		d     tensor.DType
		shape []int
	}{{tensor.F32, []int{1}}, {tensor.F32, []int{4, 4}}, {tensor.F64, []int{8}}, {tensor.BF16, []int{3, 5}}, {tensor.F32, []int{17}}} {
		a, b := tensor.Empty(c.d, c.shape...), tensor.Empty(c.d, c.shape...)
		for _, x := range []*tensor.Tensor{a, b} {
			raw := x.Storage().Bytes()
			equal(t, len(raw), x.Numel()*c.d.Size())
			align := uintptr(c.d.Size())
			if len(raw) > 64 {
				align = 64
			}
			equal(t, uintptr(unsafe.Pointer(&raw[0]))%align, uintptr(0))
			for _, v := range raw {
				equal(t, v, byte(0))
			}
		}
		a.Fill(1)
		equal(t, b.Storage().Bytes()[0], byte(0))
	}
	equal(t, testing.AllocsPerRun(100, func() { tensor.Empty(tensor.F32, 4, 4) }), 1.0)
	equal(t, testing.AllocsPerRun(100, func() { tensor.Empty(tensor.F32) }), 1.0)
	equal(t, testing.AllocsPerRun(100, func() { tensor.Empty(tensor.F32, 4, 5) }), 2.0)
}
