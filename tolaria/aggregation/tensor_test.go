package aggregation

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/esper-go/esper/autograd"
	"github.com/esper-go/esper/internal/testdevice"
	"github.com/esper-go/esper/leyline"
	"github.com/esper-go/esper/tensor"
	"github.com/stretchr/testify/require"
)

// The tensor path's tests run on testdevice.Device (ESPER_TEST_DEVICE,
// the CPU by default, the strict sim device with =sim), reading results
// back only through testdevice's explicit copies; the host path is their
// reference.

// onDev copies a host tensor to dev.
func onDev(t *testing.T, x *tensor.Tensor, dev tensor.Device) *tensor.Tensor {
	t.Helper()
	y, err := x.ToDevice(dev)
	if err != nil {
		t.Fatal(err)
	}
	return y
}

// vecOn returns v as a tensor on dev.
func vecOn(t *testing.T, v []float32, dev tensor.Device) *tensor.Tensor {
	t.Helper()
	return onDev(t, tensor.FromSlice(append([]float32(nil), v...), len(v)), dev)
}

// vecsOn returns each of vs as a tensor on dev.
func vecsOn(t *testing.T, vs [][]float32, dev tensor.Device) []*tensor.Tensor {
	t.Helper()
	out := make([]*tensor.Tensor, len(vs))
	for i, v := range vs {
		out[i] = vecOn(t, v, dev)
	}
	return out
}

// devParams returns host parameters of the given shapes with random
// values and gradients, and the same parameters on the test device.
func devParams(t *testing.T, rng *rand.Rand, shapes ...[]int) (host, dev []*autograd.Var) {
	t.Helper()
	host = params(rng, shapes...)
	dev = make([]*autograd.Var, len(host))
	for i, p := range host {
		q := autograd.Param(testdevice.To(t, p.Value))
		q.Grad = testdevice.To(t, p.Grad)
		dev[i] = q
	}
	return host, dev
}

// sameBits fails unless got and want are bitwise equal.
func sameBits(t *testing.T, what string, got, want []float32) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d elements, want %d", what, len(got), len(want))
	}
	for i := range got {
		if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
			t.Fatalf("%s[%d] = %v, want %v bitwise", what, i, got[i], want[i])
		}
	}
}

// closeVec fails unless got[i] is within rel·(1+|want[i]|) of want[i].
func closeVec(t *testing.T, what string, got, want []float32, rel float64) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d elements, want %d", what, len(got), len(want))
	}
	for i := range got {
		if !near(float64(got[i]), float64(want[i]), rel*(1+math.Abs(float64(want[i])))) {
			t.Fatalf("%s[%d] = %v, want %v (±%g relative)", what, i, got[i], want[i], rel)
		}
	}
}

// GradsToFlatTensor gathers the gradients where they lie, bitwise as
// GradsToFlat does on the host (zeros for a missing gradient, row-major
// order for a transposed one, BF16 widened), and FlatTensorToGrads
// writes them back, creating a missing gradient on the flat's device.
func TestGradsToFlatTensorRoundTrip(t *testing.T) {
	dev := testdevice.Device(t)
	rng := tensor.NewRNG(1)
	host, ps := devParams(t, rng, []int{2, 3}, []int{4}, []int{3, 2})
	host[1].Grad, ps[1].Grad = nil, nil
	// A transposed (strided) gradient on the device.
	tr := tensor.Uniform(rng, tensor.F32, -1, 1, 2, 3)
	host[2].Grad = tr.T()
	trDev := testdevice.To(t, tr)
	ps[2].Grad = trDev.T()

	want := make([]float32, 16)
	if err := GradsToFlat(host, want); err != nil {
		t.Fatal(err)
	}
	var pool GradientBufferPool
	buf, err := pool.AcquireOn(dev, 16, tensor.F32)
	if err != nil {
		t.Fatal(err)
	}
	if buf.Device() != dev {
		t.Fatalf("buffer on %v, want %v", buf.Device(), dev)
	}
	if err := GradsToFlatTensor(ps, buf); err != nil {
		t.Fatal(err)
	}
	sameBits(t, "flat", testdevice.F32(t, buf), want)

	back := make([]float32, 16)
	for i := range back {
		back[i] = float32(i)/8 - 1
	}
	if err := FlatTensorToGrads(vecOn(t, back, dev), ps); err != nil {
		t.Fatal(err)
	}
	if ps[1].Grad == nil || ps[1].Grad.Device() != dev || !tensor.SameShape(ps[1].Grad.Shape(), []int{4}) {
		t.Fatalf("missing gradient not created on %v: %v", dev, ps[1].Grad)
	}
	sameBits(t, "grad 0", testdevice.F32(t, ps[0].Grad), back[:6])
	sameBits(t, "grad 1", testdevice.F32(t, ps[1].Grad), back[6:10])
	// The [3,2] view's row-major elements land transposed in its [2,3]
	// storage (read whole: a strided view cannot be copied off a device).
	sameBits(t, "grad 2 (transposed)", testdevice.F32(t, trDev), tensor.FromSlice(back[10:], 3, 2).T().Contiguous().F32())
	if err := pool.Release(buf); err != nil {
		t.Fatal(err)
	}
}

func TestFlatTensorConvertsHalfGradients(t *testing.T) {
	dev := testdevice.Device(t)
	p := autograd.Param(testdevice.To(t, tensor.Zeros(tensor.BF16, 3)))
	p.Grad = testdevice.To(t, tensor.FromFloat64s(tensor.BF16, []float64{0.5, -2, 3}, 3))
	buf := vecOn(t, make([]float32, 3), dev)
	if err := GradsToFlatTensor([]*autograd.Var{p}, buf); err != nil {
		t.Fatal(err)
	}
	assertVec(t, "flat", testdevice.F32(t, buf), []float64{0.5, -2, 3}, 0)
	if err := FlatTensorToGrads(vecOn(t, []float32{1.5, 4, -0.25}, dev), []*autograd.Var{p}); err != nil {
		t.Fatal(err)
	}
	if p.Grad.DType() != tensor.BF16 {
		t.Fatalf("gradient dtype %v", p.Grad.DType())
	}
	assertVec(t, "grad", toF32(testdevice.F64(t, p.Grad)), []float64{1.5, 4, -0.25}, 0)
}

func toF32(v []float64) []float32 {
	out := make([]float32, len(v))
	for i, x := range v {
		out[i] = float32(x)
	}
	return out
}

func TestFlatTensorRejects(t *testing.T) {
	dev := testdevice.Device(t)
	rng := tensor.NewRNG(2)
	_, ps := devParams(t, rng, []int{2}, []int{3})
	other := tensor.Sim(7)
	if dev == other {
		other = tensor.CPU
	}
	elsewhere := onDev(t, tensor.Zeros(tensor.F32, 5), other)
	cases := []struct {
		name   string
		params []*autograd.Var
		buf    *tensor.Tensor
		want   string
	}{
		{"empty", nil, vecOn(t, nil, dev), "empty"},
		{"nil buffer", ps, nil, "nil"},
		{"short buffer", ps, vecOn(t, make([]float32, 4), dev), "elements"},
		{"int buffer", ps, testdevice.To(t, tensor.Zeros(tensor.I64, 5)), "non-float"},
		{"strided buffer", ps, testdevice.To(t, tensor.Zeros(tensor.F32, 5, 2)).Narrow(1, 0, 1), "contiguous"},
		{"other device", ps, elsewhere, "is on"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			err := GradsToFlatTensor(c.params, c.buf)
			if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("GradsToFlatTensor: %v, want ErrInvalid containing %q", err, c.want)
			}
			err = FlatTensorToGrads(c.buf, c.params)
			if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("FlatTensorToGrads: %v, want ErrInvalid containing %q", err, c.want)
			}
		})
	}
}

// The pool hands out buffers on the asked device, zeroes them there on
// release and reuses them by device, size and dtype.
func TestPoolAcquireOnDevice(t *testing.T) {
	dev := testdevice.Device(t)
	var p GradientBufferPool
	a, err := p.AcquireOn(dev, 8, tensor.F32)
	if err != nil {
		t.Fatal(err)
	}
	if a.Device() != dev || a.Numel() != 8 || a.DType() != tensor.F32 {
		t.Fatalf("buffer %v %v on %v", a.DType(), a.Shape(), a.Device())
	}
	sameBits(t, "fresh buffer", testdevice.F32(t, a), make([]float32, 8))
	ps := []*autograd.Var{autograd.Param(testdevice.To(t, tensor.Zeros(tensor.F32, 8)))}
	ps[0].Grad = testdevice.To(t, tensor.Full(tensor.F32, 3, 8))
	if err := GradsToFlatTensor(ps, a); err != nil {
		t.Fatal(err)
	}
	if err := p.Release(a); err != nil {
		t.Fatal(err)
	}
	other := tensor.Sim(6)
	if dev == other {
		other = tensor.CPU
	}
	b, err := p.AcquireOn(other, 8, tensor.F32)
	if err != nil {
		t.Fatal(err)
	}
	if b == a {
		t.Fatal("a buffer of another device was reused")
	}
	c, err := p.AcquireOn(dev, 8, tensor.F32)
	if err != nil {
		t.Fatal(err)
	}
	if c != a {
		t.Fatal("the released buffer of the same device, size and dtype was not reused")
	}
	sameBits(t, "reused buffer", testdevice.F32(t, c), make([]float32, 8))
	if s := p.Stats(); s.Allocated != 2 || s.Reused != 1 || s.InUse != 2 {
		t.Fatalf("stats %+v", s)
	}
	if _, err := p.AcquireOn(dev, -1, tensor.F32); !errors.Is(err, ErrInvalid) {
		t.Fatalf("negative size: %v", err)
	}
	if _, err := p.AcquireOn(dev, 4, tensor.I32); !errors.Is(err, ErrInvalid) {
		t.Fatalf("int dtype: %v", err)
	}
}

// PerSeedTensors splits like PerSeed: the same names, weights and
// redistribution flag, the masked sums bitwise, the redistributed vectors
// and the teacher norm within float32 rounding — with one microbatch and
// with two.
func TestPerSeedTensorsMatchesPerSeed(t *testing.T) {
	dev := testdevice.Device(t)
	m, micro := perSeedFixture(t)
	for _, nm := range []int{1, 2} {
		for _, attrib := range []map[string]float64{nil, {"s1": 1, "s3": 3}, {"s2": 2}} {
			t.Run(fmt.Sprintf("micro=%d/attrib=%v", nm, attrib), func(t *testing.T) {
				var want SeedGrads
				if err := PerSeed(&want, micro[:nm], m, attrib, 2, perSeedStates); err != nil {
					t.Fatal(err)
				}
				var got SeedTensors
				if err := PerSeedTensors(&got, vecsOn(t, micro[:nm], dev), m, attrib, 2, perSeedStates); err != nil {
					t.Fatal(err)
				}
				if !slices.Equal(got.Names, want.Names) || !slices.Equal(got.Weights, want.Weights) || got.Redistributed != want.Redistributed {
					t.Fatalf("names %v weights %v redistributed %v, want %v %v %v", got.Names, got.Weights, got.Redistributed, want.Names, want.Weights, want.Redistributed)
				}
				for i := range want.Flats {
					g := testdevice.F32(t, got.Flats[i])
					if got.Flats[i].Device() != dev {
						t.Fatalf("vector %d on %v", i, got.Flats[i].Device())
					}
					if want.Redistributed {
						closeVec(t, got.Names[i], g, want.Flats[i], 1e-6)
					} else {
						sameBits(t, got.Names[i], g, want.Flats[i])
					}
				}
				if want.Redistributed {
					norm := testdevice.Item(t, got.TeacherNorm)
					if !near(norm, want.TeacherNorm, 1e-12*want.TeacherNorm) {
						t.Fatalf("teacher norm %v, want %v", norm, want.TeacherNorm)
					}
				} else if got.TeacherNorm != nil {
					t.Fatal("teacher norm without redistribution")
				}
			})
		}
	}
}

func TestPerSeedTensorsRejects(t *testing.T) {
	dev := testdevice.Device(t)
	m, micro := perSeedFixture(t)
	good := vecsOn(t, micro, dev)
	var g SeedTensors
	cases := map[string]error{
		"nil dst":         PerSeedTensors(nil, good, m, nil, 0, nil),
		"nil masks":       PerSeedTensors(&g, good, nil, nil, 0, nil),
		"no gradients":    PerSeedTensors(&g, nil, m, nil, 0, nil),
		"length":          PerSeedTensors(&g, vecsOn(t, [][]float32{{1, 2}}, dev), m, nil, 0, nil),
		"mixed dtypes":    PerSeedTensors(&g, []*tensor.Tensor{good[0], testdevice.To(t, tensor.Zeros(tensor.F64, 6))}, m, nil, 0, nil),
		"NaN attribution": PerSeedTensors(&g, good, m, map[string]float64{"s1": math.NaN()}, 1, nil),
		"teacher attrib":  PerSeedTensors(&g, good, m, map[string]float64{TeacherID: 1}, 1, nil),
		"NaN alpha":       PerSeedTensors(&g, good, m, nil, 0, map[string]SeedInfo{"s1": {Alpha: math.Inf(1)}}),
	}
	for name, err := range cases {
		if !errors.Is(err, ErrInvalid) {
			t.Errorf("%s: %v", name, err)
		}
	}
}

// combineTrial is random input for the combiner comparisons: k gradients
// of n elements mixing ±base so that pairs conflict often but not always.
func combineTrial(rng *rand.Rand, k, n int) [][]float32 {
	flats := make([][]float32, k)
	base := randVec(rng, n)
	for i := range flats {
		flats[i] = randVec(rng, n)
		s := float32(rng.Float64()*4 - 2)
		for e := range flats[i] {
			flats[i][e] += s * base[e]
		}
	}
	return flats
}

// combineOn runs a TensorCombiner on dev and returns the result and the
// conflict count, read back with explicit copies.
func combineOn(t *testing.T, c *TensorCombiner, dev tensor.Device, flats [][]float32, pcgrad bool, weights []float64, seed uint64) ([]float32, float64) {
	t.Helper()
	out := vecOn(t, make([]float32, len(flats[0])), dev)
	conflicts, err := c.CombineInto(out, vecsOn(t, flats, dev), pcgrad, weights, tensor.NewRNG(seed))
	if err != nil {
		t.Fatal(err)
	}
	if conflicts.Device() != dev {
		t.Fatalf("conflict count on %v, want %v", conflicts.Device(), dev)
	}
	return testdevice.F32(t, out), testdevice.Item(t, conflicts)
}

// The tensor PCGrad against the host one (Combiner), same inputs and rng
// seeds: the same conflict counts and the same result within float32
// rounding (1e-5 relative, as the host Combiner against its float64
// reference).
func TestTensorCombinerMatchesCombiner(t *testing.T) {
	dev := testdevice.Device(t)
	rng := tensor.NewRNG(42)
	var tc TensorCombiner
	var hc Combiner
	for trial := range 40 {
		k := 2 + trial%5
		n := 1 + rng.IntN(1500)
		flats := combineTrial(rng, k, n)
		var weights []float64
		if trial%2 == 1 {
			weights = make([]float64, k)
			for i := range weights {
				weights[i] = 0.1 + rng.Float64()
			}
		}
		for _, pc := range []bool{true, false} {
			seed := uint64(trial)
			want, wantConflicts, err := hc.Combine(flats, pc, weights, tensor.NewRNG(seed))
			if err != nil {
				t.Fatal(err)
			}
			got, conflicts := combineOn(t, &tc, dev, flats, pc, weights, seed)
			if int(conflicts) != wantConflicts {
				t.Fatalf("trial %d (%d seeds, pcgrad %v): %v conflicts, host %d", trial, k, pc, conflicts, wantConflicts)
			}
			closeVec(t, fmt.Sprintf("trial %d pcgrad %v", trial, pc), got, want, 1e-5)
		}
	}
}

// The G1 checks of Combine, through the tensor path: opposite gradients
// conflict once and give one of the inputs, the order being random;
// orthogonal ones are summed; a single gradient is copied.
func TestTensorCombinerSmallCases(t *testing.T) {
	dev := testdevice.Device(t)
	var c TensorCombiner
	seen := map[float32]bool{}
	for seed := range uint64(32) {
		out, conflicts := combineOn(t, &c, dev, [][]float32{{1, 0}, {-1, 0}}, true, nil, seed)
		if conflicts != 1 {
			t.Fatalf("seed %d: %v conflicts, want 1", seed, conflicts)
		}
		if !(out[0] == 1 || out[0] == -1) || out[1] != 0 {
			t.Fatalf("seed %d: %v, want (1,0) or (-1,0)", seed, out)
		}
		seen[out[0]] = true
	}
	if !seen[1] || !seen[-1] {
		t.Fatalf("over 32 rng seeds the result was always %v: the order is not random", seen)
	}
	out, conflicts := combineOn(t, &c, dev, [][]float32{{1, 0}, {0, 1}}, true, nil, 3)
	if conflicts != 0 {
		t.Fatalf("orthogonal: %v conflicts", conflicts)
	}
	assertVec(t, "orthogonal", out, []float64{1, 1}, 0)
	out, _ = combineOn(t, &c, dev, [][]float32{{1, 1, 1}, {2, 2, 2}}, true, []float64{1, 3}, 1)
	assertVec(t, "weighted", out, []float64{1.75, 1.75, 1.75}, 1e-7)
	out, conflicts = combineOn(t, &c, dev, [][]float32{{3, -1, 2}}, true, []float64{0.25}, 1)
	if conflicts != 0 {
		t.Fatalf("single: %v conflicts", conflicts)
	}
	assertVec(t, "single", out, []float64{3, -1, 2}, 0)
	// ‖b‖² = 8.8e-13 ≤ 1e-12: the pair counts as a conflict but nothing
	// is projected onto b (unguarded, a would lose half its length).
	for seed := range uint64(8) {
		out, conflicts = combineOn(t, &c, dev, [][]float32{{1, 0}, {-9.4e-7, 0}}, true, nil, seed)
		if conflicts != 1 {
			t.Fatalf("tiny gradient: %v conflicts, want 1", conflicts)
		}
		if out[0] < 0.99 {
			t.Fatalf("tiny gradient, seed %d: %v; the large one was projected onto a vector of norm 1e-6", seed, out)
		}
	}
}

func TestTensorCombinerRejects(t *testing.T) {
	dev := testdevice.Device(t)
	a, b := vecOn(t, []float32{1, 2}, dev), vecOn(t, []float32{3, 4}, dev)
	out := vecOn(t, []float32{0, 0}, dev)
	other := tensor.Sim(6)
	if dev == other {
		other = tensor.CPU
	}
	rng := tensor.NewRNG(1)
	cases := []struct {
		name    string
		out     *tensor.Tensor
		flats   []*tensor.Tensor
		weights []float64
		rng     *rand.Rand
		want    string
	}{
		{"empty", out, nil, nil, rng, "no gradients"},
		{"nil gradient", out, []*tensor.Tensor{a, nil}, nil, rng, "nil"},
		{"length", out, []*tensor.Tensor{a, vecOn(t, []float32{1, 2, 3}, dev)}, nil, rng, "elements"},
		{"dtype", out, []*tensor.Tensor{a, testdevice.To(t, tensor.FromSlice([]float64{1, 2}, 2))}, nil, rng, "f64"},
		{"bf16", out, []*tensor.Tensor{testdevice.To(t, tensor.Zeros(tensor.BF16, 2))}, nil, rng, "f32 or f64"},
		{"device", out, []*tensor.Tensor{a, onDev(t, tensor.FromSlice([]float32{1, 2}, 2), other)}, nil, rng, "on"},
		{"shared", out, []*tensor.Tensor{a, a}, nil, rng, "share storage"},
		{"output is an input", a, []*tensor.Tensor{a, b}, nil, rng, "shares storage"},
		{"short output", vecOn(t, []float32{0}, dev), []*tensor.Tensor{a, b}, nil, rng, "output"},
		{"NaN weight", out, []*tensor.Tensor{a, b}, []float64{1, math.NaN()}, rng, "NaN"},
		{"weight count", out, []*tensor.Tensor{a, b}, []float64{1}, rng, "1 weights for 2"},
		{"zero weight sum", out, []*tensor.Tensor{a, b}, []float64{1, -1}, rng, "close to zero"},
		{"nil rng", out, []*tensor.Tensor{a, b}, nil, nil, "rng"},
	}
	var c TensorCombiner
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := c.CombineInto(tc.out, tc.flats, true, tc.weights, tc.rng)
			if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("CombineInto: %v, want ErrInvalid containing %q", err, tc.want)
			}
		})
	}
	sameBits(t, "rejected inputs", testdevice.F32(t, a), []float32{1, 2})
}

// recordStep is one step of the accumulator comparison: per-seed vectors,
// weights, alphas, attribution, a teacher norm (0: none) and a conflict
// count.
type recordStep struct {
	names     []string
	flats     [][]float32
	weights   []float64
	attrib    map[string]float64
	uses      int
	teacher   float64
	conflicts int
}

// recordSteps replays steps on a host accumulator and on a tensor one
// (vectors, teacher norms and conflict counts as tensors on dev) and
// returns both reports.
func recordSteps(t *testing.T, dev tensor.Device, opts AccumulatorOptions, masks *Masks, steps []recordStep) (host, tens EpochReport) {
	t.Helper()
	ha, err := NewSeedMetricsAccumulator(opts)
	if err != nil {
		t.Fatal(err)
	}
	ta, err := NewSeedMetricsAccumulator(opts)
	if err != nil {
		t.Fatal(err)
	}
	alphas := map[string]float64{"s1": 0.2, "s2": 0.6, "s3": 1}
	for _, a := range []*SeedMetricsAccumulator{ha, ta} {
		a.SetMasks(masks)
	}
	for _, s := range steps {
		if err := ha.Record(s.names, s.flats, s.weights, alphas, s.attrib, s.uses); err != nil {
			t.Fatal(err)
		}
		if err := ta.RecordTensors(s.names, vecsOn(t, s.flats, dev), s.weights, alphas, s.attrib, s.uses); err != nil {
			t.Fatal(err)
		}
		if s.teacher > 0 {
			if err := ha.RecordTeacherNorm(s.teacher); err != nil {
				t.Fatal(err)
			}
			if err := ta.RecordTeacherNormTensor(onDev(t, tensor.Scalar(tensor.F64, s.teacher).Reshape(1), dev)); err != nil {
				t.Fatal(err)
			}
		}
		if err := ha.RecordCombine(1, s.conflicts); err != nil {
			t.Fatal(err)
		}
		if err := ta.RecordCombineTensor(1, onDev(t, tensor.Scalar(tensor.F64, float64(s.conflicts)).Reshape(1), dev)); err != nil {
			t.Fatal(err)
		}
	}
	stages := map[string]leyline.SeedStage{"s1": leyline.StageTraining, "s2": leyline.StageBlending, "s3": leyline.StageHolding}
	host, tens = ha.Finalize(stages), ta.Finalize(stages)
	if tens.Err != nil {
		t.Fatal(tens.Err)
	}
	return host, tens
}

// sameReports fails unless two reports hold the same metrics (names,
// attributes, order) with values within rel, and the same events.
func sameReports(t *testing.T, got, want EpochReport, rel float64) {
	t.Helper()
	if len(got.Metrics) != len(want.Metrics) {
		t.Fatalf("%d metrics, want %d", len(got.Metrics), len(want.Metrics))
	}
	for i, w := range want.Metrics {
		g := got.Metrics[i]
		if g.Name != w.Name || fmt.Sprint(g.Attributes) != fmt.Sprint(w.Attributes) {
			t.Fatalf("metric %d: %s %v, want %s %v", i, g.Name, g.Attributes, w.Name, w.Attributes)
		}
		if !near(g.Value, w.Value, rel*(1+math.Abs(w.Value))) {
			t.Fatalf("%s %v = %v, want %v", g.Name, g.Attributes, g.Value, w.Value)
		}
	}
	if !slices.Equal(eventNames(got.Events), eventNames(want.Events)) || got.ConflictRatio != want.ConflictRatio {
		t.Fatalf("events %v ratio %v, want %v %v", eventNames(got.Events), got.ConflictRatio, eventNames(want.Events), want.ConflictRatio)
	}
}

// The device accumulator reports what the host one reports: the
// hand-computed two-seed epoch of TestAccumulatorTwoSeedsTwoEpochs
// exactly, and random steps with a changing participant list and layer
// norms within float32 rounding.
func TestRecordTensorsMatchesRecord(t *testing.T) {
	dev := testdevice.Device(t)
	ps := []*autograd.Var{
		autograd.Param(tensor.Zeros(tensor.F32, 6)), autograd.Param(tensor.Zeros(tensor.F32, 2)),
		autograd.Param(tensor.Zeros(tensor.F32, 2)),
	}
	masks, err := SegmentMasks(ps, []string{"host", "s1", "s2"})
	if err != nil {
		t.Fatal(err)
	}
	names := []string{"s1", "s2"}
	hand := []recordStep{
		{names, [][]float32{pad(3, 4), pad(0, -5)}, []float64{1, 0.5}, map[string]float64{"s1": 1, "s2": 3}, 2, 2, 1},
		{names, [][]float32{pad(6, 8), pad(0, 30)}, []float64{1, 0.5}, map[string]float64{"s1": 2, "s2": 2}, 4, 4, 0},
	}
	host, tens := recordSteps(t, dev, AccumulatorOptions{}, masks, hand)
	sameReports(t, tens, host, 0)
	expectMetrics(t, tens.Metrics, "s1", map[string]float64{
		leyline.MetricTolariaGradAggSeedNorm:      7.5,
		leyline.MetricTolariaGradAggSeedShare:     0.375,
		leyline.MetricTolariaGradAggSeedConflicts: 1,
	})
	expectMetrics(t, tens.Metrics, "", map[string]float64{leyline.MetricTolariaGradAggTeacherShare: 3})

	rng := tensor.NewRNG(9)
	var steps []recordStep
	for i := range 12 {
		names := []string{"s1", "s2", "s3"}[:2+i%2] // the participant list changes
		steps = append(steps, recordStep{
			names: names, flats: combineTrial(rng, len(names), 10),
			weights: []float64{1, 0.5, 0.25}[:len(names)],
			attrib:  map[string]float64{"s1": 1, "s2": float64(i)}, uses: i,
			teacher: float64(i % 3), conflicts: i % 2,
		})
	}
	layers := []Layer{{"a", Range{0, 4}}, {"b", Range{4, 4}}, {"c", Range{4, 10}}}
	host, tens = recordSteps(t, dev, AccumulatorOptions{Layers: layers, LayerTopK: 2}, masks, steps)
	sameReports(t, tens, host, 1e-6)

	// More than 16 participants: no pairwise conflicts, on the device too.
	many := make([]string, 17)
	for i := range many {
		many[i] = fmt.Sprintf("m%02d", i)
	}
	host, tens = recordSteps(t, dev, AccumulatorOptions{}, masks, []recordStep{
		{many, combineTrial(rng, 17, 10), slices.Repeat([]float64{1}, 17), nil, 0, 0, 0},
	})
	sameReports(t, tens, host, 1e-6)
}

func TestRecordTensorsRejects(t *testing.T) {
	dev := testdevice.Device(t)
	acc, err := NewSeedMetricsAccumulator(AccumulatorOptions{Layers: []Layer{{"l", Range{0, 20}}}})
	if err != nil {
		t.Fatal(err)
	}
	v := vecsOn(t, [][]float32{pad(1), pad(2)}, dev)
	errs := map[string]error{
		"counts":      acc.RecordTensors([]string{"a"}, v, []float64{1, 1}, nil, nil, 0),
		"duplicate":   acc.RecordTensors([]string{"a", "a"}, v, []float64{1, 1}, nil, nil, 0),
		"NaN weight":  acc.RecordTensors([]string{"a", "b"}, v, []float64{1, math.NaN()}, nil, nil, 0),
		"layer range": acc.RecordTensors([]string{"a", "b"}, v, []float64{1, 1}, nil, nil, 0),
		"length":      acc.RecordTensors([]string{"a", "b"}, []*tensor.Tensor{v[0], vecOn(t, []float32{1}, dev)}, []float64{1, 1}, nil, nil, 0),
		"teacher":     acc.RecordTeacherNormTensor(vecOn(t, []float32{1}, dev)),
		"conflicts":   acc.RecordCombineTensor(1, nil),
		"microbatch":  acc.RecordCombineTensor(-1, onDev(t, tensor.Zeros(tensor.F64, 1), dev)),
	}
	for name, err := range errs {
		if !errors.Is(err, ErrInvalid) {
			t.Errorf("%s: %v", name, err)
		}
	}
	if !acc.Empty() {
		t.Fatal("rejected records changed the accumulator")
	}
}

// seedStep is one combining step of the trainer's seed path on device
// dev, written the way tolaria's gradagg.go uses the package: flatten
// into a pooled buffer, split per seed, record, combine with PCGrad,
// record the combination, write back, release.
type seedStep struct {
	pool  GradientBufferPool
	split SeedTensors
	comb  TensorCombiner
	acc   *SeedMetricsAccumulator
	rng   *rand.Rand
}

func (s *seedStep) run(t *testing.T, ps []*autograd.Var, masks *Masks, attrib map[string]float64) {
	t.Helper()
	dev := ps[0].Grad.Device()
	buf, err := s.pool.AcquireOn(dev, masks.Total(), tensor.F32)
	if err != nil {
		t.Fatal(err)
	}
	if err := GradsToFlatTensor(ps, buf); err != nil {
		t.Fatal(err)
	}
	if err := PerSeedTensors(&s.split, []*tensor.Tensor{buf}, masks, attrib, 1, perSeedStates); err != nil {
		t.Fatal(err)
	}
	s.acc.SetMasks(masks)
	if err := s.acc.RecordTensors(s.split.Names, s.split.Flats, s.split.Weights, nil, attrib, 1); err != nil {
		t.Fatal(err)
	}
	if s.split.Redistributed {
		if err := s.acc.RecordTeacherNormTensor(s.split.TeacherNorm); err != nil {
			t.Fatal(err)
		}
	}
	conflicts, err := s.comb.CombineInto(buf, s.split.Flats, true, nil, s.rng)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.acc.RecordCombineTensor(1, conflicts); err != nil {
		t.Fatal(err)
	}
	if err := FlatTensorToGrads(buf, ps); err != nil {
		t.Fatal(err)
	}
	if err := s.pool.Release(buf); err != nil {
		t.Fatal(err)
	}
}

// seedStepFixture: host [6], s1 [4], host [3], s2 [5], s3 [2] with
// random gradients (the host's shifted off zero), on dev.
func seedStepFixture(t *testing.T, dev tensor.Device) ([]*autograd.Var, *Masks) {
	t.Helper()
	rng := tensor.NewRNG(5)
	ps := params(rng, []int{2, 3}, []int{4}, []int{3}, []int{5}, []int{2})
	for i, v := range ps[0].Grad.F32() {
		ps[0].Grad.F32()[i] = v - 2
	}
	masks, err := SegmentMasks(ps, []string{"host", "s1", "host", "s2", "s3"})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range ps {
		p.Value = onDev(t, p.Value, dev)
		p.Grad = onDev(t, p.Grad, dev)
	}
	return ps, masks
}

// TestSeedStepSimMatchesCPU: a whole combining step (the seed path with
// PCGrad) on the strict sim device gives bitwise the CPU's gradients and
// epoch report, for several steps whose random projection orders come
// from generators seeded alike.
func TestSeedStepSimMatchesCPU(t *testing.T) {
	var reports [2]EpochReport
	var grads [2][][]float32
	for d, dev := range []tensor.Device{tensor.CPU, tensor.Sim(3)} {
		ps, masks := seedStepFixture(t, dev)
		acc, err := NewSeedMetricsAccumulator(AccumulatorOptions{Layers: ParamLayers(ps)})
		if err != nil {
			t.Fatal(err)
		}
		s := &seedStep{acc: acc, rng: tensor.NewRNG(77)}
		for step := range 6 {
			// A negative share sends the teacher's gradient against s1:
			// the seeds own disjoint parameters, so only the
			// redistributed teacher can make them conflict.
			attrib := map[string]float64{"s1": 2, "s2": float64(step%3) - 1}
			s.run(t, ps, masks, attrib)
		}
		reports[d] = acc.Finalize(nil)
		if reports[d].Err != nil {
			t.Fatal(reports[d].Err)
		}
		for _, p := range ps {
			grads[d] = append(grads[d], testdevice.F32(t, p.Grad))
		}
	}
	for i := range grads[0] {
		sameBits(t, fmt.Sprintf("gradient %d on sim", i), grads[1][i], grads[0][i])
	}
	if c, _ := metricValue(reports[0].Metrics, leyline.MetricTolariaGradAggConflicts, ""); c == 0 {
		t.Fatal("the fixture never conflicted: the comparison does not cover the projection")
	}
	sameReports(t, reports[1], reports[0], 0)
}

// TestTensorCombinerSimMatchesCPU: the tensor PCGrad alone, on sim and on
// the CPU with rngs seeded alike, bitwise.
func TestTensorCombinerSimMatchesCPU(t *testing.T) {
	rng := tensor.NewRNG(8)
	var cpu, sim TensorCombiner
	for trial := range 20 {
		k := 2 + trial%4
		flats := combineTrial(rng, k, 1+rng.IntN(3000))
		var weights []float64
		if trial%3 == 0 {
			weights = []float64{0.5, 1, 0.25, 2, 1}[:k]
		}
		want, wc := combineOn(t, &cpu, tensor.CPU, flats, true, weights, uint64(trial))
		got, gc := combineOn(t, &sim, tensor.Sim(2), flats, true, weights, uint64(trial))
		if gc != wc {
			t.Fatalf("trial %d: %v conflicts on sim, %v on the cpu", trial, gc, wc)
		}
		sameBits(t, fmt.Sprintf("trial %d", trial), got, want)
	}
}

// TestSeedStepHostSyncsOnSim: one combining step on sim — flatten, split,
// record, PCGrad, write back — reads nothing on the host (0 host syncs),
// and the epoch's figures come over in one (Finalize's Flush).
func TestSeedStepHostSyncsOnSim(t *testing.T) {
	dev := tensor.Sim(4)
	ps, masks := seedStepFixture(t, dev)
	acc, err := NewSeedMetricsAccumulator(AccumulatorOptions{Layers: ParamLayers(ps)})
	if err != nil {
		t.Fatal(err)
	}
	s := &seedStep{acc: acc, rng: tensor.NewRNG(1)}
	s.run(t, ps, masks, map[string]float64{"s1": 1, "s2": 1}) // warm-up: allocations
	before := tensor.HostSyncs(dev)
	s.run(t, ps, masks, map[string]float64{"s1": 1, "s2": -0.5})
	if n := tensor.HostSyncs(dev) - before; n != 0 {
		t.Fatalf("one combining step: %d host syncs, want 0", n)
	}
	before = tensor.HostSyncs(dev)
	r := acc.Finalize(nil)
	if n := tensor.HostSyncs(dev) - before; n != 1 || r.Err != nil {
		t.Fatalf("Finalize: %d host syncs (err %v), want 1", n, r.Err)
	}
	before = tensor.HostSyncs(dev)
	acc.Finalize(nil)
	if n := tensor.HostSyncs(dev) - before; n != 0 {
		t.Fatalf("a second Finalize: %d host syncs, want 0 (nothing pending)", n)
	}
	if v, _ := metricValue(r.Metrics, leyline.MetricTolariaGradAggMicrobatchesTotal, ""); v != 2 {
		t.Fatalf("microbatches_total %v, want 2", v)
	}
}

// GroupNorms gives each group's norm where the gradients lie: the
// single-seed observing path's two norms, and their union's by a second
// ForeachNorm, against the host sums of squares.
func TestGroupNorms(t *testing.T) {
	host, ps := devParams(t, tensor.NewRNG(12), []int{3, 2}, []int{4}, []int{5}, []int{2})
	group := []int{0, 1, 0, -1}
	grads := make([]*tensor.Tensor, len(ps))
	for i, p := range ps {
		grads[i] = p.Grad
	}
	grads[2] = nil // no gradient: left out
	var want [2]float64
	for i, p := range host {
		if group[i] < 0 || grads[i] == nil {
			continue
		}
		for _, v := range p.Grad.F32() {
			want[group[i]] += float64(v) * float64(v)
		}
	}
	dst := testdevice.To(t, tensor.Zeros(tensor.F64, 3))
	if err := GroupNorms(dst, grads, group); err != nil {
		t.Fatal(err)
	}
	got := testdevice.F64(t, dst)
	for k, w := range []float64{math.Sqrt(want[0]), math.Sqrt(want[1]), 0} {
		if !near(got[k], w, 1e-12*(1+w)) {
			t.Fatalf("group %d: %v, want %v", k, got[k], w)
		}
	}
	both := testdevice.To(t, tensor.Zeros(tensor.F64, 1))
	tensorForeachNorm(t, both, dst)
	if u := testdevice.Item(t, both); !near(u, math.Sqrt(want[0]+want[1]), 1e-12*u) {
		t.Fatalf("union norm %v, want %v", u, math.Sqrt(want[0]+want[1]))
	}
	for name, err := range map[string]error{
		"dtype":  GroupNorms(testdevice.To(t, tensor.Zeros(tensor.F32, 2)), grads, group),
		"counts": GroupNorms(dst, grads, group[:2]),
		"group":  GroupNorms(dst, grads, []int{0, 3, 0, 0}),
	} {
		if !errors.Is(err, ErrInvalid) {
			t.Errorf("%s: %v", name, err)
		}
	}
}

// tensorForeachNorm writes ‖x‖ into dst with x's backend.
func tensorForeachNorm(t *testing.T, dst, x *tensor.Tensor) {
	t.Helper()
	be, err := backendFor("test", x.Device())
	if err != nil {
		t.Fatal(err)
	}
	be.ForeachNorm(dst, []*tensor.Tensor{x})
}

// TestFlushFrom: an accumulator whose device sums are read by the caller
// (PendingSums, one tensor.ToHostMany, FlushFrom) reports exactly what
// one flushed by Finalize reports; copies that do not match the pending
// sums are refused and leave them pending.
func TestFlushFrom(t *testing.T) {
	dev := testdevice.Device(t)
	ps := []*autograd.Var{
		autograd.Param(tensor.Zeros(tensor.F32, 6)), autograd.Param(tensor.Zeros(tensor.F32, 2)),
		autograd.Param(tensor.Zeros(tensor.F32, 2)),
	}
	masks, err := SegmentMasks(ps, []string{"host", "s1", "s2"})
	require.NoError(t, err)
	var accs [2]*SeedMetricsAccumulator
	for k := range accs {
		accs[k], err = NewSeedMetricsAccumulator(AccumulatorOptions{})
		require.NoError(t, err)
		accs[k].SetMasks(masks)
	}
	require.Nil(t, accs[0].PendingSums(), "nothing recorded on a device")
	require.NoError(t, accs[0].FlushFrom(nil), "nothing to flush")
	rng := tensor.NewRNG(4)
	for i := range 5 {
		names := []string{"s1", "s2", "s3"}[:2+i%2]
		flats := combineTrial(rng, len(names), 10)
		for _, a := range accs {
			require.NoError(t, a.RecordTensors(names, vecsOn(t, flats, dev), []float64{1, 0.5, 0.25}[:len(names)], nil, map[string]float64{"s1": 1}, i))
			require.NoError(t, a.RecordTeacherNormTensor(onDev(t, tensor.Scalar(tensor.F64, float64(i+1)).Reshape(1), dev)))
			require.NoError(t, a.RecordCombineTensor(1, onDev(t, tensor.Scalar(tensor.F64, float64(i%2)).Reshape(1), dev)))
		}
	}
	b := accs[1]
	sums := b.PendingSums()
	require.Len(t, sums, 3, "two participant lists' blocks and the globals")
	require.ErrorContains(t, b.FlushFrom(sums[:2]), "2 host copies for 3")
	wrong := []*tensor.Tensor{tensor.Zeros(tensor.F32, sums[0].Numel()), nil, nil}
	require.ErrorContains(t, b.FlushFrom(wrong), "host copy 0")
	require.Len(t, b.PendingSums(), 3, "a refused flush leaves the sums pending")
	host, err := tensor.ToHostMany(sums)
	require.NoError(t, err)
	require.NoError(t, b.FlushFrom(host))
	require.Nil(t, b.PendingSums(), "flushed")
	stages := map[string]leyline.SeedStage{"s1": leyline.StageTraining, "s2": leyline.StageBlending, "s3": leyline.StageHolding}
	want, got := accs[0].Finalize(stages), b.Finalize(stages)
	require.NoError(t, want.Err)
	require.NoError(t, got.Err)
	sameReports(t, got, want, 0)
	require.Equal(t, want.Metrics, got.Metrics)
}
