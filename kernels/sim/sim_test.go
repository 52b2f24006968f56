package sim_test

import (
	"bytes"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/esper-go/esper/autograd"
	"github.com/esper-go/esper/kernels"
	"github.com/esper-go/esper/kernels/backendtest"
	"github.com/esper-go/esper/kernels/cpu"
	"github.com/esper-go/esper/kernels/sim"
	"github.com/esper-go/esper/tensor"
)

// randn returns a CPU tensor of normal draws.
func randn(seed uint64, shape ...int) *tensor.Tensor {
	t := tensor.Empty(tensor.F32, shape...)
	rng := tensor.NewRNG(seed)
	for i := range t.F32() {
		t.F32()[i] = float32(rng.NormFloat64())
	}
	return t
}

func toSim(t *testing.T, x *tensor.Tensor, dev tensor.Device) *tensor.Tensor {
	t.Helper()
	d, err := x.ToDevice(dev)
	require.NoError(t, err)
	return d
}

func toHost(t *testing.T, x *tensor.Tensor) []float32 {
	t.Helper()
	h, err := x.ToDevice(tensor.CPU)
	require.NoError(t, err)
	return h.F32()
}

// step is a small training computation through autograd: a linear layer,
// ReLU, another, cross-entropy, backward. It returns the loss and the
// gradients.
func step(t *testing.T, dev tensor.Device) (loss float32, grads [][]float32) {
	put := func(x *tensor.Tensor) *tensor.Tensor {
		if dev.IsCPU() {
			return x
		}
		return toSim(t, x, dev)
	}
	x := autograd.Const(put(randn(1, 8, 5)))
	w1, b1 := autograd.Param(put(randn(2, 7, 5))), autograd.Param(put(randn(3, 7)))
	w2, b2 := autograd.Param(put(randn(4, 3, 7))), autograd.Param(put(randn(5, 3)))
	y := tensor.Empty(tensor.I64, 8)
	for i := range y.I64() {
		y.I64()[i] = int64(i % 3)
	}
	h := autograd.Relu(autograd.Linear(x, w1, b1))
	l := autograd.CrossEntropy(autograd.Linear(h, w2, b2), put(y), kernels.CrossEntropyParams{})
	autograd.Backward(l)
	read := func(v *tensor.Tensor) []float32 {
		if dev.IsCPU() {
			return append([]float32(nil), v.F32()...)
		}
		return toHost(t, v)
	}
	for _, p := range []*autograd.Var{w1, b1, w2, b2} {
		grads = append(grads, read(p.Grad))
	}
	return read(l.Value)[0], grads
}

// TestTrainingStepBitwiseCPU: a forward and backward pass on sim computes
// bitwise what the CPU computes (the same kernels), reading the results
// costs one host sync each, and the step itself none.
func TestTrainingStepBitwiseCPU(t *testing.T) {
	wantLoss, wantGrads := step(t, tensor.CPU)
	dev := tensor.Sim(1)
	before := tensor.HostSyncs(dev)
	gotLoss, gotGrads := step(t, dev)
	assert.Equal(t, wantLoss, gotLoss)
	assert.Equal(t, wantGrads, gotGrads)
	assert.Equal(t, uint64(5), tensor.HostSyncs(dev)-before, "one sync per result read, none in the step")
}

// TestMixedDevicesPanic: an op on tensors of two devices (sim and the
// CPU, or sim:0 and sim:1) is refused naming both.
func TestMixedDevicesPanic(t *testing.T) {
	a := toSim(t, randn(1, 2, 3), tensor.Sim(0))
	b := toSim(t, randn(2, 2, 3), tensor.Sim(1))
	out, err := tensor.EmptyOn(tensor.Sim(0), tensor.F32, 2, 3)
	require.NoError(t, err)
	be := sim.Default()
	assert.PanicsWithValue(t, "kernels/sim: Binary: tensors on sim:0 and sim:1 in one op", func() { be.Binary(kernels.Add, out, a, b) })
	assert.Panics(t, func() { be.Binary(kernels.Add, out, a, randn(3, 2, 3)) })
	msg := func() (m string) {
		defer func() { m, _ = recover().(string) }()
		be.Binary(kernels.Add, out, a, randn(3, 2, 3))
		return ""
	}()
	assert.Contains(t, msg, "cpu")
}

// TestOptionalInterfacesMatchCPU: the sim backend offers exactly the
// optional interfaces the CPU backend offers — every interface declared
// in package kernels is listed here (a new one fails the test until it
// is), and for each, sim implements it if and only if the CPU does —
// but for the device-only ones (simOnly), which sim implements and the
// CPU does not: kernels.BlockSequencer and the joins (GatherSumsJoiner,
// GATMeansJoiner, LinearActLayerNormsJoiner, ReluHeadser), whose use sim
// checks as a device would, while a CPU launch is a call with nothing to
// join.
func TestOptionalInterfacesMatchCPU(t *testing.T) {
	optional := map[string]reflect.Type{
		"ConvAffineActer":           reflect.TypeFor[kernels.ConvAffineActer](),
		"ConvAffineActPooler":       reflect.TypeFor[kernels.ConvAffineActPooler](),
		"BatchNormReluer":           reflect.TypeFor[kernels.BatchNormReluer](),
		"GroupNormReluer":           reflect.TypeFor[kernels.GroupNormReluer](),
		"BatchNormReluPooler":       reflect.TypeFor[kernels.BatchNormReluPooler](),
		"BatchNormEvalAffiner":      reflect.TypeFor[kernels.BatchNormEvalAffiner](),
		"GraphAggregator":           reflect.TypeFor[kernels.GraphAggregator](),
		"GraphMultiAggregator":      reflect.TypeFor[kernels.GraphMultiAggregator](),
		"GatherSummer":              reflect.TypeFor[kernels.GatherSummer](),
		"LinearBackwardAdder":       reflect.TypeFor[kernels.LinearBackwardAdder](),
		"LinearActLayerNormer":      reflect.TypeFor[kernels.LinearActLayerNormer](),
		"CrossEntropyCounter":       reflect.TypeFor[kernels.CrossEntropyCounter](),
		"CrossEntropyGradCounter":   reflect.TypeFor[kernels.CrossEntropyGradCounter](),
		"LinearCrossEntropyCounter": reflect.TypeFor[kernels.LinearCrossEntropyCounter](),
		"LinearCESGDStepper":        reflect.TypeFor[kernels.LinearCESGDStepper](),
		"SGDIncrementer":            reflect.TypeFor[kernels.SGDIncrementer](),
		"ParamGradAccumulator":      reflect.TypeFor[kernels.ParamGradAccumulator](),
		"LaunchBounder":             reflect.TypeFor[kernels.LaunchBounder](),
		"GradAccumulator":           reflect.TypeFor[kernels.GradAccumulator](),
		"GradClipper":               reflect.TypeFor[kernels.GradClipper](),
		"LinearGradAccumulator":     reflect.TypeFor[kernels.LinearGradAccumulator](),
		"ChannelAxpyer":             reflect.TypeFor[kernels.ChannelAxpyer](),
		"ScaleActAdder":             reflect.TypeFor[kernels.ScaleActAdder](),
		"ConcatManyer":              reflect.TypeFor[kernels.ConcatManyer](),
		"ZeroManyer":                reflect.TypeFor[kernels.ZeroManyer](),
		"ForeachStepper":            reflect.TypeFor[kernels.ForeachStepper](),
		"DeviceDescriber":           reflect.TypeFor[kernels.DeviceDescriber](),
		"ByteCopier":                reflect.TypeFor[kernels.ByteCopier](),
		"EventTimers":               reflect.TypeFor[kernels.EventTimers](),
		"EventTimer":                reflect.TypeFor[kernels.EventTimer](),
		"Stagers":                   reflect.TypeFor[kernels.Stagers](),
		"Stager":                    reflect.TypeFor[kernels.Stager](),
		"InlineStager":              reflect.TypeFor[kernels.InlineStager](),
		"GraphCloser":               reflect.TypeFor[kernels.GraphCloser](),
		"BlockSequencer":            reflect.TypeFor[kernels.BlockSequencer](),
		"GatherSumsJoiner":          reflect.TypeFor[kernels.GatherSumsJoiner](),
		"GATMeansJoiner":            reflect.TypeFor[kernels.GATMeansJoiner](),
		"LinearActLayerNormsJoiner": reflect.TypeFor[kernels.LinearActLayerNormsJoiner](),
		"ReluHeadser":               reflect.TypeFor[kernels.ReluHeadser](),
		"MatMulsJoiner":             reflect.TypeFor[kernels.MatMulsJoiner](),
		"GATMeanGradder":            reflect.TypeFor[kernels.GATMeanGradder](),
		"GatherMeanGradder":         reflect.TypeFor[kernels.GatherMeanGradder](),
	}
	simOnly := map[string]bool{"BlockSequencer": true, "GatherSumsJoiner": true, "GATMeansJoiner": true, "LinearActLayerNormsJoiner": true,
		"ReluHeadser": true, "LaunchBounder": true, "MatMulsJoiner": true}
	names, embedded := kernelInterfaces(t)
	for _, name := range names {
		if name == "Backend" || name == "Graph" || embedded[name] {
			continue // not optional: every backend has them
		}
		it, ok := optional[name]
		if !assert.True(t, ok, "kernels.%s is not listed in this test", name) {
			continue
		}
		c := reflect.TypeOf(cpu.Default()).Implements(it)
		s := reflect.TypeOf(sim.Default()).Implements(it)
		if simOnly[name] {
			assert.True(t, s && !c, "kernels.%s: device-only, yet the CPU implements it %v, sim %v", name, c, s)
			continue
		}
		assert.Equal(t, c, s, "kernels.%s: the CPU implements it %v, sim %v", name, c, s)
	}
}

// kernelInterfaces returns the names of the exported interfaces declared
// in package kernels, and those that Backend embeds.
func kernelInterfaces(t *testing.T) ([]string, map[string]bool) {
	fset := token.NewFileSet()
	pkgs, err := parser.ParseDir(fset, "..", func(fi os.FileInfo) bool { return !strings.HasSuffix(fi.Name(), "_test.go") }, 0)
	require.NoError(t, err)
	var names []string
	embedded := map[string]bool{}
	for _, f := range pkgs["kernels"].Files {
		for _, d := range f.Decls {
			if gd, ok := d.(*ast.GenDecl); ok && gd.Tok == token.TYPE {
				for _, sp := range gd.Specs {
					ts := sp.(*ast.TypeSpec)
					it, ok := ts.Type.(*ast.InterfaceType)
					if !ok || !ts.Name.IsExported() {
						continue
					}
					names = append(names, ts.Name.Name)
					if ts.Name.Name == "Backend" {
						for _, m := range it.Methods.List {
							if id, ok := m.Type.(*ast.Ident); ok && len(m.Names) == 0 {
								embedded[id.Name] = true
							}
						}
					}
				}
			}
		}
	}
	require.NotEmpty(t, names)
	return names, embedded
}

// TestGeneratedMethodsUpToDate: methods.go is what gen.go writes from the
// current interfaces (run go generate ./kernels/sim after changing one).
func TestGeneratedMethodsUpToDate(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the generator (go run)")
	}
	dir := t.TempDir()
	src, err := os.ReadFile("gen.go")
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "gen.go"), src, 0o644))
	abs, err := filepath.Abs("..")
	require.NoError(t, err)
	cmd := exec.Command("go", "run", "gen.go", "-kernels", abs)
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "%s", out)
	want, err := os.ReadFile(filepath.Join(dir, "methods.go"))
	require.NoError(t, err)
	got, err := os.ReadFile("methods.go")
	require.NoError(t, err)
	assert.True(t, bytes.Equal(want, got), "methods.go is stale: run go generate ./kernels/sim")
}

// TestConformance runs the backends' conformance suite on sim: every
// method and optional interface in every float dtype, eager and
// captured, with every operand a sim tensor.
func TestConformance(t *testing.T) {
	backendtest.RunAll(t, sim.Default(), backendtest.Options{})
}

// TestJoinIsOneLaunchOfAGraph: a join (here LinearActLayerNorms of three
// encoders) captured on sim is one launch of the graph, as on a device,
// and a replay writes what the eager join wrote; with SetLaunchBound on,
// sim answers LaunchBound as a GPU does.
func TestJoinIsOneLaunchOfAGraph(t *testing.T) {
	b := sim.Default()
	dev := tensor.Sim(0)
	on := func(shape ...int) *tensor.Tensor {
		h, err := tensor.Normal(tensor.NewRNG(uint64(len(shape)*7+shape[0])), tensor.F32, 0, 1, shape...).ToDevice(dev)
		require.NoError(t, err)
		return h
	}
	var calls []kernels.LinearActLNCall
	for i, sh := range [][3]int{{4, 7, 6}, {5, 3, 6}, {2, 5, 6}} {
		m, k, n := sh[0], sh[1], sh[2]
		c := kernels.LinearActLNCall{Y: on(m, n), X: on(m, k), W: on(n, k), Act: kernels.GeluErf, Eps: 1e-5}
		if i != 1 {
			c.B, c.G, c.S = on(n), on(n), on(n)
		}
		calls = append(calls, c)
	}
	read := func() [][]float32 {
		var out [][]float32
		for _, c := range calls {
			h, err := c.Y.ToDevice(tensor.CPU)
			require.NoError(t, err)
			out = append(out, h.F32())
		}
		return out
	}
	require.True(t, b.LinearActLayerNorms(calls))
	eager := read()
	require.NoError(t, b.BeginCapture())
	require.True(t, b.LinearActLayerNorms(calls))
	g, err := b.EndCapture()
	require.NoError(t, err)
	require.Equal(t, 1, g.Len(), "the join is one launch")
	for _, c := range calls {
		b.Fill(c.Y, 0)
	}
	g.Replay()
	require.Equal(t, eager, read(), "the replay writes what the eager join wrote")

	t.Cleanup(func() { b.SetLaunchBound(false) })
	require.False(t, b.LaunchBound(), "off by default")
	b.SetLaunchBound(true)
	require.True(t, b.LaunchBound())
}

// TestRunCasesOnSim: backendtest.RunCases runs the cases it names — the
// GAT ones the CUDA backend's TestGATWarpsOnCUDA names, which sim has
// both interfaces for, so that their checks run here — and the names are
// conformance cases (RunCases fails a test on a name that is not).
func TestRunCasesOnSim(t *testing.T) {
	names := []string{"GATMean+GATMeanAct+GatherConcat", "GATMeansAct"}
	for _, n := range names {
		require.Contains(t, backendtest.CaseNames(), n)
	}
	backendtest.RunCases(t, sim.Default(), backendtest.Options{}, names...)
}
