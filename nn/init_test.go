package nn

import (
	"math"
	"reflect"
	"testing"

	"github.com/esper-go/esper/internal/testdevice"
	"github.com/esper-go/esper/tensor"
)

// moments returns the mean and standard deviation of x's elements.
func moments(t testing.TB, x *tensor.Tensor) (mean, std float64) {
	t.Helper()
	v := testdevice.F64(t, x)
	for _, x := range v {
		mean += x
	}
	mean /= float64(len(v))
	for _, x := range v {
		std += (x - mean) * (x - mean)
	}
	return mean, math.Sqrt(std / float64(len(v)))
}

func TestInitStatistics(t *testing.T) {
	const rows, cols = 256, 512 // fan_out, fan_in
	cases := []struct {
		name    string
		init    func(r *tensor.Tensor)
		std     float64
		bound   float64 // 0: unbounded (normal)
		wantDis string
	}{
		{"kaiming uniform default", func(w *tensor.Tensor) { KaimingUniform(tensor.NewRNG(1), w, KaimingOptions{}) }, math.Sqrt(2.0 / cols), math.Sqrt(6.0 / cols), ""},
		{"kaiming uniform fan_out relu", func(w *tensor.Tensor) {
			KaimingUniform(tensor.NewRNG(2), w, KaimingOptions{Mode: FanOut, Nonlinearity: NonlinearityReLU})
		}, math.Sqrt(2.0 / rows), math.Sqrt(6.0 / rows), ""},
		{"kaiming uniform a=sqrt5 (PyTorch Linear)", func(w *tensor.Tensor) { KaimingUniform(tensor.NewRNG(3), w, KaimingOptions{A: math.Sqrt(5)}) }, 1 / math.Sqrt(3*cols), 1 / math.Sqrt(cols), ""},
		{"kaiming normal", func(w *tensor.Tensor) { KaimingNormal(tensor.NewRNG(4), w, KaimingOptions{}) }, math.Sqrt(2.0 / cols), 0, ""},
		{"kaiming normal tanh", func(w *tensor.Tensor) {
			KaimingNormal(tensor.NewRNG(5), w, KaimingOptions{Nonlinearity: NonlinearityTanh})
		}, 5.0 / 3 / math.Sqrt(cols), 0, ""},
		{"kaiming normal leaky 0.2", func(w *tensor.Tensor) { KaimingNormal(tensor.NewRNG(6), w, KaimingOptions{A: 0.2}) }, math.Sqrt(2/1.04) / math.Sqrt(cols), 0, ""},
		{"xavier uniform", func(w *tensor.Tensor) { XavierUniform(tensor.NewRNG(7), w, 1) }, math.Sqrt(2.0 / (rows + cols)), math.Sqrt(6.0 / (rows + cols)), ""},
		{"xavier normal gain 2", func(w *tensor.Tensor) { XavierNormal(tensor.NewRNG(8), w, 2) }, 2 * math.Sqrt(2.0/(rows+cols)), 0, ""},
		{"normal", func(w *tensor.Tensor) { Normal(tensor.NewRNG(9), w, 0, 0.02) }, 0.02, 0, ""},
		{"uniform", func(w *tensor.Tensor) { Uniform(tensor.NewRNG(10), w, -0.5, 0.5) }, 1 / math.Sqrt(12), 0.5, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			w := devEmpty(t, tensor.F32, rows, cols)
			c.init(w)
			mean, std := moments(t, w)
			check(t, math.Abs(std/c.std-1) < 0.03, "std %.5g, want %.5g within 3%%", std, c.std)
			check(t, math.Abs(mean) < 4*c.std/math.Sqrt(rows*cols), "mean %.3g is not ≈ 0", mean)
			if c.bound > 0 {
				for _, v := range testdevice.F64(t, w) {
					if math.Abs(v) > c.bound*(1+1e-6) {
						t.Fatalf("value %v outside ±%v", v, c.bound)
					}
				}
			}
		})
	}
}

func TestInitDeterministic(t *testing.T) {
	a, b := devEmpty(t, tensor.F32, 8, 5), devEmpty(t, tensor.F32, 8, 5)
	KaimingUniform(tensor.NewRNG(11), a, KaimingOptions{})
	KaimingUniform(tensor.NewRNG(11), b, KaimingOptions{})
	check(t, reflect.DeepEqual(testdevice.F32(t, a), testdevice.F32(t, b)), "same seed gave different values")
	KaimingUniform(tensor.NewRNG(12), b, KaimingOptions{})
	check(t, !reflect.DeepEqual(testdevice.F32(t, a), testdevice.F32(t, b)), "different seeds gave the same values")
}

// gram returns W·Wᵀ of w viewed as [rows, numel/rows], or Wᵀ·W when
// transpose is set (computed on the host in float64).
func gram(t testing.TB, w *tensor.Tensor, transpose bool) [][]float64 {
	t.Helper()
	rows := w.Dim(0)
	cols := w.Numel() / rows
	v := testdevice.F64(t, w)
	at := func(i, j int) float64 { return v[i*cols+j] }
	n, k := rows, cols
	if transpose {
		n, k = cols, rows
		at = func(i, j int) float64 { return v[j*cols+i] }
	}
	g := make([][]float64, n)
	for i := range g {
		g[i] = make([]float64, n)
		for j := range g[i] {
			for p := 0; p < k; p++ {
				g[i][j] += at(i, p) * at(j, p)
			}
		}
	}
	return g
}

func TestOrthogonal(t *testing.T) {
	cases := []struct {
		shape []int
		gain  float64
	}{
		{[]int{64, 128}, 1},    // wide: orthonormal rows
		{[]int{128, 64}, 1},    // tall: orthonormal columns
		{[]int{50, 50}, 2},     // square with gain
		{[]int{8, 3, 3, 3}, 1}, // conv weight: 8 rows of 27
		{[]int{1, 5}, 1},
	}
	for _, c := range cases {
		t.Run(tensor.ShapeString(c.shape), func(t *testing.T) {
			w := devEmpty(t, tensor.F64, c.shape...)
			Orthogonal(tensor.NewRNG(13), w, c.gain)
			rows := c.shape[0]
			g := gram(t, w, rows > w.Numel()/rows)
			worst := 0.0
			for i := range g {
				for j := range g[i] {
					want := 0.0
					if i == j {
						want = c.gain * c.gain
					}
					worst = math.Max(worst, math.Abs(g[i][j]-want))
				}
			}
			check(t, worst < 1e-10, "Gram matrix is off gain²·I by %.3g", worst)
		})
	}
	// F32: orthogonal to float32 rounding.
	w := devEmpty(t, tensor.F32, 32, 48)
	Orthogonal(tensor.NewRNG(14), w, 1)
	for i, row := range gram(t, w, false) {
		for j, v := range row {
			want := 0.0
			if i == j {
				want = 1
			}
			check(t, math.Abs(v-want) < 1e-5, "F32 WWᵀ[%d][%d] = %v", i, j, v)
		}
	}
}

func TestGainAndFans(t *testing.T) {
	gains := []struct {
		n    Nonlinearity
		a    float64
		want float64
	}{
		{NonlinearityLinear, 0, 1},
		{NonlinearitySigmoid, 0, 1},
		{NonlinearityTanh, 0, 5.0 / 3},
		{NonlinearityReLU, 0, math.Sqrt2},
		{NonlinearityLeakyReLU, 0, math.Sqrt2},
		{NonlinearityLeakyReLU, math.Sqrt(5), math.Sqrt(1.0 / 3)},
	}
	for _, g := range gains {
		check(t, math.Abs(Gain(g.n, g.a)-g.want) < 1e-15, "Gain(%d, %v) = %v, want %v", g.n, g.a, Gain(g.n, g.a), g.want)
	}
	fans := []struct {
		shape   []int
		in, out int
	}{
		{[]int{16, 8}, 8, 16},
		{[]int{4, 2, 3, 5}, 30, 60},
		{[]int{6, 1, 3, 3}, 9, 54},
	}
	for _, f := range fans {
		in, out := Fans(f.shape)
		check(t, in == f.in && out == f.out, "Fans(%v) = %d, %d, want %d, %d", f.shape, in, out, f.in, f.out)
	}
	defer func() { check(t, recover() != nil, "Fans of a vector did not panic") }()
	Fans([]int{3})
}

func TestDefaultLayerInit(t *testing.T) {
	rng := tensor.NewRNG(15)
	l := onDev(t, MustLinear(rng, LinearOptions{In: 100, Out: 300}))
	c := onDev(t, MustConv2d(rng, Conv2dOptions{InChannels: 8, OutChannels: 64, KernelH: 3, Groups: 2}))
	cases := []struct {
		name  string
		t     *tensor.Tensor
		bound float64
	}{
		{"linear weight", l.Weight.Value, 1 / math.Sqrt(100)},
		{"linear bias", l.Bias.Value, 1 / math.Sqrt(100)},
		{"conv weight", c.Weight.Value, 1 / math.Sqrt(4*9)},
		{"conv bias", c.Bias.Value, 1 / math.Sqrt(4*9)},
	}
	for _, cs := range cases {
		max := 0.0
		for _, v := range testdevice.F64(t, cs.t) {
			max = math.Max(max, math.Abs(v))
		}
		// U(±b) fills the range: the largest of n draws is close to b.
		check(t, max <= cs.bound && max > 0.9*cs.bound, "%s: max |w| %v, want just below %v", cs.name, max, cs.bound)
	}
	e := onDev(t, MustEmbedding(rng, EmbeddingOptions{Num: 200, Dim: 50}))
	_, std := moments(t, e.Weight.Value)
	check(t, math.Abs(std-1) < 0.03, "embedding std %v, want ≈ 1", std)
	bn := onDev(t, MustBatchNorm2d(BatchNorm2dOptions{Channels: 3}))
	f64 := func(x *tensor.Tensor) []float64 { return testdevice.F64(t, x) }
	check(t, reflect.DeepEqual(f64(bn.Weight.Value), []float64{1, 1, 1}) && reflect.DeepEqual(f64(bn.Bias.Value), []float64{0, 0, 0}), "BatchNorm affine init is not 1, 0")
	check(t, reflect.DeepEqual(f64(bn.RunningMean), []float64{0, 0, 0}) && reflect.DeepEqual(f64(bn.RunningVar), []float64{1, 1, 1}), "BatchNorm running stats init is not 0, 1")
}

// devEmpty allocates a zeroed tensor on the test device.
func devEmpty(t testing.TB, dt tensor.DType, shape ...int) *tensor.Tensor {
	t.Helper()
	x, err := tensor.EmptyOn(testdevice.Device(t), dt, shape...)
	noErr(t, err)
	return x
}

// TestInitOnDevice: every scheme fills a tensor on the sim device (no
// host accessor refuses it) with bitwise the values a CPU tensor of the
// same dtype and layout gets from the same seed, for contiguous tensors,
// strided views (the slow path, which must not change to the fast one)
// and BF16; Constant, Zeros and Ones fill through the backend.
func TestInitOnDevice(t *testing.T) {
	dev := tensor.Sim(3)
	schemes := []struct {
		name string
		f    func(w *tensor.Tensor)
	}{
		{"kaiming uniform", func(w *tensor.Tensor) { KaimingUniform(tensor.NewRNG(1), w, KaimingOptions{A: math.Sqrt(5)}) }},
		{"kaiming normal", func(w *tensor.Tensor) { KaimingNormal(tensor.NewRNG(2), w, KaimingOptions{}) }},
		{"xavier uniform", func(w *tensor.Tensor) { XavierUniform(tensor.NewRNG(3), w, 1) }},
		{"xavier normal", func(w *tensor.Tensor) { XavierNormal(tensor.NewRNG(4), w, 2) }},
		{"orthogonal", func(w *tensor.Tensor) { Orthogonal(tensor.NewRNG(5), w, 1) }},
		{"uniform", func(w *tensor.Tensor) { Uniform(tensor.NewRNG(6), w, -1, 1) }},
		{"normal", func(w *tensor.Tensor) { Normal(tensor.NewRNG(7), w, 0, 0.02) }},
		{"constant", func(w *tensor.Tensor) { Constant(w, 0.5) }},
		{"zeros", func(w *tensor.Tensor) { Ones(w); Zeros(w) }},
		{"ones", func(w *tensor.Tensor) { Ones(w) }},
	}
	layouts := []struct {
		name string
		dt   tensor.DType
		view func(x *tensor.Tensor) *tensor.Tensor // of a [6, 10] tensor
	}{
		{"f32", tensor.F32, func(x *tensor.Tensor) *tensor.Tensor { return x }},
		{"f64", tensor.F64, func(x *tensor.Tensor) *tensor.Tensor { return x }},
		{"bf16", tensor.BF16, func(x *tensor.Tensor) *tensor.Tensor { return x }},
		{"strided", tensor.F32, func(x *tensor.Tensor) *tensor.Tensor { return x.Narrow(1, 2, 5) }},
	}
	for _, s := range schemes {
		for _, l := range layouts {
			t.Run(s.name+"/"+l.name, func(t *testing.T) {
				host := tensor.Zeros(l.dt, 6, 10)
				s.f(l.view(host))
				onDev, err := tensor.Zeros(l.dt, 6, 10).ToDevice(dev)
				noErr(t, err)
				s.f(l.view(onDev))
				check(t, onDev.Device() == dev, "the tensor left the device")
				got, want := testdevice.Host(t, onDev).Float64s(), host.Float64s()
				for i := range want {
					if math.Float64bits(got[i]) != math.Float64bits(want[i]) {
						t.Fatalf("element %d: %v on %v, %v on the CPU", i, got[i], dev, want[i])
					}
				}
			})
		}
	}
	x, err := tensor.Zeros(tensor.I64, 4, 4).ToDevice(dev)
	noErr(t, err)
	before := tensor.HostSyncs(dev)
	func() {
		defer func() { check(t, recover() != nil, "init of an I64 device tensor did not panic") }()
		Uniform(tensor.NewRNG(1), x, 0, 1)
	}()
	check(t, tensor.HostSyncs(dev) == before, "init read the device back")
	check(t, reflect.DeepEqual(testdevice.Host(t, x).Float64s(), make([]float64, 16)), "a refused init wrote the tensor")
}
