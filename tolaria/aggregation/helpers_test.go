package aggregation

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/esper-go/esper/autograd"
	"github.com/esper-go/esper/tensor"
)

// fakeDeviceMemory lets a test create tensors on cuda:0 without a GPU;
// nothing ever reads them.
type fakeDeviceMemory struct{ next tensor.DevicePtr }

func (m *fakeDeviceMemory) Alloc(int) (tensor.DevicePtr, error) {
	m.next += 4096
	return m.next, nil
}
func (m *fakeDeviceMemory) Free(tensor.DevicePtr)                            {}
func (m *fakeDeviceMemory) CopyToDevice(tensor.DevicePtr, int, []byte) error { return nil }
func (m *fakeDeviceMemory) CopyToHost([]byte, tensor.DevicePtr, int) error   { return nil }

// params returns parameters of the given shapes with random values and
// random F32 gradients.
func params(rng *rand.Rand, shapes ...[]int) []*autograd.Var {
	out := make([]*autograd.Var, len(shapes))
	for i, s := range shapes {
		p := autograd.Param(tensor.Uniform(rng, tensor.F32, -1, 1, s...))
		p.Grad = tensor.Uniform(rng, tensor.F32, -1, 1, s...)
		out[i] = p
	}
	return out
}

// randVec returns n uniform values in [-1, 1).
func randVec(rng *rand.Rand, n int) []float32 {
	v := make([]float32, n)
	for i := range v {
		v[i] = float32(rng.Float64()*2 - 1)
	}
	return v
}

func near(a, b, tol float64) bool { return math.Abs(a-b) <= tol }

func assertVec(t *testing.T, what string, got []float32, want []float64, tol float64) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d elements, want %d", what, len(got), len(want))
	}
	for i := range got {
		if !near(float64(got[i]), want[i], tol) {
			t.Fatalf("%s[%d] = %v, want %v (got %v)", what, i, got[i], want[i], got)
		}
	}
}
