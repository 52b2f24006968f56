package nn

import (
	"errors"
	"math"
	"path/filepath"
	"strings"
	"testing"

	"github.com/esper-go/esper/internal/testdevice"
	"github.com/esper-go/esper/tensor"
	"github.com/esper-go/esper/tensor/safetensors"
)

// The tests compute on testdevice.Device (the CPU, or the device
// ESPER_TEST_DEVICE names): modules are built on the CPU and moved there
// with onDev, inputs copied there with testdevice.To, and results read
// back only through testdevice's explicit copies.

// onDev moves m to the test device and returns it.
func onDev[M Module](t testing.TB, m M) M {
	t.Helper()
	noErr(t, To(m, testdevice.Device(t)))
	return m
}

// devDict returns copies of sd's tensors on the test device.
func devDict(t testing.TB, sd map[string]*tensor.Tensor) map[string]*tensor.Tensor {
	t.Helper()
	out := make(map[string]*tensor.Tensor, len(sd))
	for k, v := range sd {
		out[k] = testdevice.To(t, v)
	}
	return out
}

// at reads element idx of x (a host copy of x on a device).
func at(t testing.TB, x *tensor.Tensor, idx ...int) float64 {
	t.Helper()
	return testdevice.Host(t, x).At(idx...)
}

// f32Tol is the per-tensor relative tolerance of the PyTorch parity tests:
// max|got−want| / max(max|want|, tiny).
const f32Tol = 1e-5

// readFixture loads one of the PyTorch reference files.
func readFixture(t *testing.T, name string) *safetensors.File {
	t.Helper()
	f, err := safetensors.ReadFile(filepath.Join("..", "testdata", "fixtures", name))
	noErr(t, err)
	return f
}

// fixture returns tensor key of f, failing the test when absent.
func fixture(t *testing.T, f *safetensors.File, key string) *tensor.Tensor {
	t.Helper()
	v, ok := f.Tensors[key]
	check(t, ok, "fixture has no tensor %q", key)
	return v
}

// withPrefix returns the tensors of f whose names start with prefix, with
// the prefix removed.
func withPrefix(f *safetensors.File, prefix string) map[string]*tensor.Tensor {
	out := map[string]*tensor.Tensor{}
	for k, v := range f.Tensors {
		if strings.HasPrefix(k, prefix) {
			out[strings.TrimPrefix(k, prefix)] = v
		}
	}
	return out
}

// relErr is max|got−want| / max(max|want|, tiny), and +Inf when the shapes
// differ; either tensor may be on the test device.
func relErr(t testing.TB, got, want *tensor.Tensor) float64 {
	t.Helper()
	if got == nil || !tensor.SameShape(got.Shape(), want.Shape()) {
		return math.Inf(1)
	}
	g, w := testdevice.F64(t, got), testdevice.F64(t, want)
	var diff, scale float64
	for i := range w {
		diff = math.Max(diff, math.Abs(g[i]-w[i]))
		scale = math.Max(scale, math.Abs(w[i]))
		if math.IsNaN(g[i]) {
			return math.Inf(1)
		}
	}
	return diff / math.Max(scale, 1e-30)
}

// parity collects per-tensor relative errors of one fixture and checks
// them against f32Tol, logging the worst.
type parity struct {
	t        *testing.T
	worst    float64
	worstKey string
}

func newParity(t *testing.T) *parity { return &parity{t: t} }

func (p *parity) check(key string, got, want *tensor.Tensor) {
	p.t.Helper()
	e := relErr(p.t, got, want)
	if e > p.worst || p.worstKey == "" {
		p.worst, p.worstKey = e, key
	}
	if got == nil {
		p.t.Errorf("%s: no value (want shape %v)", key, want.Shape())
		return
	}
	if e > f32Tol {
		p.t.Errorf("%s: relative error %.3g > %g (shape got %v want %v)", key, e, f32Tol, got.Shape(), want.Shape())
	}
}

func (p *parity) report() {
	p.t.Helper()
	p.t.Logf("worst relative error %.3g (%s)", p.worst, p.worstKey)
}

// bits returns the raw bytes of every state-dict entry (host copies of a
// module on a device), for bitwise comparisons.
func bits(t testing.TB, m Module) map[string]string {
	t.Helper()
	sd, err := HostStateDict(m)
	noErr(t, err)
	out := map[string]string{}
	for k, v := range sd {
		c := v.Contiguous()
		sz := c.DType().Size()
		out[k] = string(c.Storage().Bytes()[c.Offset()*sz : (c.Offset()+c.Numel())*sz])
	}
	return out
}

// noErr stops the test on a non-nil error.
func noErr(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// check stops the test with a formatted message unless ok.
func check(t testing.TB, ok bool, format string, args ...any) {
	t.Helper()
	if !ok {
		t.Fatalf(format, args...)
	}
}

func abs(v float64) float64           { return math.Abs(v) }
func sqrt(v float64) float64          { return math.Sqrt(v) }
func errorsIs(err, target error) bool { return errors.Is(err, target) }
