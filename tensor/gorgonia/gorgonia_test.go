package gorgonia_test

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	gt "gorgonia.org/tensor"

	"github.com/esper-go/esper/tensor"
	"github.com/esper-go/esper/tensor/gorgonia"
)

func TestDenseRoundTrip(t *testing.T) {
	denseType := map[tensor.DType]gt.Dtype{
		tensor.F64: gt.Float64, tensor.F32: gt.Float32, tensor.BF16: gt.Float32, tensor.F16: gt.Float32,
		tensor.I32: gt.Int32, tensor.I64: gt.Int64, tensor.Bool: gt.Bool,
	}
	// Half types come back as F32 (gorgonia has no 16-bit floats).
	backType := map[tensor.DType]tensor.DType{tensor.BF16: tensor.F32, tensor.F16: tensor.F32}
	for _, d := range allDTypes {
		for _, shape := range [][]int{{2, 3}, {4}, {}, {0, 3}, {2, 1, 2}} {
			name := d.String() + tensor.ShapeString(shape)
			t.Run(name, func(t *testing.T) {
				n := tensor.Numel(shape)
				vals := make([]float64, n)
				for i := range vals {
					vals[i] = float64(i%3) - 1 // -1, 0, 1: exact in every dtype
					if d == tensor.Bool {
						vals[i] = float64(i % 2)
					}
				}
				x := tensor.FromFloat64s(d, vals, shape...)
				if len(shape) == 0 {
					x = x.Reshape() // rank 0
				}
				dense := gorgonia.ToDense(x)
				equal(t, dense.Dtype(), denseType[d], "dense dtype")
				equal(t, []int(dense.Shape()), append([]int{}, shape...), "dense shape")
				y, err := gorgonia.FromDense(dense)
				noErr(t, err)
				want := d
				if b, ok := backType[d]; ok {
					want = b
				}
				equal(t, y.DType(), want, "dtype after round trip")
				sameInts(t, y.Shape(), shape, "shape after round trip")
				equal(t, y.Float64s(), x.Float64s(), "values after round trip")
				if y.Numel() > 0 {
					// ToDense copies: writes to the result do not reach x.
					y.Set(5, make([]int, y.Rank())...)
					equal(t, x.Float64s(), vals[:n], "source unchanged")
				}
			})
		}
	}
}

func TestToDenseOfStridedView(t *testing.T) {
	x := tensor.FromFloat64s(tensor.I64, iota64(6), 2, 3)
	d := gorgonia.ToDense(x.T())
	equal(t, []int(d.Shape()), []int{3, 2})
	equal(t, d.Data(), []int64{0, 3, 1, 4, 2, 5})
	equal(t, x.Float64s(), iota64(6), "source unchanged")
}

func TestFromDenseViews(t *testing.T) {
	// Transposed in place (a view with an iterator).
	d := gt.New(gt.WithShape(2, 3), gt.WithBacking([]float32{1, 2, 3, 4, 5, 6}))
	if err := d.T(); err != nil {
		t.Fatal(err)
	}
	x, err := gorgonia.FromDense(d)
	noErr(t, err)
	sameInts(t, x.Shape(), ints(3, 2), "transposed shape")
	equal(t, x.F32(), []float32{1, 4, 2, 5, 3, 6}, "transposed values")

	// A column slice (non-contiguous view of a larger backing).
	e := gt.New(gt.WithShape(3, 3), gt.WithBacking([]int64{1, 2, 3, 4, 5, 6, 7, 8, 9}))
	v, err := e.Slice(nil, gt.S(1, 3))
	noErr(t, err)
	x, err = gorgonia.FromDense(v.(*gt.Dense))
	noErr(t, err)
	sameInts(t, x.Shape(), ints(3, 2), "sliced shape")
	equal(t, x.I64(), []int64{2, 3, 5, 6, 8, 9}, "sliced values")

	// A row slice (contiguous view starting inside the backing).
	r, err := e.Slice(gt.S(1, 3))
	noErr(t, err)
	x, err = gorgonia.FromDense(r.(*gt.Dense))
	noErr(t, err)
	equal(t, x.I64(), []int64{4, 5, 6, 7, 8, 9}, "row slice values")

	// Scalars of every supported type become rank 0.
	for _, v := range []any{float64(1.5), float32(2.5), int32(-3), int64(4), true} {
		x, err := gorgonia.FromDense(gt.New(gt.FromScalar(v)))
		noErr(t, err)
		equal(t, x.Rank(), 0, "scalar rank")
		want := map[any]float64{float64(1.5): 1.5, float32(2.5): 2.5, int32(-3): -3, int64(4): 4, true: 1}[v]
		equal(t, x.Item(), want, "scalar value")
	}
}

func TestFromDenseErrors(t *testing.T) {
	_, err := gorgonia.FromDense(gt.New(gt.WithShape(2), gt.WithBacking([]uint8{1, 2})))
	if err == nil || !strings.Contains(err.Error(), "gorgonia: FromDense: unsupported element type uint8") {
		t.Errorf("FromDense(uint8) error = %v", err)
	}
	_, err = gorgonia.FromDense(gt.New(gt.WithShape(2), gt.WithBacking([]int{1, 2})))
	if err == nil || !strings.Contains(err.Error(), "unsupported element type int") {
		t.Errorf("FromDense(int) error = %v", err)
	}
}

// allDTypes lists every valid dtype.
var allDTypes = []tensor.DType{tensor.F64, tensor.F32, tensor.BF16, tensor.F16, tensor.I32, tensor.I64, tensor.Bool}

// equal fails the test when got and want differ.
func equal(t *testing.T, got, want any, what ...any) {
	t.Helper()
	require.Equal(t, want, got, what...)
}

// noErr fails the test on a non-nil error.
func noErr(t *testing.T, err error) {
	t.Helper()
	require.NoError(t, err)
}

// sameInts compares shapes, treating nil and empty as equal.
func sameInts(t *testing.T, got, want []int, what ...any) {
	t.Helper()
	require.True(t, tensor.SameShape(got, want), "%v: got %v, want %v", what, got, want)
}

// ints is shorthand for a shape literal.
func ints(v ...int) []int { return append([]int{}, v...) }

// iota64 returns 0, 1, ..., n-1 as float64.
func iota64(n int) []float64 {
	out := make([]float64, n)
	for i := range out {
		out[i] = float64(i)
	}
	return out
}
