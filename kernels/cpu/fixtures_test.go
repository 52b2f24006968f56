package cpu

import (
	"encoding/binary"
	"encoding/json"
	"math"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/esper-go/esper/kernels"
	"github.com/esper-go/esper/tensor"
)

// PyTorch parity against testdata/fixtures (see its README for the
// layout). Skipped when the fixtures are absent.

type fixture struct {
	t    testing.TB
	ts   map[string]*T
	meta map[string]string
}

func loadFixture(t *testing.T, file string) *fixture {
	b, err := os.ReadFile("../../testdata/fixtures/" + file)
	if err != nil {
		t.Fatalf("fixture %s (committed under testdata/fixtures; regenerate with make fixtures): %v", file, err)
	}
	n := binary.LittleEndian.Uint64(b)
	var hdr map[string]json.RawMessage
	if err := json.Unmarshal(b[8:8+n], &hdr); err != nil {
		t.Fatal(err)
	}
	data := b[8+n:]
	f := &fixture{t: t, ts: map[string]*T{}, meta: map[string]string{}}
	for k, raw := range hdr {
		if k == "__metadata__" {
			_ = json.Unmarshal(raw, &f.meta)
			continue
		}
		var e struct {
			DType   string `json:"dtype"`
			Shape   []int  `json:"shape"`
			Offsets [2]int `json:"data_offsets"`
		}
		if err := json.Unmarshal(raw, &e); err != nil {
			t.Fatal(err)
		}
		d, err := tensor.ParseDType(e.DType)
		if err != nil {
			t.Fatal(err)
		}
		x := tensor.Empty(d, e.Shape...)
		copy(x.Storage().Bytes(), data[e.Offsets[0]:e.Offsets[1]])
		f.ts[k] = x
	}
	return f
}

func (f *fixture) get(k string) *T {
	x, ok := f.ts[k]
	if !ok {
		f.t.Fatalf("fixture has no tensor %q", k)
	}
	return x
}

func (f *fixture) pair(k string) (int, int) {
	p := strings.Split(f.meta[k], ",")
	a, _ := strconv.Atoi(p[0])
	b, _ := strconv.Atoi(p[1])
	return a, b
}

// check compares with the README's tolerances: atol + rtol·|want|.
func (f *fixture) check(what string, got *T, key string, atol, rtol float64) {
	f.t.Helper()
	want := f.get(key).Float64s()
	g := got.Float64s()
	if len(g) != len(want) {
		f.t.Fatalf("%s: %d values, want %d", what, len(g), len(want))
	}
	for i := range g {
		if math.Abs(g[i]-want[i]) > atol+rtol*math.Abs(want[i]) {
			f.t.Fatalf("%s: element %d = %v, want %v", what, i, g[i], want[i])
		}
	}
}

func TestFixtureConv(t *testing.T) {
	f := loadFixture(t, "conv_variants.safetensors")
	for _, c := range []string{"basic", "strided", "dilated", "grouped", "depthwise", "rect"} {
		var p kernels.Conv2dParams
		p.StrideH, p.StrideW = f.pair(c + ".stride")
		p.PadH, p.PadW = f.pair(c + ".padding")
		p.DilationH, p.DilationW = f.pair(c + ".dilation")
		p.Groups, _ = strconv.Atoi(f.meta[c+".groups"])
		x, w, b, dy := f.get(c+".x"), f.get(c+".weight"), f.get(c+".bias"), f.get(c+".dy")
		y := tensor.EmptyLike(dy)
		be.Conv2d(y, x, w, b, p)
		f.check(c+".y", y, c+".y", 1e-10, 1e-9)
		dx, dw := tensor.EmptyLike(x), tensor.EmptyLike(w)
		be.Conv2dBackwardInput(dx, dy, w, p)
		be.Conv2dBackwardWeight(dw, x, dy, p)
		f.check(c+".grad_x", dx, c+".grad_x", 1e-10, 1e-9)
		f.check(c+".grad_weight", dw, c+".grad_weight", 1e-10, 1e-9)
		db := tensor.Empty(tensor.F64, 1, dy.Shape()[1], 1, 1)
		be.Reduce(kernels.Sum, db, dy, []int{0, 2, 3})
		f.check(c+".grad_bias", db, c+".grad_bias", 1e-10, 1e-9)
	}
	for _, c := range []string{"maxpool", "avgpool", "maxpool3"} {
		var p kernels.Pool2dParams
		p.KernelH, p.KernelW = f.pair(c + ".kernel")
		p.StrideH, p.StrideW = f.pair(c + ".stride")
		p.PadH, p.PadW = f.pair(c + ".padding")
		p.CountIncludePad = f.meta[c+".count_include_pad"] == "true"
		x, dy := f.get(c+".x"), f.get(c+".dy")
		y, dx := tensor.EmptyLike(dy), tensor.EmptyLike(x)
		if strings.HasPrefix(c, "max") {
			am := tensor.Empty(tensor.I32, dy.Shape()...)
			be.MaxPool2d(y, am, x, p)
			be.MaxPool2dBackward(dx, dy, am, p)
		} else {
			be.AvgPool2d(y, x, p)
			be.AvgPool2dBackward(dx, dy, p)
		}
		f.check(c+".y", y, c+".y", 1e-10, 1e-9)
		f.check(c+".grad_x", dx, c+".grad_x", 1e-10, 1e-9)
	}
}

func TestFixtureScatter(t *testing.T) {
	f := loadFixture(t, "scatter.safetensors")
	src, idx := f.get("input.src"), f.get("input.index")
	const S = 4
	y := tensor.Empty(tensor.F64, S, 4)
	am := tensor.Empty(tensor.I64, S, 4)
	for op, k := range map[kernels.ReduceOp]string{kernels.Sum: "segment_sum", kernels.Mean: "segment_mean", kernels.Max: "segment_max"} {
		be.SegmentReduce(op, y, am, src, idx)
		f.check(k, y, k+".y", 1e-10, 1e-9)
	}
	ds := tensor.EmptyLike(src)
	be.SegmentMaxBackward(ds, f.get("segment_max.dy"), am)
	f.check("segment_max grad", ds, "segment_max.grad_src", 1e-10, 1e-9)

	acc := tensor.Zeros(tensor.F64, S, 4)
	be.IndexAdd(acc, 0, idx, src)
	f.check("scatter_add", acc, "scatter_add.y", 1e-10, 1e-9)

	sm := tensor.EmptyLike(src)
	be.SegmentSoftmax(sm, src, idx, S)
	f.check("segment_softmax", sm, "segment_softmax.y", 1e-10, 1e-9)
	be.SegmentSoftmaxBackward(ds, sm, f.get("segment_softmax.dy"), idx, S)
	f.check("segment_softmax grad", ds, "segment_softmax.grad_src", 1e-10, 1e-9)

	gi := f.get("gather.index")
	g := tensor.Empty(tensor.F64, gi.Shape()...)
	be.Gather(g, src, 1, gi)
	f.check("gather", g, "gather.y", 0, 0)
	gs := tensor.Zeros(tensor.F64, src.Shape()...)
	be.ScatterAdd(gs, 1, gi, f.get("gather.dy"))
	f.check("gather grad", gs, "gather.grad_src", 1e-10, 1e-9)

	si := f.get("index_select.index")
	sel := tensor.Empty(tensor.F64, si.Numel(), 4)
	be.IndexSelect(sel, src, 0, si)
	f.check("index_select", sel, "index_select.y", 0, 0)
	gsel := tensor.Zeros(tensor.F64, src.Shape()...)
	be.IndexAdd(gsel, 0, si, f.get("index_select.dy"))
	f.check("index_select grad", gsel, "index_select.grad_src", 1e-10, 1e-9)
}

func TestFixtureLoss(t *testing.T) {
	f := loadFixture(t, "loss.safetensors")
	x, tg := f.get("input.logits"), f.get("input.target")
	for _, c := range []string{"ce_mean", "ce_sum", "ce_none", "ce_plain"} {
		var p kernels.CrossEntropyParams
		p.LabelSmoothing, _ = strconv.ParseFloat(f.meta[c+".label_smoothing"], 64)
		switch f.meta[c+".reduction"] {
		case "sum":
			p.Reduction = kernels.ReduceSum
		case "none":
			p.Reduction = kernels.ReduceNone
		}
		loss := tensor.EmptyLike(f.get(c + ".loss"))
		be.CrossEntropy(loss, x, tg, p)
		f.check(c, loss, c+".loss", 1e-5, 1e-4)
		dl := tensor.Scalar(tensor.F32, 1)
		if p.Reduction == kernels.ReduceNone {
			dl = f.get(c + ".dy")
		}
		dx := tensor.EmptyLike(x)
		be.CrossEntropyBackward(dx, x, tg, dl, p)
		f.check(c+" grad", dx, c+".grad_logits", 1e-5, 1e-4)
	}
	for _, c := range []string{"softmax", "logsoftmax"} {
		x, dy := f.get(c+".x"), f.get(c+".dy")
		y, dx := tensor.EmptyLike(x), tensor.EmptyLike(x)
		if c == "softmax" {
			be.Softmax(y, x, 1)
			be.SoftmaxBackward(dx, y, dy, 1)
		} else {
			be.LogSoftmax(y, x, 1)
			be.LogSoftmaxBackward(dx, y, dy, 1)
		}
		f.check(c, y, c+".y", 1e-5, 1e-4)
		f.check(c+" grad", dx, c+".grad_x", 1e-5, 1e-4)
	}
	lx := f.get("logsumexp.x")
	ly := tensor.Empty(tensor.F32, 7, 1)
	be.Reduce(kernels.LogSumExp, ly, lx, []int{1})
	f.check("logsumexp", ly, "logsumexp.y", 1e-5, 1e-4)
}

func TestFixtureLayers(t *testing.T) {
	f := loadFixture(t, "layers.safetensors")
	acts := map[string]kernels.UnaryOp{"gelu_tanh": kernels.GeluTanh, "gelu_erf": kernels.GeluErf, "silu": kernels.Silu, "sigmoid": kernels.Sigmoid, "tanh": kernels.Tanh, "softplus": kernels.Softplus}
	for c, op := range acts {
		x, dy := f.get(c+".x"), f.get(c+".dy")
		y, dx := tensor.EmptyLike(x), tensor.EmptyLike(x)
		be.Unary(op, y, x)
		be.UnaryBackward(op, dx, x, y, dy)
		f.check(c, y, c+".y", 1e-5, 1e-4)
		f.check(c+" grad", dx, c+".grad_x", 1e-5, 1e-4)
	}

	x, w, b, dy := f.get("layernorm.x"), f.get("layernorm.weight"), f.get("layernorm.bias"), f.get("layernorm.dy")
	y, mean, rstd := tensor.EmptyLike(x), tensor.Empty(tensor.F32, 12), tensor.Empty(tensor.F32, 12)
	be.LayerNorm(y, mean, rstd, x, w, b, 10, 1e-5)
	f.check("layernorm", y, "layernorm.y", 1e-5, 1e-4)
	dx, dw, db := tensor.EmptyLike(x), tensor.EmptyLike(w), tensor.EmptyLike(b)
	be.LayerNormBackward(dx, dw, db, dy, x, mean, rstd, w, 10)
	f.check("layernorm dx", dx, "layernorm.grad_x", 1e-5, 1e-4)
	f.check("layernorm dw", dw, "layernorm.grad_weight", 1e-5, 1e-4)
	f.check("layernorm db", db, "layernorm.grad_bias", 1e-5, 1e-4)

	x, w, b, dy = f.get("groupnorm.x"), f.get("groupnorm.weight"), f.get("groupnorm.bias"), f.get("groupnorm.dy")
	y, mean, rstd = tensor.EmptyLike(x), tensor.Empty(tensor.F32, 6), tensor.Empty(tensor.F32, 6)
	be.GroupNorm(y, mean, rstd, x, w, b, 2, 1e-5)
	f.check("groupnorm", y, "groupnorm.y", 1e-5, 1e-4)
	dx, dw, db = tensor.EmptyLike(x), tensor.EmptyLike(w), tensor.EmptyLike(b)
	be.GroupNormBackward(dx, dw, db, dy, x, mean, rstd, w, 2)
	f.check("groupnorm dx", dx, "groupnorm.grad_x", 1e-5, 1e-4)
	f.check("groupnorm dw", dw, "groupnorm.grad_weight", 1e-5, 1e-4)
	f.check("groupnorm db", db, "groupnorm.grad_bias", 1e-5, 1e-4)

	x, w, b, dy = f.get("batchnorm.x"), f.get("batchnorm.weight"), f.get("batchnorm.bias"), f.get("batchnorm.dy")
	rm, rv := f.get("batchnorm.running_mean").Clone(), f.get("batchnorm.running_var").Clone()
	y, sm, sr := tensor.EmptyLike(x), tensor.Empty(tensor.F32, 3), tensor.Empty(tensor.F32, 3)
	be.BatchNorm(y, sm, sr, x, w, b, rm, rv, true, 0.1, 1e-5)
	f.check("batchnorm", y, "batchnorm.y", 1e-5, 1e-4)
	f.check("batchnorm running mean", rm, "batchnorm.running_mean_after", 1e-5, 1e-4)
	f.check("batchnorm running var", rv, "batchnorm.running_var_after", 1e-5, 1e-4)
	dx, dw, db = tensor.EmptyLike(x), tensor.EmptyLike(w), tensor.EmptyLike(b)
	be.BatchNormBackward(dx, dw, db, dy, x, sm, sr, w, true)
	f.check("batchnorm dx", dx, "batchnorm.grad_x", 1e-5, 1e-4)
	f.check("batchnorm dw", dw, "batchnorm.grad_weight", 1e-5, 1e-4)
	f.check("batchnorm db", db, "batchnorm.grad_bias", 1e-5, 1e-4)

	ew, ex := f.get("embedding.weight"), f.get("embedding.x")
	ey := tensor.Empty(tensor.F32, 12, 5)
	be.IndexSelect(ey, ew, 0, ex.Reshape(12))
	f.check("embedding", ey, "embedding.y", 0, 0)
	gw := tensor.Zeros(tensor.F32, 11, 5)
	be.IndexAdd(gw, 0, ex.Reshape(12), f.get("embedding.dy").Reshape(12, 5))
	f.check("embedding grad", gw, "embedding.grad_weight", 1e-5, 1e-4)
}
