package backendtest

import (
	"fmt"
	"math"
	"math/rand/v2"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/esper-go/esper/kernels"
	"github.com/esper-go/esper/tensor"
)

// Options says what a backend computes in. The zero value checks every
// float dtype on every method.
type Options struct {
	// Floats are the float dtypes the backend's float kernels take;
	// empty means F64, F32, BF16 and F16. A method is checked in the
	// dtypes it documents that are also here.
	Floats []tensor.DType
	// Narrow lists the methods that take fewer float dtypes than Floats
	// (the CUDA backend's accumulating index ops are F32 only), by method
	// name. A name that is no method is an error.
	Narrow map[string][]tensor.DType
	// Wide lists the methods that take float dtypes beyond Floats (the
	// CUDA backend's elementwise ops and Reduce take F64 too), by method
	// name. A name that is no method is an error.
	Wide map[string][]tensor.DType
	// NoCapture leaves out the captured replays (for a backend whose
	// BeginCapture always fails).
	NoCapture bool
	// Seed seeds the random inputs; 0 is a fixed default.
	Seed uint64
}

// RunAll checks b against the float64 references of every method of
// kernels.Backend and of every optional interface b implements, each in
// a subtest named for its method (or methods). A method's outputs start
// as NaN (so that an element left unwritten fails), its inputs are
// random with the edge cases of the op, and its results must be within
// a dtype-scaled tolerance of the reference. Unless o.NoCapture, every
// call is then also captured (BeginCapture, the call, EndCapture) over
// the same tensors reset to their state before it: nothing may change
// while capturing, and one Replay must give what the eager call gave,
// bit for bit (within the tolerance for the ops that add with atomics).
// RunAll sets the backend's matmul precision to Highest.
func RunAll(t *testing.T, b kernels.Backend, o Options) {
	t.Helper()
	run(t, b, o, nil)
}

// RunCases is RunAll restricted to the cases named (CaseNames' names, as
// "GATMean+GATMeanAct+GatherConcat"): for a backend setting that routes
// some methods to other kernels (the CUDA backend's switches), so that a
// test can check those methods again without the whole suite. A name
// that is no case fails t.
func RunCases(t *testing.T, b kernels.Backend, o Options, names ...string) {
	t.Helper()
	want := map[string]bool{}
	for _, n := range names {
		if !slices.Contains(CaseNames(), n) {
			t.Fatalf("backendtest: RunCases: %q is no case (CaseNames lists them)", n)
		}
		want[n] = true
	}
	run(t, b, o, want)
}

// run is RunAll over the cases named in only (nil: every case).
func run(t *testing.T, b kernels.Backend, o Options, only map[string]bool) {
	t.Helper()
	for field, m := range map[string]map[string][]tensor.DType{"Narrow": o.Narrow, "Wide": o.Wide} {
		for name := range m {
			if _, ok := methodSet()[name]; !ok {
				t.Fatalf("backendtest: Options.%s names %q, which is no method of kernels.Backend or its optional interfaces", field, name)
			}
		}
	}
	if len(o.Floats) == 0 {
		o.Floats = []tensor.DType{tensor.F64, tensor.F32, tensor.BF16, tensor.F16}
	}
	if o.Seed == 0 {
		o.Seed = 0x5eed
	}
	b.SetMatmulPrecision(kernels.Highest)
	bt := reflect.TypeOf(b)
	for i, c := range cases {
		if only != nil && !only[c.name()] {
			continue
		}
		t.Run(c.name(), func(t *testing.T) {
			if c.needs != nil && !bt.Implements(c.needs) {
				t.Skipf("%v does not implement kernels.%s", bt, c.needs.Name())
			}
			s := &suite{t: t, b: b, dev: b.Device(), o: o, rng: rand.New(rand.NewPCG(o.Seed, uint64(i)))}
			c.run(s)
		})
	}
}

// CaseNames returns the names of RunAll's subtests, in order: each
// case's methods joined by "+" (a script that runs some of them, as
// gpu_run.sh does with -test.run, checks its names against these).
func CaseNames() []string {
	out := make([]string, len(cases))
	for i, c := range cases {
		out[i] = c.name()
	}
	return out
}

// conformance is the check of one or more methods.
type conformance struct {
	methods []string     // the methods it checks
	needs   reflect.Type // the optional interface they belong to; nil for kernels.Backend
	run     func(s *suite)
}

func (c conformance) name() string { return strings.Join(c.methods, "+") }

// cases are the checks of every method, family by family.
var cases = slices.Concat(elementwiseCases, reduceCases, matmulCases, convCases, poolCases, softmaxCases,
	normCases, paramGradCases, indexCases, segmentCases, graphCases, graphGradCases, shapeCases, randomCases, optimCases, captureCases, streamCases,
	sequenceCases)

// of is the check of methods of kernels.Backend.
func of(run func(s *suite), methods ...string) conformance {
	return conformance{methods: methods, run: run}
}

// optional is the check of methods of the optional interface I.
func optional[I any](run func(s *suite), methods ...string) conformance {
	return conformance{methods: methods, needs: reflect.TypeFor[I](), run: run}
}

// optionals are the optional interfaces of package kernels RunAll checks
// when a backend implements them.
var optionals = []reflect.Type{
	reflect.TypeFor[kernels.ChannelAxpyer](),
	reflect.TypeFor[kernels.ScaleActAdder](),
	reflect.TypeFor[kernels.ConcatManyer](),
	reflect.TypeFor[kernels.ZeroManyer](),
	reflect.TypeFor[kernels.GradAccumulator](),
	reflect.TypeFor[kernels.LinearGradAccumulator](),
	reflect.TypeFor[kernels.LinearBackwardAdder](),
	reflect.TypeFor[kernels.MatMulsJoiner](),
	reflect.TypeFor[kernels.LinearActLayerNormer](),
	reflect.TypeFor[kernels.ConvAffineActer](),
	reflect.TypeFor[kernels.ConvAffineActPooler](),
	reflect.TypeFor[kernels.BatchNormReluer](),
	reflect.TypeFor[kernels.GroupNormReluer](),
	reflect.TypeFor[kernels.BatchNormReluPooler](),
	reflect.TypeFor[kernels.BatchNormEvalAffiner](),
	reflect.TypeFor[kernels.GraphAggregator](),
	reflect.TypeFor[kernels.GraphMultiAggregator](),
	reflect.TypeFor[kernels.GATMeanGradder](),
	reflect.TypeFor[kernels.GatherMeanGradder](),
	reflect.TypeFor[kernels.GatherSummer](),
	reflect.TypeFor[kernels.GatherSumsJoiner](),
	reflect.TypeFor[kernels.GATMeansJoiner](),
	reflect.TypeFor[kernels.LinearActLayerNormsJoiner](),
	reflect.TypeFor[kernels.ReluHeadser](),
	reflect.TypeFor[kernels.CrossEntropyCounter](),
	reflect.TypeFor[kernels.CrossEntropyGradCounter](),
	reflect.TypeFor[kernels.LinearCrossEntropyCounter](),
	reflect.TypeFor[kernels.LinearCESGDStepper](),
	reflect.TypeFor[kernels.SGDIncrementer](),
	reflect.TypeFor[kernels.GradClipper](),
	reflect.TypeFor[kernels.ParamGradAccumulator](),
	reflect.TypeFor[kernels.LaunchBounder](),
	reflect.TypeFor[kernels.ForeachStepper](),
	// The stream interfaces (stream.go): a backend's device, copies,
	// timers and staging, and a captured graph's Close.
	reflect.TypeFor[kernels.DeviceDescriber](),
	reflect.TypeFor[kernels.ByteCopier](),
	reflect.TypeFor[kernels.EventTimers](),
	reflect.TypeFor[kernels.EventTimer](),
	reflect.TypeFor[kernels.Stagers](),
	reflect.TypeFor[kernels.Stager](),
	reflect.TypeFor[kernels.InlineStager](),
	reflect.TypeFor[kernels.GraphCloser](),
	reflect.TypeFor[kernels.BlockSequencer](),
}

// methodSet is every method of kernels.Backend and of the optional
// interfaces.
func methodSet() map[string]bool {
	out := map[string]bool{}
	for _, it := range append([]reflect.Type{reflect.TypeFor[kernels.Backend]()}, optionals...) {
		for i := range it.NumMethod() {
			out[it.Method(i).Name] = true
		}
	}
	return out
}

// suite is one subtest's view of the backend under test.
type suite struct {
	t   *testing.T
	b   kernels.Backend
	dev tensor.Device
	o   Options
	rng *rand.Rand
	// edges counts graphEdges's calls: every other one sorts its edges
	// by destination and gives no order (the identity).
	edges int
}

// T is the tensor type of the backends.
type T = tensor.Tensor

// floats is the float dtypes method is checked in: those of want (all
// four when empty) that Options allows for it (Floats and the method's
// Wide, less what Narrow leaves out).
func (s *suite) floats(method string, want ...tensor.DType) []tensor.DType {
	if len(want) == 0 {
		want = []tensor.DType{tensor.F64, tensor.F32, tensor.BF16, tensor.F16}
	}
	var out []tensor.DType
	for _, d := range want {
		if !contains(s.o.Floats, d) && !contains(s.o.Wide[method], d) {
			continue
		}
		if n, ok := s.o.Narrow[method]; ok && !contains(n, d) {
			continue
		}
		out = append(out, d)
	}
	return out
}

func contains(ds []tensor.DType, d tensor.DType) bool {
	for _, e := range ds {
		if e == d {
			return true
		}
	}
	return false
}

// wideOf is the dtype of the statistics and other F32-or-F64 operands
// that go with a float dtype: F64 for F64, F32 otherwise.
func wideOf(d tensor.DType) tensor.DType {
	if d == tensor.F64 {
		return tensor.F64
	}
	return tensor.F32
}

// tol is the relative tolerance of dtype d against a float64 reference
// (scaled by the largest reference magnitude, at least 1).
func tol(d tensor.DType) float64 {
	switch d {
	case tensor.F64:
		return 1e-10
	case tensor.F32:
		return 2e-5
	case tensor.F16:
		return 4e-3
	}
	return 2e-2
}

// normals returns n standard normal values.
func (s *suite) normals(n int) []float64 {
	out := make([]float64, n)
	for i := range out {
		out[i] = s.rng.NormFloat64()
	}
	return out
}

// uniform returns n values uniform in [lo, hi).
func (s *suite) uniform(n int, lo, hi float64) []float64 {
	out := make([]float64, n)
	for i := range out {
		out[i] = lo + (hi-lo)*s.rng.Float64()
	}
	return out
}

// put copies vals (rounded to dtype d) to a new tensor of shape on the
// device and returns it with the values as stored (the reference's
// inputs).
func (s *suite) put(d tensor.DType, vals []float64, shape ...int) (*T, []float64) {
	s.t.Helper()
	h := tensor.FromFloat64s(d, vals, shape...)
	x, err := h.ToDevice(s.dev)
	if err != nil {
		s.t.Fatalf("copying %v %v to %v: %v", d, shape, s.dev, err)
	}
	return x, h.Float64s()
}

// in is put of n = numel(shape) normal values.
func (s *suite) in(d tensor.DType, shape ...int) (*T, []float64) {
	s.t.Helper()
	return s.put(d, s.normals(tensor.Numel(shape)), shape...)
}

// out is a device tensor of shape filled with poison: NaN for floats,
// -7777 for integers, so that an element a kernel leaves unwritten fails.
func (s *suite) out(d tensor.DType, shape ...int) *T {
	s.t.Helper()
	v := math.NaN()
	if !d.IsFloat() {
		v = -7777
	}
	vals := make([]float64, tensor.Numel(shape))
	for i := range vals {
		vals[i] = v
	}
	x, _ := s.put(d, vals, shape...)
	return x
}

// full is a device tensor of shape holding v.
func (s *suite) full(d tensor.DType, v float64, shape ...int) *T {
	s.t.Helper()
	vals := make([]float64, tensor.Numel(shape))
	for i := range vals {
		vals[i] = v
	}
	x, _ := s.put(d, vals, shape...)
	return x
}

// get waits for the backend and returns x's elements (any strides) in
// row-major order.
func (s *suite) get(x *T) []float64 {
	s.t.Helper()
	if err := s.b.Synchronize(); err != nil {
		s.t.Fatalf("Synchronize: %v", err)
	}
	if !x.Device().IsCPU() && !x.IsContiguous() {
		c := s.out(x.DType(), x.Shape()...)
		s.b.Copy(c, x)
		x = c
	}
	h, err := x.ToDevice(tensor.CPU)
	if err != nil {
		s.t.Fatalf("copying %v %v off %v: %v", x.DType(), x.Shape(), x.Device(), err)
	}
	return h.Float64s()
}

// close fails unless got is within rtol of want: |got − want| ≤
// rtol·max(1, max|want|) element by element, NaN where want is NaN, and
// infinities equal.
func (s *suite) close(what string, got, want []float64, rtol float64) {
	s.t.Helper()
	if msg := closeMsg(got, want, rtol); msg != "" {
		s.t.Errorf("%s: %s", what, msg)
	}
}

func closeMsg(got, want []float64, rtol float64) string {
	if len(got) != len(want) {
		return fmt.Sprintf("%d values, want %d", len(got), len(want))
	}
	scale := 1.0
	for _, w := range want {
		if a := math.Abs(w); a > scale && !math.IsInf(a, 0) {
			scale = a
		}
	}
	for i := range got {
		g, w := got[i], want[i]
		switch {
		case math.IsNaN(w) || math.IsNaN(g):
			if math.IsNaN(w) != math.IsNaN(g) {
				return fmt.Sprintf("element %d is %v, want %v", i, g, w)
			}
		case math.IsInf(w, 0) || math.IsInf(g, 0):
			if g != w {
				return fmt.Sprintf("element %d is %v, want %v", i, g, w)
			}
		case math.Abs(g-w) > rtol*scale:
			return fmt.Sprintf("element %d is %v, want %v (error %.3g, tolerance %.3g)", i, g, w, math.Abs(g-w), rtol*scale)
		}
	}
	return ""
}

// same fails unless got and want are equal bit for bit (NaN equal to
// NaN).
func same(t testing.TB, what string, got, want []float64) {
	t.Helper()
	if len(got) != len(want) {
		t.Errorf("%s: %d values, want %d", what, len(got), len(want))
		return
	}
	for i := range got {
		if math.Float64bits(got[i]) != math.Float64bits(want[i]) && !(got[i] != got[i] && want[i] != want[i]) {
			t.Errorf("%s: element %d is %v, want %v bit for bit", what, i, got[i], want[i])
			return
		}
	}
}

// call is one call of a method on prepared device tensors.
type call struct {
	what string
	// launch calls the method.
	launch func()
	// writes are the tensors the method writes (its outputs and the
	// state it updates in place), in the order check's verify sees them.
	writes []*T
	// atomic marks a call whose backend may add in no fixed order: its
	// captured replay is held to the reference, not to the eager call.
	atomic bool
	// declined, when set, reports that the eager call did nothing: an
	// optional fused method that reported false for these sizes, or an
	// addition of no terms (a backend may launch nothing for it). Its
	// capture then holds no launch, which is no error.
	declined func() bool
}

// check runs c eagerly and hands the written tensors' values to verify
// (which compares them with the reference); then, unless the options
// leave captures out, it resets the written tensors, captures c, checks
// that nothing changed while capturing and that one replay gives the
// eager values.
func (s *suite) check(c call, verify func(got [][]float64)) {
	s.t.Helper()
	before := make([]*T, len(c.writes))
	for i, w := range c.writes {
		before[i] = s.clone(w)
	}
	c.launch()
	eager := s.read(c.writes)
	verify(eager)
	if s.o.NoCapture || s.t.Failed() {
		return
	}
	for i, w := range c.writes {
		s.b.Copy(w, before[i])
	}
	initial := s.read(c.writes)
	if err := s.b.BeginCapture(); err != nil {
		s.t.Fatalf("%s: BeginCapture: %v", c.what, err)
	}
	if !s.b.Capturing() {
		s.t.Errorf("%s: Capturing() is false after BeginCapture", c.what)
	}
	func() {
		defer func() {
			if r := recover(); r != nil {
				s.b.EndCapture()
				panic(r)
			}
		}()
		c.launch()
	}()
	g, err := s.b.EndCapture()
	if err != nil {
		s.t.Fatalf("%s: EndCapture: %v", c.what, err)
	}
	if s.b.Capturing() {
		s.t.Errorf("%s: Capturing() is true after EndCapture", c.what)
	}
	for i, v := range s.read(c.writes) {
		same(s.t, fmt.Sprintf("%s: written tensor %d after capturing (nothing may run while capturing)", c.what, i), v, initial[i])
	}
	if g.Len() <= 0 && (c.declined == nil || !c.declined()) {
		s.t.Errorf("%s: the captured graph has %d launches", c.what, g.Len())
	}
	g.Replay()
	replay := s.read(c.writes)
	if c.atomic {
		verify(replay)
		return
	}
	for i := range replay {
		same(s.t, fmt.Sprintf("%s: written tensor %d, replayed against eager", c.what, i), replay[i], eager[i])
	}
}

// read returns the values of ts.
func (s *suite) read(ts []*T) [][]float64 {
	s.t.Helper()
	out := make([][]float64, len(ts))
	for i, x := range ts {
		out[i] = s.get(x)
	}
	return out
}

// clone is a contiguous device copy of x made by the backend.
func (s *suite) clone(x *T) *T {
	s.t.Helper()
	c, err := tensor.EmptyOn(s.dev, x.DType(), x.Shape()...)
	if err != nil {
		s.t.Fatalf("allocating %v %v on %v: %v", x.DType(), x.Shape(), s.dev, err)
	}
	s.b.Copy(c, x)
	return c
}

// panics fails unless f panics with a message naming op.
func (s *suite) panics(op string, f func()) {
	s.t.Helper()
	msg := func() (msg string) {
		defer func() {
			if r := recover(); r != nil {
				msg = fmt.Sprint(r)
			}
		}()
		f()
		return ""
	}()
	switch {
	case msg == "":
		s.t.Errorf("%s: misuse did not panic", op)
	case !strings.Contains(msg, op):
		s.t.Errorf("%s: misuse panicked with %q, which does not name the op", op, msg)
	}
}

// name joins parts for subtest and message names.
func name(parts ...any) string {
	s := make([]string, len(parts))
	for i, p := range parts {
		s[i] = fmt.Sprint(p)
	}
	return strings.Join(s, " ")
}

// prerequisite returns the backend as T, an interface that the check of
// another one, named by what, compares with, or fails the check: a
// backend that has the one must have T.
func prerequisite[T any](s *suite, what string) (T, bool) {
	b, ok := s.b.(T)
	if !ok {
		s.t.Errorf("%s: %s without %s", s.b.Name(), what, reflect.TypeFor[T]().Name())
	}
	return b, ok
}
