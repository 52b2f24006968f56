package kernels_test

import (
	"strings"
	"testing"

	"github.com/esper-go/esper/kernels"
	"github.com/esper-go/esper/tensor"
)

func f32(shape ...int) *tensor.Tensor { return tensor.Empty(tensor.F32, shape...) }

// TestChecksAllocateNothing: the shared checks run on every eager op, so
// a check that passes builds no message and allocates nothing.
func TestChecksAllocateNothing(t *testing.T) {
	x4, y4 := f32(2, 3, 4, 4), f32(2, 3, 4, 4)
	c3 := func() *tensor.Tensor { return f32(3) }
	sm, sr, w, b, rm, rv := c3(), c3(), c3(), c3(), c3(), c3()
	a, bm, d := f32(4, 5), f32(5, 6), f32(4, 6)
	bias := f32(6)
	idx := tensor.Empty(tensor.I64, 2)
	hyper := tensor.Empty(tensor.F64, 2)
	red := make([]bool, 4)
	axes := []int{1, 3}
	rdst := f32(2, 1, 4, 1)
	cw, cy := f32(8, 3, 3, 3), f32(2, 8, 4, 4)
	conv := kernels.Conv2dParams{PadH: 1, PadW: 1}
	pool := kernels.Pool2dParams{KernelH: 2, KernelW: 2}
	py := f32(2, 3, 2, 2)
	logits, target, loss := f32(4, 6), tensor.Empty(tensor.I64, 4), f32()
	sel := f32(2, 2, 4, 4)
	chan4 := sm.Reshape(1, 3, 1, 1)
	cases := map[string]func() error{
		"BatchNorm": func() error {
			_, _, _, err := kernels.CheckBatchNorm("BatchNorm", y4, sm, sr, x4, w, b, rm, rv, true)
			return err
		},
		"BatchNormBackward": func() error {
			_, _, _, err := kernels.CheckBatchNormBackward("BatchNormBackward", y4, w, b, y4, x4, nil, sm, sr, w)
			return err
		},
		"GroupNorm": func() error {
			_, _, _, err := kernels.CheckGroupNorm("GroupNorm", y4, nil, nil, x4, w, b, 3)
			return err
		},
		"LayerNorm": func() error {
			_, err := kernels.CheckLayerNorm("LayerNorm", y4, nil, nil, x4, nil, nil, 16)
			return err
		},
		"Reduce":  func() error { return kernels.CheckReduce("Reduce", kernels.Sum, rdst, x4, axes, red) },
		"Binary":  func() error { return kernels.CheckBinary("Binary", kernels.Add, y4, x4, chan4) },
		"Unary":   func() error { return kernels.CheckUnary("Unary", kernels.Relu, y4, x4) },
		"Softmax": func() error { _, err := kernels.CheckSoftmax("Softmax", y4, x4, -1); return err },
		"MatMul": func() error {
			_, err := kernels.CheckMatMul("MatMul", d, a, bm, bias, false, false)
			return err
		},
		"Conv2d": func() error {
			_, err := kernels.CheckConv2d("Conv2d", x4.Shape(), cw.Shape(), cy.Shape(), conv)
			return err
		},
		"Pool2d": func() error { _, err := kernels.CheckPool2d("MaxPool2d", x4.Shape(), py.Shape(), pool); return err },
		"CrossEntropy": func() error {
			_, _, err := kernels.CheckCrossEntropy("CrossEntropy", loss, logits, target, kernels.CrossEntropyParams{})
			return err
		},
		"IndexSelect": func() error { _, err := kernels.CheckIndexSelect("IndexSelect", sel, x4, 1, idx); return err },
		"SGDStep": func() error {
			return kernels.CheckSGDStep("SGDStep", a, a, nil, hyper, kernels.SGDOptions{})
		},
	}
	for name, f := range cases {
		if err := f(); err != nil {
			t.Fatalf("%s: a valid call fails: %v", name, err)
		}
		if n := testing.AllocsPerRun(20, func() { _ = f() }); n != 0 {
			t.Errorf("%s: %v allocations per passing check, want 0", name, n)
		}
	}
}

// TestChecksNameTheOpAndShapes: a failing check names the op and the
// shapes involved.
func TestChecksNameTheOpAndShapes(t *testing.T) {
	x := f32(2, 3, 4, 4)
	for _, c := range []struct {
		err  error
		want []string
	}{
		{func() error {
			_, _, _, err := kernels.CheckBatchNorm("BatchNorm", x, f32(3), f32(3), x, f32(3), f32(3), f32(3), f32(4), true)
			return err
		}(), []string{"BatchNorm", "runVar (x shape [2 3 4 4]) has shape [4], want 3 elements"}},
		{func() error { _, err := kernels.NormAxis("Softmax", 4, []int{2, 3}); return err }(), []string{"Softmax", "axis 4", "[2 3]"}},
		{func() error {
			_, err := kernels.CheckMatMul("MatMul", f32(2, 5), f32(2, 3), f32(4, 5), nil, false, false)
			return err
		}(), []string{"MatMul", "[2 3]", "[4 5]", "[2 5]"}},
		{kernels.CheckBinary("Binary add", kernels.Add, f32(2, 3), f32(2, 3), f32(4)), []string{"Binary add", "[2 3]", "[4]"}},
		{func() error {
			_, err := kernels.CheckConv2d("Conv2d", []int{1, 3, 8, 8}, []int{4, 2, 3, 3}, []int{1, 4, 6, 6}, kernels.Conv2dParams{})
			return err
		}(), []string{"Conv2d", "channels do not match groups", "[1 3 8 8]", "[4 2 3 3]"}},
		{func() error { // a stride past 32-bit indexing (one output pixel all the same)
			_, err := kernels.CheckConv2d("Conv2d", []int{1, 1, 4, 4}, []int{1, 1, 1, 1}, []int{1, 1, 1, 1}, kernels.Conv2dParams{StrideH: 1 << 32, StrideW: 1 << 32})
			return err
		}(), []string{"Conv2d", "stride, padding or dilation of 1073741824 or more"}},
		{func() error {
			_, err := kernels.CheckConcat("Concat", f32(2, 5), []*tensor.Tensor{f32(2, 3), f32(3, 2)}, 1)
			return err
		}(), []string{"Concat", "[2 3]", "[3 2]", "[2 5]"}},
		{kernels.CheckSGDStep("SGDStep", f32(4), f32(4), nil, tensor.Empty(tensor.F64, 2), kernels.SGDOptions{Momentum: 0.9}),
			[]string{"SGDStep", "momentum 0.9"}},
		{kernels.CheckDropout("Dropout", f32(3), nil, f32(3), tensor.Empty(tensor.I64, 2), 1.5), []string{"Dropout", "p = 1.5"}},
	} {
		if c.err == nil {
			t.Fatalf("no error, want one containing %q", c.want)
		}
		for _, s := range c.want {
			if !strings.Contains(c.err.Error(), s) {
				t.Errorf("error %q lacks %q", c.err, s)
			}
		}
	}
}

func TestGeometry(t *testing.T) {
	if o, n, i := kernels.Split3([]int{2, 3, 4, 5}, 2); o != 6 || n != 4 || i != 5 {
		t.Fatalf("Split3 = %d %d %d", o, n, i)
	}
	if a, err := kernels.NormAxis("op", -1, []int{2, 3}); a != 1 || err != nil {
		t.Fatalf("NormAxis(-1) = %d, %v", a, err)
	}
	for _, c := range []struct {
		from, to []int
		ok       bool
	}{{[]int{3}, []int{2, 3}, true}, {[]int{1, 3}, []int{2, 3}, true}, {[]int{2, 1}, []int{2, 3}, true},
		{[]int{3, 1}, []int{2, 3}, false}, {[]int{1, 2, 3}, []int{2, 3}, false}, {nil, []int{2}, true}} {
		if got := kernels.Broadcasts(c.from, c.to); got != c.ok {
			t.Errorf("Broadcasts(%v, %v) = %v", c.from, c.to, got)
		}
	}
	g, err := kernels.CheckConv2d("Conv2d", []int{2, 4, 9, 9}, []int{6, 2, 3, 3}, []int{2, 6, 4, 4},
		kernels.Conv2dParams{StrideH: 2, StrideW: 2, Groups: 2})
	if err != nil || g.Cg != 2 || g.Og != 3 || g.KDim != 18 || g.Pixels != 16 || g.P.DilationH != 1 {
		t.Fatalf("CheckConv2d = %+v, %v", g, err)
	}
	d, err := kernels.CheckMatMul("MatMul", f32(3, 4, 6), f32(5, 4), f32(3, 5, 6), nil, true, false)
	if err != nil || d != (kernels.MatMulDims{M: 4, N: 6, K: 5, Batch: 3, BatchedB: true}) {
		t.Fatalf("CheckMatMul = %+v, %v", d, err)
	}
}
