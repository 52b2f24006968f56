package tensor_test

import (
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/esper-go/esper/tensor"
)

// grid returns the F64 tensor [[0 1 2 3] [4 5 6 7] [8 9 10 11]].
func grid() *tensor.Tensor { return tensor.FromFloat64s(tensor.F64, iota64(12), 3, 4) }

func TestViews(t *testing.T) {
	tests := []struct {
		name    string
		view    func(*tensor.Tensor) *tensor.Tensor
		shape   []int
		strides []int // nil: not checked
		offset  int
		values  []float64
		shares  bool
	}{
		{"Reshape", func(x *tensor.Tensor) *tensor.Tensor { return x.Reshape(2, 6) }, ints(2, 6), ints(6, 1), 0, iota64(12), true},
		{"Reshape -1 first", func(x *tensor.Tensor) *tensor.Tensor { return x.Reshape(-1, 2) }, ints(6, 2), ints(2, 1), 0, iota64(12), true},
		{"Reshape -1 last", func(x *tensor.Tensor) *tensor.Tensor { return x.Reshape(4, -1) }, ints(4, 3), ints(3, 1), 0, iota64(12), true},
		{"Reshape to rank 3", func(x *tensor.Tensor) *tensor.Tensor { return x.Reshape(2, -1, 3) }, ints(2, 2, 3), ints(6, 3, 1), 0, iota64(12), true},
		{"Flatten", func(x *tensor.Tensor) *tensor.Tensor { return x.Flatten() }, ints(12), ints(1), 0, iota64(12), true},
		{"Reshape of transpose copies", func(x *tensor.Tensor) *tensor.Tensor { return x.T().Reshape(-1) }, ints(12), ints(1), 0,
			[]float64{0, 4, 8, 1, 5, 9, 2, 6, 10, 3, 7, 11}, false},
		{"Reshape of contiguous narrow is a view", func(x *tensor.Tensor) *tensor.Tensor { return x.Narrow(0, 1, 2).Reshape(8) }, ints(8), ints(1), 4,
			[]float64{4, 5, 6, 7, 8, 9, 10, 11}, true},
		{"Reshape of column narrow copies", func(x *tensor.Tensor) *tensor.Tensor { return x.Narrow(1, 1, 2).Reshape(6) }, ints(6), ints(1), 0,
			[]float64{1, 2, 5, 6, 9, 10}, false},
		{"Narrow rows", func(x *tensor.Tensor) *tensor.Tensor { return x.Narrow(0, 1, 2) }, ints(2, 4), ints(4, 1), 4,
			[]float64{4, 5, 6, 7, 8, 9, 10, 11}, true},
		{"Narrow columns", func(x *tensor.Tensor) *tensor.Tensor { return x.Narrow(-1, 1, 2) }, ints(3, 2), ints(4, 1), 1,
			[]float64{1, 2, 5, 6, 9, 10}, true},
		{"Narrow to empty at end", func(x *tensor.Tensor) *tensor.Tensor { return x.Narrow(1, 4, 0) }, ints(3, 0), nil, 4, []float64{}, true},
		{"Slice", func(x *tensor.Tensor) *tensor.Tensor { return x.Slice(1, 2, 4) }, ints(3, 2), ints(4, 1), 2,
			[]float64{2, 3, 6, 7, 10, 11}, true},
		{"Select row", func(x *tensor.Tensor) *tensor.Tensor { return x.Select(0, 1) }, ints(4), ints(1), 4, []float64{4, 5, 6, 7}, true},
		{"Select column", func(x *tensor.Tensor) *tensor.Tensor { return x.Select(1, 2) }, ints(3), ints(4), 2, []float64{2, 6, 10}, true},
		{"Select negative index", func(x *tensor.Tensor) *tensor.Tensor { return x.Select(-1, -1) }, ints(3), ints(4), 3, []float64{3, 7, 11}, true},
		{"Select twice gives rank 0", func(x *tensor.Tensor) *tensor.Tensor { return x.Select(0, 2).Select(0, 1) }, ints(), ints(), 9, []float64{9}, true},
		{"T", func(x *tensor.Tensor) *tensor.Tensor { return x.T() }, ints(4, 3), ints(1, 4), 0,
			[]float64{0, 4, 8, 1, 5, 9, 2, 6, 10, 3, 7, 11}, true},
		{"Transpose", func(x *tensor.Tensor) *tensor.Tensor { return x.Transpose(0, -1) }, ints(4, 3), ints(1, 4), 0,
			[]float64{0, 4, 8, 1, 5, 9, 2, 6, 10, 3, 7, 11}, true},
		{"Permute rank 3", func(x *tensor.Tensor) *tensor.Tensor { return x.Reshape(2, 3, 2).Permute(2, 0, 1) }, ints(2, 2, 3), ints(1, 6, 2), 0,
			[]float64{0, 2, 4, 6, 8, 10, 1, 3, 5, 7, 9, 11}, true},
		{"Permute negative axes", func(x *tensor.Tensor) *tensor.Tensor { return x.Permute(-1, -2) }, ints(4, 3), ints(1, 4), 0,
			[]float64{0, 4, 8, 1, 5, 9, 2, 6, 10, 3, 7, 11}, true},
		{"Unsqueeze front", func(x *tensor.Tensor) *tensor.Tensor { return x.Unsqueeze(0) }, ints(1, 3, 4), nil, 0, iota64(12), true},
		{"Unsqueeze middle", func(x *tensor.Tensor) *tensor.Tensor { return x.Unsqueeze(1) }, ints(3, 1, 4), nil, 0, iota64(12), true},
		{"Unsqueeze end (-1)", func(x *tensor.Tensor) *tensor.Tensor { return x.Unsqueeze(-1) }, ints(3, 4, 1), nil, 0, iota64(12), true},
		{"Squeeze all", func(x *tensor.Tensor) *tensor.Tensor { return x.Reshape(1, 3, 1, 4, 1).Squeeze() }, ints(3, 4), ints(4, 1), 0, iota64(12), true},
		{"Squeeze one axis", func(x *tensor.Tensor) *tensor.Tensor { return x.Reshape(1, 3, 1, 4).Squeeze(-2) }, ints(1, 3, 4), nil, 0, iota64(12), true},
		{"Expand row", func(x *tensor.Tensor) *tensor.Tensor { return x.Select(0, 1).Unsqueeze(0).Expand(2, 4) }, ints(2, 4), ints(0, 1), 4,
			[]float64{4, 5, 6, 7, 4, 5, 6, 7}, true},
		{"Expand column with new leading axis", func(x *tensor.Tensor) *tensor.Tensor { return x.Narrow(1, 0, 1).Expand(2, 3, 2) }, ints(2, 3, 2), ints(0, 4, 0), 0,
			[]float64{0, 0, 4, 4, 8, 8, 0, 0, 4, 4, 8, 8}, true},
		{"Expand -1 keeps size", func(x *tensor.Tensor) *tensor.Tensor { return x.Narrow(0, 0, 1).Expand(2, -1) }, ints(2, 4), ints(0, 1), 0,
			[]float64{0, 1, 2, 3, 0, 1, 2, 3}, true},
		{"Expand same shape", func(x *tensor.Tensor) *tensor.Tensor { return x.Expand(3, 4) }, ints(3, 4), ints(4, 1), 0, iota64(12), true},
		{"Contiguous of contiguous is itself", func(x *tensor.Tensor) *tensor.Tensor { return x.Contiguous() }, ints(3, 4), ints(4, 1), 0, iota64(12), true},
		{"Contiguous of transpose packs", func(x *tensor.Tensor) *tensor.Tensor { return x.T().Contiguous() }, ints(4, 3), ints(3, 1), 0,
			[]float64{0, 4, 8, 1, 5, 9, 2, 6, 10, 3, 7, 11}, false},
		{"Clone copies", func(x *tensor.Tensor) *tensor.Tensor { return x.Clone() }, ints(3, 4), ints(4, 1), 0, iota64(12), false},
		{"Clone of strided view", func(x *tensor.Tensor) *tensor.Tensor { return x.Slice(1, 1, 3).Clone() }, ints(3, 2), ints(2, 1), 0,
			[]float64{1, 2, 5, 6, 9, 10}, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			x := grid()
			v := tc.view(x)
			sameInts(t, v.Shape(), tc.shape, "shape")
			if tc.strides != nil {
				sameInts(t, v.Strides(), tc.strides, "strides")
			}
			equal(t, v.Offset(), tc.offset, "offset")
			equal(t, v.Float64s(), tc.values, "values")
			equal(t, v.DType(), tensor.F64, "dtype")
			equal(t, shares(v, x), tc.shares, "shares storage")
			if v.Numel() == 0 {
				return
			}
			// A write through the result shows in the source exactly when
			// they share storage.
			before := x.Float64s()
			idx := make([]int, v.Rank())
			v.Set(-100, idx...)
			changed := !equalFloats(before, x.Float64s())
			equal(t, changed, tc.shares, "write through result visible in source")
		})
	}
}

func equalFloats(a, b []float64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func TestIsContiguous(t *testing.T) {
	x := grid()
	tests := []struct {
		name string
		v    *tensor.Tensor
		want bool
	}{
		{"fresh", x, true},
		{"scalar", tensor.Scalar(tensor.F32, 1), true},
		{"row narrow", x.Narrow(0, 1, 1), true},
		{"column narrow", x.Narrow(1, 1, 2), false},
		{"single column", x.Narrow(1, 1, 1), false},
		{"transpose", x.T(), false},
		{"unsqueezed", x.Unsqueeze(1), true},
		{"expanded", x.Narrow(0, 0, 1).Expand(3, 4), false},
		{"empty strided", x.Narrow(1, 1, 2).Narrow(0, 0, 0), true},
		{"size-1 axis with odd stride", tensor.New(x.Storage(), ints(1, 4), ints(99, 1), 0), true},
	}
	for _, tc := range tests {
		equal(t, tc.v.IsContiguous(), tc.want, tc.name)
	}
}

func TestViewPanics(t *testing.T) {
	x := grid()
	tests := []struct {
		name string
		f    func()
		want string
	}{
		{"Reshape count", func() { x.Reshape(5, 2) }, "tensor: Reshape from [3 4] to [5 2]: element counts differ (12 vs 10)"},
		{"Reshape two -1", func() { x.Reshape(-1, -1) }, "tensor: Reshape from [3 4] to [-1 -1]: invalid dimension -1"},
		{"Reshape -1 no fit", func() { x.Reshape(-1, 5) }, "tensor: Reshape from [3 4] to [-1 5]: cannot infer -1"},
		{"Reshape negative", func() { x.Reshape(-2, -6) }, "tensor: Reshape from [3 4] to [-2 -6]: invalid dimension -2"},
		{"Narrow range", func() { x.Narrow(1, 3, 2) }, "tensor: Narrow(axis 1, start 3, length 2) out of range for shape [3 4]"},
		{"Narrow axis", func() { x.Narrow(2, 0, 1) }, "tensor: axis 2 out of range for shape [3 4]"},
		{"Select index", func() { x.Select(0, 3) }, "tensor: Select(axis 0, index 3) out of range for shape [3 4]"},
		{"Select negative index", func() { x.Select(0, -4) }, "tensor: Select(axis 0, index -4) out of range for shape [3 4]"},
		{"Permute count", func() { x.Permute(0) }, "tensor: Permute[0] of shape [3 4]: wrong number of axes"},
		{"Permute repeat", func() { x.Permute(1, -1) }, "tensor: Permute[1 -1] of shape [3 4]: repeated axis"},
		{"T of vector", func() { x.Flatten().T() }, "tensor: axis -2 out of range for shape [12]"},
		{"Squeeze non-1", func() { x.Squeeze(0) }, "tensor: Squeeze axis 0 of shape [3 4] has size 3"},
		{"Unsqueeze range", func() { x.Unsqueeze(3) }, "tensor: Unsqueeze axis 3 out of range for shape [3 4]"},
		{"Expand rank", func() { x.Expand(12) }, "tensor: Expand of shape [3 4] to lower rank [12]"},
		{"Expand size", func() { x.Expand(3, 5) }, "tensor: Expand of shape [3 4] to [3 5]: axis 1 has size 4"},
		{"Expand negative", func() { x.Narrow(0, 0, 1).Expand(-2, 4) }, "tensor: Expand of shape [1 4] to [-2 4]: axis 0 has invalid size -2"},
		{"Expand negative lead", func() { x.Expand(-1, 3, 4) }, "tensor: Expand of shape [3 4] to [-1 3 4]: new leading axis 0 has invalid size -1"},
		{"Data non-contiguous", func() { x.T().F64() }, "tensor: Data of non-contiguous tensor shape [4 3] strides [1 4] (call Contiguous first)"},
		{"Data dtype", func() { x.F32() }, "tensor: cannot view f64 storage as float32"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) { mustPanicWith(t, tc.want, tc.f) })
	}
}

func TestBroadcastShapes(t *testing.T) {
	tests := []struct {
		a, b, want []int
	}{
		{ints(3, 4), ints(3, 4), ints(3, 4)},
		{ints(3, 1), ints(1, 4), ints(3, 4)},
		{ints(4), ints(2, 3, 4), ints(2, 3, 4)},
		{ints(2, 1, 4), ints(3, 1), ints(2, 3, 4)},
		{ints(), ints(5), ints(5)},
		{ints(), ints(), ints()},
		{ints(0, 1), ints(1, 3), ints(0, 3)},
		{ints(1), ints(0), ints(0)},
	}
	for _, tc := range tests {
		got, err := tensor.BroadcastShapes(tc.a, tc.b)
		noErr(t, err)
		sameInts(t, got, tc.want, "BroadcastShapes(", tc.a, ",", tc.b, ")")
		back, err := tensor.BroadcastShapes(tc.b, tc.a)
		noErr(t, err)
		sameInts(t, back, tc.want, "BroadcastShapes is symmetric")
	}
	for _, bad := range [][2][]int{{ints(3), ints(4)}, {ints(2, 3), ints(3, 2)}, {ints(0), ints(2)}} {
		_, err := tensor.BroadcastShapes(bad[0], bad[1])
		if err == nil {
			t.Errorf("BroadcastShapes(%v, %v): no error", bad[0], bad[1])
			continue
		}
		equal(t, err.Error(), "shapes "+tensor.ShapeString(bad[0])+" and "+tensor.ShapeString(bad[1])+" do not broadcast")
	}
}

func TestInferShape(t *testing.T) {
	sameInts(t, tensor.InferShape(12, ints(-1), "X", ints(12)), ints(12))
	sameInts(t, tensor.InferShape(0, ints(0, 5), "X", ints(0)), ints(0, 5))
	sameInts(t, tensor.InferShape(1, ints(), "X", ints(1)), ints())
	mustPanicWith(t, "tensor: X from [0] to [-1 0]: cannot infer -1", func() { tensor.InferShape(0, ints(-1, 0), "X", ints(0)) })
}

func TestEmptyViews(t *testing.T) {
	z := tensor.Zeros(tensor.F32, 0, 3)
	equal(t, z.Numel(), 0)
	equal(t, z.IsContiguous(), true)
	equal(t, len(z.F32()), 0)
	r := z.Reshape(3, 0, 7)
	sameInts(t, r.Shape(), ints(3, 0, 7), "shape")
	equal(t, r.Float64s(), []float64{})
	// As in PyTorch, -1 is ambiguous when there are no elements.
	mustPanicWith(t, "tensor: Reshape from [0 3] to [3 -1 0]: cannot infer -1", func() { z.Reshape(3, -1, 0) })
	e := z.Narrow(1, 3, 0) // offset past the end of an empty storage
	equal(t, len(e.F32()), 0)
	equal(t, e.Clone().Numel(), 0)
	tensor.CopyInto(e, z.Narrow(1, 0, 0))
	equal(t, z.T().Contiguous().Float64s(), []float64{})
}

// TestReshapeSameShape: reshaping a contiguous tensor to its own shape
// (also through -1) returns it, allocating nothing; another shape is a
// new view over the same storage.
func TestReshapeSameShape(t *testing.T) {
	x := tensor.Zeros(tensor.F32, 3, 4)
	if x.Reshape(3, 4) != x || x.Reshape(-1, 4) != x || x.Reshape(3, -1) != x {
		t.Fatal("same-shape reshape is not the tensor itself")
	}
	v := x.Reshape(4, 3)
	if v == x || v.Storage() != x.Storage() {
		t.Fatal("a new shape must be a view over the same storage")
	}
	equal(t, testing.AllocsPerRun(100, func() { x.Reshape(3, -1) }), 0.0)
}

// TestNarrowCache: a tensor narrowed again with the same arguments gives
// the same view (no allocation once it is cached), other arguments give
// other views with the right elements, the cache forgets its oldest view
// after eight, and concurrent Narrows of one tensor agree (run with
// -race).
func TestNarrowCache(t *testing.T) {
	g := grid()
	first := g.Narrow(0, 1, 1)
	second := g.Narrow(0, 1, 1) // the cache starts here
	require.NotSame(t, first, second)
	require.Same(t, second, g.Narrow(0, 1, 1))
	require.Equal(t, []float64{4, 5, 6, 7}, g.Narrow(0, 1, 1).F64())
	require.Equal(t, []float64{1, 2, 5, 6, 9, 10}, g.Narrow(1, 1, 2).Contiguous().F64())
	require.Equal(t, []int{3, 2}, g.Narrow(1, 1, 2).Shape())
	require.Equal(t, []float64{8, 9, 10, 11}, g.Narrow(0, 2, 1).F64())
	allocs := testing.AllocsPerRun(100, func() { _ = g.Narrow(0, 1, 1) })
	require.Zero(t, allocs)

	for i := 0; i < 8; i++ {
		g.Narrow(1, i%4, 0) // eight other views
		g.Narrow(1, 0, 1+i%3)
	}
	require.NotSame(t, second, g.Narrow(0, 1, 1), "evicted")

	x := tensor.FromFloat64s(tensor.F64, iota64(64), 16, 4)
	var wg sync.WaitGroup
	for w := 0; w < 8; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 200; i++ {
				r := (i + w) % 12
				v := x.Narrow(0, r, 4)
				if v.F64()[0] != float64(4*r) || v.Shape()[0] != 4 {
					t.Errorf("Narrow(0, %d, 4) starts at %v, shape %v", r, v.F64()[0], v.Shape())
					return
				}
			}
		}()
	}
	wg.Wait()
}

// TestIsContiguousRanks: IsContiguous's rank-1 and rank-2 shortcuts agree
// with the general rule (row-major without gaps, size-1 axes with any
// stride, empty tensors contiguous) on every shape up to 3×3 with strides
// from 0 to 4, and Numel with the product of the shape.
func TestIsContiguousRanks(t *testing.T) {
	ref := func(shape, strides []int) bool {
		if tensor.Numel(shape) == 0 {
			return true
		}
		acc := 1
		for i := len(shape) - 1; i >= 0; i-- {
			if shape[i] != 1 && strides[i] != acc {
				return false
			}
			acc *= shape[i]
		}
		return true
	}
	st := tensor.NewStorage(tensor.F32, 64)
	for n0 := 0; n0 <= 3; n0++ {
		for s0 := 0; s0 <= 4; s0++ {
			v := tensor.New(st, ints(n0), ints(s0), 0)
			equal(t, v.IsContiguous(), ref(ints(n0), ints(s0)), "rank 1")
			equal(t, v.Numel(), n0, "numel rank 1")
			for n1 := 0; n1 <= 3; n1++ {
				for s1 := 0; s1 <= 4; s1++ {
					sh, sd := ints(n0, n1), ints(s0, s1)
					v := tensor.New(st, sh, sd, 0)
					equal(t, v.IsContiguous(), ref(sh, sd), "rank 2")
					equal(t, v.Numel(), n0*n1, "numel rank 2")
				}
			}
		}
	}
}
