package blueprint

import (
	"errors"
	"math"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"

	"github.com/esper-go/esper/autograd"
	"github.com/esper-go/esper/internal/testdevice"
	"github.com/esper-go/esper/kernels"
	"github.com/esper-go/esper/nn"
	"github.com/esper-go/esper/tensor"
)

func testRNG() *rand.Rand { return tensor.NewRNG(42) }

func TestBuildValidatesOptions(t *testing.T) {
	tests := []struct {
		name string
		opts Options
		want string
	}{
		{"zero channels", Options{RNG: testRNG()}, "Channels must be positive, got 0"},
		{"negative channels", Options{Channels: -3, RNG: testRNG()}, "Channels must be positive, got -3"},
		{"nil rng", Options{Channels: 8}, "RNG is required"},
		{"integer dtype", Options{Channels: 8, RNG: testRNG(), DType: tensor.I32}, "not a floating-point type"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Build(TopologyCNN, "conv_light", tt.opts)
			if !errors.Is(err, ErrOptions) {
				t.Fatalf("Build = %v, want ErrOptions", err)
			}
			if !strings.Contains(err.Error(), tt.want) || !strings.Contains(err.Error(), "cnn:conv_light") {
				t.Errorf("error %q does not name the blueprint and %q", err, tt.want)
			}
		})
	}
}

// shapeBreaker is a custom seed whose forward is supplied by the test.
func shapeBreaker(f func(x *autograd.Var) *autograd.Var) Factory {
	return func(o Options) (nn.Module, error) {
		s := newSeed(TopologyCNN, "broken", o.Channels)
		s.forward = f
		return s, nil
	}
}

// poolHalf halves the spatial size: a seed that is not shape-preserving.
var poolHalf = kernels.Pool2dParams{KernelH: 2, KernelW: 2, StrideH: 2, StrideW: 2}

func TestBuildProbeRejectsBrokenSeeds(t *testing.T) {
	tests := []struct {
		name    string
		forward func(x *autograd.Var) *autograd.Var
		want    string
	}{
		{"shape", func(x *autograd.Var) *autograd.Var {
			return autograd.MaxPool2d(x, poolHalf)
		}, "output shape [1 3 1 1]"},
		{"dtype", func(x *autograd.Var) *autograd.Var { return autograd.Cast(x, tensor.F64) }, "output dtype f64"},
		{"panic", func(x *autograd.Var) *autograd.Var { panic("boom") }, "panicked: boom"},
		{"nan", func(x *autograd.Var) *autograd.Var { return autograd.Log(autograd.MulScalar(autograd.Abs(x), -1)) }, "not finite"},
		{"nil", func(x *autograd.Var) *autograd.Var { return nil }, "returned nil"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			name := "broken_" + tt.name
			registerForTest(t, Spec{Topology: TopologyCNN, Name: name, ParamEstimate: 1, New: shapeBreaker(tt.forward)})
			_, err := Build(TopologyCNN, name, Options{Channels: 3, RNG: testRNG()})
			if !errors.Is(err, ErrProbe) {
				t.Fatalf("Build = %v, want ErrProbe", err)
			}
			if !strings.Contains(err.Error(), "cnn:"+name) || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error %q does not name the blueprint and %q", err, tt.want)
			}
		})
	}
}

func TestBuildFactoryErrors(t *testing.T) {
	registerForTest(t, Spec{Topology: TopologyMLP, Name: "fails", New: func(Options) (nn.Module, error) {
		return nil, errors.New("no luck")
	}})
	registerForTest(t, Spec{Topology: TopologyMLP, Name: "nil_module", New: func(Options) (nn.Module, error) {
		return nil, nil
	}})
	if _, err := Build(TopologyMLP, "fails", Options{Channels: 4, RNG: testRNG()}); err == nil || !strings.Contains(err.Error(), "mlp:fails: no luck") {
		t.Errorf("Build(fails) = %v", err)
	}
	if _, err := Build(TopologyMLP, "nil_module", Options{Channels: 4, RNG: testRNG()}); err == nil || !strings.Contains(err.Error(), "nil module") {
		t.Errorf("Build(nil_module) = %v", err)
	}
}

func TestBuildLeavesModuleTrainableAndRecordsNoGraph(t *testing.T) {
	before := autograd.ReadStats()
	m := MustBuild(TopologyCNN, "conv_heavy", Options{Channels: 8, RNG: testRNG()})
	if d := autograd.ReadStats().NodesCreated - before.NodesCreated; d != 0 {
		t.Errorf("Build recorded %d graph nodes", d)
	}
	if !m.Training() {
		t.Error("module is in evaluation mode after Build")
	}
	for _, p := range m.NamedParameters() {
		if !p.Var.RequiresGrad() {
			t.Errorf("%s does not require grad after Build", p.Name)
		}
	}
	if !autograd.GradEnabled() {
		t.Error("grad mode off after Build")
	}
}

// TestBuildDeterministic checks that the probe draws nothing from the
// caller's RNG: two seeds from equal RNGs are equal, and so are the next
// draws.
func TestBuildDeterministic(t *testing.T) {
	r1, r2 := tensor.NewRNG(7), tensor.NewRNG(7)
	a := MustBuild(TopologyCNN, "conv_light", Options{Channels: 8, RNG: r1})
	spec, _ := Lookup(TopologyCNN, "conv_light")
	b, err := spec.New(Options{Channels: 8, RNG: r2, DType: tensor.F32}) // no probe
	if err != nil {
		t.Fatal(err)
	}
	pa, pb := a.NamedParameters(), b.NamedParameters()
	for i := range pa {
		if !equalValues(t, pa[i].Var.Value, pb[i].Var.Value) {
			t.Errorf("%s differs between builds from equal RNGs", pa[i].Name)
		}
	}
	if r1.Uint64() != r2.Uint64() {
		t.Error("the probe drew from the caller's RNG")
	}
}

func TestBuildConcurrent(t *testing.T) {
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	for i := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			name := []string{"conv_light", "depthwise", "attention", "bottleneck"}[i%4]
			_, err := Build(TopologyCNN, name, Options{Channels: 16, RNG: tensor.NewRNG(uint64(i))})
			errs <- err
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Error(err)
		}
	}
}

func TestParamCount(t *testing.T) {
	m := MustBuild(TopologyMLP, "lora", Options{Channels: 10, RNG: testRNG()})
	if got, want := ParamCount(m), 2*10*loraRank; got != want {
		t.Errorf("ParamCount = %d, want %d", got, want)
	}
	if got := ParamCount(nn.NewSequential()); got != 0 {
		t.Errorf("ParamCount(empty) = %d", got)
	}
}

// equalValues reports whether a and b (of any device) hold the same
// elements.
func equalValues(t *testing.T, a, b *tensor.Tensor) bool {
	t.Helper()
	if !tensor.SameShape(a.Shape(), b.Shape()) {
		return false
	}
	av, bv := testdevice.F64(t, a), testdevice.F64(t, b)
	for i := range av {
		if av[i] != bv[i] && !(math.IsNaN(av[i]) && math.IsNaN(bv[i])) {
			return false
		}
	}
	return true
}

// TestBuildUnderAutocast checks that a germination while some goroutine
// holds the process-wide autocast mode still succeeds.
func TestBuildUnderAutocast(t *testing.T) {
	var err error
	autograd.Autocast(tensor.BF16, func() {
		for _, name := range []string{"conv_light", "attention", "depthwise"} {
			if _, err = Build(TopologyCNN, name, Options{Channels: 8, RNG: testRNG()}); err != nil {
				return
			}
		}
		_, err = Build(TopologyMLP, "mlp", Options{Channels: 8, RNG: testRNG()})
	})
	if err != nil {
		t.Error(err)
	}
}
