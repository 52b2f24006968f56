package autograd

import (
	"fmt"
	"math"
	"strings"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/require"

	"github.com/esper-go/esper/kernels"
	"github.com/esper-go/esper/tensor"
)

func f64s(v ...float64) *tensor.Tensor { return tensor.FromSlice(v, len(v)) }

func wantValues(t *testing.T, what string, got *tensor.Tensor, want []float64, tol float64) {
	t.Helper()
	if got == nil {
		t.Fatalf("%s: nil tensor, want %v", what, want)
	}
	g := got.Float64s()
	if len(g) != len(want) {
		t.Fatalf("%s: got %d values %v, want %v", what, len(g), g, want)
	}
	for i := range g {
		if math.Abs(g[i]-want[i]) > tol*math.Max(1, math.Abs(want[i])) {
			t.Fatalf("%s: got %v, want %v", what, g, want)
		}
	}
}

func TestBackwardAccumulatesAcrossPasses(t *testing.T) {
	w := Param(f64s(1, 2, 3))
	x := Const(f64s(4, 5, 6))
	y := SumAll(Mul(w, x))
	Backward(y)
	wantValues(t, "first pass", w.Grad, []float64{4, 5, 6}, 0)
	Backward(y)
	wantValues(t, "second pass", w.Grad, []float64{8, 10, 12}, 0)
	w.ZeroGrad()
	wantValues(t, "after ZeroGrad", w.Grad, []float64{0, 0, 0}, 0)
}

func TestVarUsedTwice(t *testing.T) {
	w := Param(f64s(1, -2, 3))
	Backward(SumAll(Add(Mul(w, w), w)))
	wantValues(t, "d(w²+w)/dw", w.Grad, []float64{3, -3, 7}, 0)
}

func TestRetainGrad(t *testing.T) {
	w := Param(f64s(1, 2))
	h := MulScalar(w, 3).RetainGrad()
	Backward(SumAll(Square(h)))
	wantValues(t, "h.Grad", h.Grad, []float64{6, 12}, 0)
	wantValues(t, "w.Grad", w.Grad, []float64{18, 36}, 0)
	if h.IsLeaf() || h.Op() != "mul_scalar" {
		t.Fatalf("h: leaf %v op %q", h.IsLeaf(), h.Op())
	}
}

func TestDetachStopsGradient(t *testing.T) {
	w := Param(f64s(1, 2))
	d := Detach(w)
	if d.RequiresGrad() || !d.IsLeaf() {
		t.Fatal("Detach result requires grad or is not a leaf")
	}
	Backward(SumAll(Mul(d, w)))
	wantValues(t, "w.Grad", w.Grad, []float64{1, 2}, 0)
	if d.Grad != nil {
		t.Fatal("a detached Var received a gradient")
	}
}

func TestPostAccumulateHooks(t *testing.T) {
	a := Param(f64s(1, 2))
	b := Param(f64s(3))
	var log []string
	a.RegisterPostAccumulateHook(func(v *Var) {
		log = append(log, fmt.Sprintf("a1 %v", v.Grad.Float64s()))
	})
	a.RegisterPostAccumulateHook(func(v *Var) {
		log = append(log, fmt.Sprintf("a2 %v", v.Grad.Float64s()))
	})
	b.RegisterPostAccumulateHook(func(v *Var) {
		log = append(log, fmt.Sprintf("b %v", v.Grad.Float64s()))
	})
	// a is used twice: its hooks must still fire once, after both
	// contributions are in.
	y := SumAll(Add(Mul(a, b), Mul(a, a)))
	Backward(y)
	got := strings.Join(log, "; ")
	if !strings.Contains(got, "a1 [5 7]; a2 [5 7]") || strings.Count(got, "a1") != 1 || strings.Count(got, "a2") != 1 || strings.Count(got, "b [3]") != 1 {
		t.Fatalf("hook log %q", got)
	}
	log = nil
	Backward(y)
	got = strings.Join(log, "; ")
	if !strings.Contains(got, "a1 [10 14]; a2 [10 14]") || strings.Count(got, "b [6]") != 1 || len(log) != 3 {
		t.Fatalf("second pass hook log %q", got)
	}
}

func TestNoGradAndInferenceModeRecordNothing(t *testing.T) {
	w := Param(tensor.FromSlice([]float64{0.1, 0.2, 0.3, 0.4, 0.5, 0.6}, 2, 3))
	b := Param(f64s(0.1, -0.1))
	x := Const(tensor.FromSlice([]float64{1, 2, 3, 4, 5, 6}, 2, 3))
	forward := func() *Var {
		h := Relu(Linear(x, w, b))
		h = LayerNorm(h, nil, nil, 1, 1e-5)
		return Add(MeanAll(Softmax(h, -1)), SumAll(Mul(h, h)))
	}
	for name, mode := range map[string]func(func()){"NoGrad": NoGrad, "InferenceMode": InferenceMode} {
		before := ReadStats()
		var y *Var
		mode(func() { y = forward() })
		if after := ReadStats(); after != before {
			t.Errorf("%s: stats went from %+v to %+v", name, before, after)
		}
		if y.RequiresGrad() || !y.IsLeaf() {
			t.Errorf("%s: output requires grad %v, leaf %v", name, y.RequiresGrad(), y.IsLeaf())
		}
	}
	if !GradEnabled() || InInferenceMode() {
		t.Fatal("modes did not reset")
	}
	before := ReadStats()
	y := forward()
	after := ReadStats()
	if after.NodesCreated <= before.NodesCreated || after.TensorsSaved <= before.TensorsSaved || !y.RequiresGrad() {
		t.Fatalf("grad mode recorded nothing: %+v -> %+v", before, after)
	}
}

func TestAutocastBF16(t *testing.T) {
	rng := tensor.NewRNG(3)
	x := Const(tensor.Uniform(rng, tensor.F32, -1, 1, 8, 16))
	w := Param(tensor.Uniform(rng, tensor.F32, -0.5, 0.5, 5, 16))
	b := Param(tensor.Uniform(rng, tensor.F32, -0.5, 0.5, 5))
	target := tensor.FromSlice([]int64{0, 1, 2, 3, 4, 0, 1, 2}, 8)

	var y, sm, ln, loss, mixed *Var
	Autocast(tensor.BF16, func() {
		y = Linear(x, w, b)
		sm = Softmax(y, -1)
		ln = LayerNorm(y, nil, nil, 1, 1e-5)
		loss = CrossEntropy(y, target, kernels.CrossEntropyParams{})
		mixed = Add(y, sm)
	})
	for _, c := range []struct {
		name string
		v    *Var
		want tensor.DType
	}{{"linear", y, tensor.BF16}, {"softmax", sm, tensor.F32}, {"layer_norm", ln, tensor.F32}, {"cross_entropy", loss, tensor.F32}, {"bf16+f32", mixed, tensor.F32}} {
		if c.v.DType() != c.want {
			t.Errorf("%s under Autocast(BF16): dtype %v, want %v", c.name, c.v.DType(), c.want)
		}
	}
	Backward(loss)
	if w.Grad == nil || w.Grad.DType() != tensor.F32 || b.Grad.DType() != tensor.F32 {
		t.Fatalf("weight gradient %v, want F32", w.Grad)
	}

	w32, b32 := Param(w.Value), Param(b.Value)
	ref := CrossEntropy(Linear(x, w32, b32), target, kernels.CrossEntropyParams{})
	Backward(ref)
	if got, want := loss.Item(), ref.Item(); math.Abs(got-want) > 1e-2*math.Abs(want) {
		t.Fatalf("BF16 loss %v, F32 loss %v", got, want)
	}
	var num, den float64
	g, r := w.Grad.Float64s(), w32.Grad.Float64s()
	for i := range g {
		num += (g[i] - r[i]) * (g[i] - r[i])
		den += r[i] * r[i]
	}
	if math.Sqrt(num/den) > 2e-2 {
		t.Fatalf("BF16 weight gradient differs from F32 by %.3g (relative L2)", math.Sqrt(num/den))
	}
	if AutocastDType() != tensor.Invalid {
		t.Fatal("Autocast did not reset")
	}
}

// panicMessage runs f and returns what it panicked with.
func panicMessage(f func()) (msg string) {
	defer func() { msg = fmt.Sprint(recover()) }()
	f()
	return "<no panic>"
}

func TestShapeMismatchPanicsNamingOpAndShapes(t *testing.T) {
	a := Param(tensor.Zeros(tensor.F64, 2, 3))
	b := Param(tensor.Zeros(tensor.F64, 4, 5))
	for _, c := range []struct {
		op string
		f  func()
	}{
		{"add", func() { Add(a, b) }},
		{"mul", func() { Mul(a, b) }},
		{"matmul", func() { MatMul(a, b) }},
		{"linear", func() { Linear(a, b, nil) }},
		{"concat", func() { Concat([]*Var{a, b}, 0) }},
	} {
		msg := panicMessage(c.f)
		if !strings.Contains(msg, c.op) || !strings.Contains(msg, "[2 3]") || !strings.Contains(msg, "[4 5]") {
			t.Errorf("%s: panic %q does not name the op and both shapes", c.op, msg)
		}
	}
}

func TestMaxTiesSplitGradient(t *testing.T) {
	x := Param(f64s(1, 3, 3, 2))
	Backward(Max(x, nil, false))
	wantValues(t, "max ties", x.Grad, []float64{0, 0.5, 0.5, 0}, 0)
	y := Param(f64s(2, 2))
	z := Param(f64s(2, 1))
	Backward(SumAll(Maximum(y, z)))
	wantValues(t, "maximum ties (a)", y.Grad, []float64{0.5, 1}, 0)
	wantValues(t, "maximum ties (b)", z.Grad, []float64{0.5, 0}, 0)
}

func TestNonDifferentiableHelpers(t *testing.T) {
	x := Const(tensor.FromSlice([]float64{1, 5, 2, 7, 7, 0}, 2, 3))
	am := ArgMax(x, 1)
	if am.DType() != tensor.I64 || !tensor.SameShape(am.Shape(), []int{2}) {
		t.Fatalf("ArgMax: %v", am)
	}
	wantValues(t, "ArgMax", am, []float64{1, 0}, 0)
	c := Compare(kernels.Gt, x, Const(f64s(2, 2, 2)))
	wantValues(t, "Compare", c, []float64{0, 1, 0, 1, 1, 0}, 0)
}

func TestDropoutIdentityAndCast(t *testing.T) {
	x := Param(f64s(1, 2))
	if Dropout(x, 0.5, nil, false) != x || Dropout(x, 0, nil, true) != x {
		t.Fatal("Dropout is not the identity in evaluation or with p = 0")
	}
	if Cast(x, tensor.F64) != x {
		t.Fatal("Cast to the same dtype is not the identity")
	}
	h := Cast(x, tensor.BF16)
	Backward(SumAll(Cast(h, tensor.F32)))
	if x.Grad.DType() != tensor.F64 {
		t.Fatalf("gradient through casts has dtype %v, want f64", x.Grad.DType())
	}
	wantValues(t, "cast grad", x.Grad, []float64{1, 1}, 0)
}

func TestViewsAsInputs(t *testing.T) {
	// Narrow returns strided views; ops on them must see the right
	// elements and push gradients to the right places.
	x := Param(tensor.FromSlice([]float64{1, 2, 3, 4, 5, 6}, 2, 3))
	col := Narrow(x, 1, 1, 1) // [[2],[5]], non-contiguous
	y := SumAll(Mul(Exp(col), MatMul(col, Transpose(col, 0, 1))))
	Backward(y)
	if x.Grad == nil {
		t.Fatal("no gradient")
	}
	g := x.Grad.Float64s()
	if g[0] != 0 || g[2] != 0 || g[3] != 0 || g[5] != 0 || g[1] == 0 || g[4] == 0 {
		t.Fatalf("gradient through a narrow view %v", g)
	}
}

// TestScalarSeedShared: a scalar root's seed is one shared tensor of 1;
// graphs that pass their incoming gradient on unchanged (a scalar leaf
// as its own root, a retained root, sums and reshapes) leave it 1, and
// neither a leaf's Grad nor a retained gradient is that tensor.
func TestScalarSeedShared(t *testing.T) {
	for round := 0; round < 2; round++ {
		s := Param(tensor.Full(tensor.F32, 2))
		Backward(s) // the root is the leaf
		require.NotSame(t, oneF32, s.Grad)
		require.Equal(t, []float32{1}, s.Grad.F32())
		Backward(s)
		require.Equal(t, []float32{2}, s.Grad.F32(), "accumulates into its own Grad")

		w := Param(tensor.Full(tensor.F64, 3, 2, 2))
		root := SumAll(Reshape(w, 4)).RetainGrad()
		Backward(root)
		require.NotSame(t, oneF64, root.Grad)
		root.Grad.Fill(7) // the caller owns a retained gradient
		require.Equal(t, []float64{1, 1, 1, 1}, w.Grad.F64())
	}
	require.Equal(t, []float32{1}, oneF32.F32())
	require.Equal(t, []float64{1}, oneF64.F64())
}

// TestVarSizes: every op result is a Var (with its node when recorded),
// allocated per op on the eager path, so their size classes matter: a
// Var fits Go's 64-byte class and a recorded result's Var and node the
// 192-byte one (the rarely used hooks sit behind a pointer).
func TestVarSizes(t *testing.T) {
	require.LessOrEqual(t, unsafe.Sizeof(Var{}), uintptr(64))
	require.LessOrEqual(t, unsafe.Sizeof(varNode{}), uintptr(192))
}
