package blueprint

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/esper-go/esper/autograd"
	"github.com/esper-go/esper/internal/testdevice"
	"github.com/esper-go/esper/nn"
	"github.com/esper-go/esper/tensor"
)

// referenceWidth returns the width at which topology's estimates hold.
func referenceWidth(topology string) int {
	if topology == TopologyCNN {
		return CNNReferenceChannels
	}
	return MLPReferenceChannels
}

// forEachBlueprint runs f as a subtest for every built-in blueprint.
func forEachBlueprint(t *testing.T, f func(t *testing.T, spec Spec)) {
	for _, topo := range []string{TopologyCNN, TopologyMLP} {
		list, err := List(topo)
		if err != nil {
			t.Fatal(err)
		}
		for _, spec := range list {
			t.Run(spec.Key(), func(t *testing.T) { f(t, spec) })
		}
	}
}

// build is MustBuild moved to the test device (nn.To), as kasmina
// moves a seed it germinates to its host's device.
func build(t *testing.T, topology, name string, opts Options) nn.Module {
	t.Helper()
	m := MustBuild(topology, name, opts)
	if err := nn.To(m, testdevice.Device(t)); err != nil {
		t.Fatal(err)
	}
	return m
}

// forward runs m on a test-device copy of the host tensor x without
// recording a graph; the result is on the test device.
func forward(t *testing.T, m nn.Module, x *tensor.Tensor) *tensor.Tensor {
	t.Helper()
	var y *autograd.Var
	xd := testdevice.To(t, x)
	autograd.NoGrad(func() { y = m.Forward(autograd.Const(xd)) })
	return y.Value
}

func TestParamCountsAtReferenceWidth(t *testing.T) {
	// The exact counts: bias-free convolutions, GroupNorm/LayerNorm affine
	// 2C, Linear biases where the description says so, and C for the
	// out_scale of the branches that end in ReLU.
	want := map[string]int{
		"cnn:noop": 0, "cnn:norm": 129, "cnn:attention": 2128, "cnn:conv_small": 4288,
		"cnn:bottleneck": 4480, "cnn:depthwise": 4864, "cnn:conv_light": 37056, "cnn:conv_heavy": 74048,
		"mlp:noop": 0, "mlp:norm": 769, "mlp:lora": 6144, "mlp:lora_large": 24576,
		"mlp:mlp_small": 590976, "mlp:mlp": 1181568,
	}
	forEachBlueprint(t, func(t *testing.T, spec Spec) {
		m := build(t, spec.Topology, spec.Name, Options{Channels: referenceWidth(spec.Topology), RNG: testRNG()})
		got := ParamCount(m)
		if got != want[spec.Key()] {
			t.Errorf("ParamCount = %d, want %d", got, want[spec.Key()])
		}
		if diff := math.Abs(float64(got - spec.ParamEstimate)); diff > 0.25*float64(spec.ParamEstimate) {
			t.Errorf("ParamCount %d is not within 25%% of the estimate %d", got, spec.ParamEstimate)
		}
	})
}

func TestStateDictNames(t *testing.T) {
	want := map[string][]string{
		"cnn:noop":       nil,
		"cnn:norm":       {"scale", "gn.weight", "gn.bias"},
		"cnn:attention":  {"fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias"},
		"cnn:depthwise":  {"out_scale", "dw.weight", "pw.weight", "gn.weight", "gn.bias"},
		"cnn:bottleneck": {"down.weight", "conv.weight", "up.weight", "gn.weight", "gn.bias"},
		"cnn:conv_small": {"out_scale", "conv.weight", "gn.weight", "gn.bias"},
		"cnn:conv_light": {"out_scale", "conv.weight", "gn.weight", "gn.bias"},
		"cnn:conv_heavy": {"out_scale", "conv1.weight", "gn1.weight", "gn1.bias", "conv2.weight", "gn2.weight", "gn2.bias"},
		"mlp:noop":       nil,
		"mlp:norm":       {"scale", "ln.weight", "ln.bias"},
		"mlp:lora":       {"down.weight", "up.weight"},
		"mlp:lora_large": {"down.weight", "up.weight"},
		"mlp:mlp_small":  {"fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias"},
		"mlp:mlp":        {"fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias"},
	}
	forEachBlueprint(t, func(t *testing.T, spec Spec) {
		m := build(t, spec.Topology, spec.Name, Options{Channels: 8, RNG: testRNG()})
		var got []string
		for _, p := range m.NamedParameters() {
			got = append(got, p.Name)
			if p.Var.Name != p.Name {
				t.Errorf("Var of %s is named %q", p.Name, p.Var.Name)
			}
		}
		if !slices.Equal(got, want[spec.Key()]) {
			t.Errorf("NamedParameters = %v, want %v", got, want[spec.Key()])
		}
		if b := m.NamedBuffers(); len(b) != 0 {
			t.Errorf("unexpected buffers %v", b)
		}
		if s, ok := m.(*Seed); !ok || s.Blueprint() != spec.Key() || s.Channels() != 8 {
			t.Errorf("module %T does not identify as a %s seed of 8 channels", m, spec.Key())
		}
	})
}

func TestShapePreservedCNN(t *testing.T) {
	list, err := List(TopologyCNN)
	if err != nil {
		t.Fatal(err)
	}
	rng := testRNG()
	for _, c := range []int{1, 3, 8, 32, 64} {
		for _, spec := range list {
			m := build(t, TopologyCNN, spec.Name, Options{Channels: c, RNG: rng})
			for _, shape := range [][]int{{2, c, 8, 8}, {2, c, 16, 16}, {1, c, 32, 32}, {3, c, 7, 5}, {1, c, 1, 1}} {
				y := forward(t, m, tensor.Normal(rng, tensor.F32, 0, 1, shape...))
				if !tensor.SameShape(y.Shape(), shape) {
					t.Errorf("%s at %d channels: input %v, output %v", spec.Key(), c, shape, y.Shape())
				}
			}
		}
	}
}

func TestShapePreservedMLP(t *testing.T) {
	list, err := List(TopologyMLP)
	if err != nil {
		t.Fatal(err)
	}
	rng := testRNG()
	for _, c := range []int{1, 3, 7, 64, 384} {
		for _, spec := range list {
			m := build(t, TopologyMLP, spec.Name, Options{Channels: c, RNG: rng})
			for _, shape := range [][]int{{1, c}, {5, c}, {2, 3, c}} {
				y := forward(t, m, tensor.Normal(rng, tensor.F32, 0, 1, shape...))
				if !tensor.SameShape(y.Shape(), shape) {
					t.Errorf("%s at %d channels: input %v, output %v", spec.Key(), c, shape, y.Shape())
				}
			}
		}
	}
}

// testInput returns a random activation of topology at width c.
func testInput(topology string, c int, dt tensor.DType) *tensor.Tensor {
	if topology == TopologyCNN {
		return tensor.Normal(tensor.NewRNG(3), dt, 0, 1, 2, c, 6, 6)
	}
	return tensor.Normal(tensor.NewRNG(3), dt, 0, 1, 3, c)
}

// TestIdentityAtInit checks which seeds are exactly the identity when
// germinated: those whose table entry zero-initialises the last layer
// (or mixes with tanh(0)) without ZeroFinal, and every seed with a final
// affine layer with it, except the SE gate, which scales by σ(3).
func TestIdentityAtInit(t *testing.T) {
	identity := map[string]bool{
		"cnn:noop": true, "cnn:norm": true, "cnn:bottleneck": true, "cnn:conv_small": true,
		"mlp:noop": true, "mlp:norm": true, "mlp:lora": true, "mlp:lora_large": true,
		"mlp:mlp_small": true, "mlp:mlp": true,
	}
	forEachBlueprint(t, func(t *testing.T, spec Spec) {
		for _, zeroFinal := range []bool{false, true} {
			for _, dt := range []tensor.DType{tensor.F32, tensor.F64} {
				m := build(t, spec.Topology, spec.Name, Options{Channels: 8, RNG: testRNG(), ZeroFinal: zeroFinal, DType: dt})
				x := testInput(spec.Topology, 8, dt)
				y := forward(t, m, x)
				if y.DType() != dt {
					t.Errorf("ZeroFinal=%v %v: output dtype %v", zeroFinal, dt, y.DType())
				}
				switch {
				case spec.Key() == "cnn:attention":
					gate := 1 / (1 + math.Exp(-seGateBias))
					if d := maxAbsDiff(t, y, scaled(x, gate)); d > 1e-6 {
						t.Errorf("ZeroFinal=%v %v: |y − σ(3)·x| = %g", zeroFinal, dt, d)
					}
				case identity[spec.Key()] || zeroFinal:
					if !equalValues(t, y, x) {
						t.Errorf("ZeroFinal=%v %v: not the identity (max |y − x| = %g)", zeroFinal, dt, maxAbsDiff(t, y, x))
					}
				default:
					if maxAbsDiff(t, y, x) == 0 {
						t.Errorf("ZeroFinal=%v %v: randomly initialised seed is the identity", zeroFinal, dt)
					}
				}
			}
		}
	})
}

// TestZeroFinalKeepsEarlierLayers checks that ZeroFinal zeroes only the
// final affine layer.
func TestZeroFinalKeepsEarlierLayers(t *testing.T) {
	zeroed := map[string][]string{
		"cnn:attention":  {"fc2.weight"},
		"cnn:depthwise":  {"out_scale"},
		"cnn:bottleneck": {"up.weight"},
		"cnn:conv_small": {"out_scale"},
		"cnn:conv_light": {"out_scale"},
		"cnn:conv_heavy": {"out_scale"},
		"mlp:lora":       {"up.weight"},
		"mlp:lora_large": {"up.weight"},
		"mlp:mlp_small":  {"fc2.weight", "fc2.bias"},
		"mlp:mlp":        {"fc2.weight", "fc2.bias"},
	}
	forEachBlueprint(t, func(t *testing.T, spec Spec) {
		plain := build(t, spec.Topology, spec.Name, Options{Channels: 8, RNG: testRNG()}).NamedParameters()
		zero := build(t, spec.Topology, spec.Name, Options{Channels: 8, RNG: testRNG(), ZeroFinal: true}).NamedParameters()
		for i, p := range zero {
			if slices.Contains(zeroed[spec.Key()], p.Name) {
				if m := maxAbs(t, p.Var.Value); m != 0 {
					t.Errorf("%s: max |element| %g after ZeroFinal, want 0", p.Name, m)
				}
			} else if !equalValues(t, p.Var.Value, plain[i].Var.Value) {
				t.Errorf("%s changed by ZeroFinal", p.Name)
			}
		}
	})
}

func TestAttentionGateBias(t *testing.T) {
	for _, zeroFinal := range []bool{false, true} {
		m := build(t, TopologyCNN, "attention", Options{Channels: 8, RNG: testRNG(), ZeroFinal: zeroFinal})
		for _, p := range m.NamedParameters() {
			if p.Name == "fc2.bias" {
				for _, v := range testdevice.F64(t, p.Var.Value) {
					if v != seGateBias {
						t.Fatalf("ZeroFinal=%v: fc2.bias element %g, want %g", zeroFinal, v, seGateBias)
					}
				}
			}
		}
	}
}

func TestDTypeOfParameters(t *testing.T) {
	forEachBlueprint(t, func(t *testing.T, spec Spec) {
		for _, dt := range []tensor.DType{0, tensor.F32, tensor.F64} {
			m := build(t, spec.Topology, spec.Name, Options{Channels: 4, RNG: testRNG(), DType: dt})
			want := dt
			if want == 0 {
				want = tensor.F32
			}
			for _, p := range m.NamedParameters() {
				if p.Var.DType() != want {
					t.Errorf("DType %v: %s is %v", dt, p.Name, p.Var.DType())
				}
			}
		}
	})
}

func TestSeedForwardRejectsWrongLayout(t *testing.T) {
	tests := []struct {
		topology string
		shape    []int
		want     string
	}{
		{TopologyCNN, []int{2, 4, 8}, "want [N 8 H W]"},
		{TopologyCNN, []int{2, 4, 8, 8}, "want [N 8 H W]"},
		{TopologyMLP, []int{2, 4}, "want [... 8]"},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprint(tt.topology, tt.shape), func(t *testing.T) {
			// noop would otherwise pass any shape through silently.
			m := build(t, tt.topology, "noop", Options{Channels: 8, RNG: testRNG()})
			defer func() {
				r := recover()
				if r == nil || !strings.Contains(fmt.Sprint(r), tt.want) || !strings.Contains(fmt.Sprint(r), tt.topology+":noop") {
					t.Errorf("panic %v, want one naming the seed and %q", r, tt.want)
				}
			}()
			m.Forward(autograd.Const(testdevice.To(t, tensor.Zeros(tensor.F32, tt.shape...))))
		})
	}
}

func TestTrainingModeSwitches(t *testing.T) {
	m := build(t, TopologyCNN, "conv_heavy", Options{Channels: 8, RNG: testRNG()})
	nn.Eval(m)
	for _, ch := range m.(*Seed).Children() {
		if ch.Module.Training() {
			t.Errorf("%s still in training mode after Eval", ch.Name)
		}
	}
	nn.Train(m)
	if !m.Training() {
		t.Error("not in training mode after Train")
	}
}

func TestNumGroups(t *testing.T) {
	tests := []struct{ channels, want int }{
		{1, 1}, {2, 2}, {3, 1}, {7, 1}, {8, 8}, {12, 4}, {16, 1}, {17, 1}, {24, 1},
		{32, 2}, {48, 2}, {64, 4}, {128, 8}, {256, 16}, {512, 32}, {1024, 32},
	}
	for _, tt := range tests {
		if got := NumGroups(tt.channels); got != tt.want {
			t.Errorf("NumGroups(%d) = %d, want %d", tt.channels, got, tt.want)
		}
	}
}

// maxAbs returns the largest |element| of x (of any device).
func maxAbs(t *testing.T, x *tensor.Tensor) float64 {
	t.Helper()
	m := 0.0
	for _, v := range testdevice.F64(t, x) {
		m = math.Max(m, math.Abs(v))
	}
	return m
}

// maxAbsDiff returns the largest |a − b| over the elements (of any
// device).
func maxAbsDiff(t *testing.T, a, b *tensor.Tensor) float64 {
	t.Helper()
	av, bv := testdevice.F64(t, a), testdevice.F64(t, b)
	m := 0.0
	for i := range av {
		m = math.Max(m, math.Abs(av[i]-bv[i]))
	}
	return m
}

// scaled returns s·x for a host tensor x.
func scaled(x *tensor.Tensor, s float64) *tensor.Tensor {
	v := x.Float64s()
	for i := range v {
		v[i] *= s
	}
	return tensor.FromFloat64s(x.DType(), v, x.Shape()...)
}
