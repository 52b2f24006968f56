package aggregation

import (
	"errors"
	"math"
	"strings"
	"testing"

	"github.com/esper-go/esper/autograd"
	"github.com/esper-go/esper/optim"
	"github.com/esper-go/esper/tensor"
)

func TestGradsToFlatRoundTrip(t *testing.T) {
	rng := tensor.NewRNG(1)
	ps := params(rng, []int{2, 3}, []int{4}, []int{1, 2})
	ps[1].Grad = nil // no gradient: zeros
	n, err := FlatLen(ps)
	if err != nil || n != 12 {
		t.Fatalf("FlatLen = %d, %v", n, err)
	}
	flat := make([]float32, n)
	for i := range flat {
		flat[i] = 99
	}
	if err := GradsToFlat(ps, flat); err != nil {
		t.Fatal(err)
	}
	want := append(append(append([]float32{}, ps[0].Grad.F32()...), 0, 0, 0, 0), ps[2].Grad.F32()...)
	for i := range want {
		if flat[i] != want[i] {
			t.Fatalf("flat[%d] = %v, want %v", i, flat[i], want[i])
		}
	}

	for i := range flat {
		flat[i] = float32(i) / 4
	}
	if err := FlatToGrads(flat, ps); err != nil {
		t.Fatal(err)
	}
	if ps[1].Grad == nil || !tensor.SameShape(ps[1].Grad.Shape(), []int{4}) {
		t.Fatal("FlatToGrads did not create the missing gradient")
	}
	back := make([]float32, n)
	if err := GradsToFlat(ps, back); err != nil {
		t.Fatal(err)
	}
	for i := range back {
		if back[i] != flat[i] {
			t.Fatalf("round trip [%d] = %v, want %v", i, back[i], flat[i])
		}
	}
	if got := ps[0].Grad.At(1, 2); got != 5.0/4 {
		t.Fatalf("grad[1,2] = %v, want row-major element 5 (1.25)", got)
	}
}

func TestFlatConvertsHalfAndDoubleGradients(t *testing.T) {
	for _, dt := range []tensor.DType{tensor.BF16, tensor.F16, tensor.F64} {
		t.Run(dt.String(), func(t *testing.T) {
			p := autograd.Param(tensor.Zeros(dt, 3))
			p.Grad = tensor.FromFloat64s(dt, []float64{0.5, -2, 3}, 3)
			flat := make([]float32, 3)
			if err := GradsToFlat([]*autograd.Var{p}, flat); err != nil {
				t.Fatal(err)
			}
			assertVec(t, "flat", flat, []float64{0.5, -2, 3}, 0)
			if err := FlatToGrads([]float32{1.5, 4, -0.25}, []*autograd.Var{p}); err != nil {
				t.Fatal(err)
			}
			if p.Grad.DType() != dt || p.Grad.At(0) != 1.5 || p.Grad.At(2) != -0.25 {
				t.Fatalf("grad %v dtype %v", p.Grad, p.Grad.DType())
			}
		})
	}
}

func TestFlatNonContiguousGradient(t *testing.T) {
	p := autograd.Param(tensor.Zeros(tensor.F32, 2, 2))
	p.Grad = tensor.FromSlice([]float32{1, 2, 3, 4}, 2, 2).T() // [[1 3] [2 4]]
	flat := make([]float32, 4)
	if err := GradsToFlat([]*autograd.Var{p}, flat); err != nil {
		t.Fatal(err)
	}
	assertVec(t, "flat", flat, []float64{1, 3, 2, 4}, 0)
	if err := FlatToGrads([]float32{5, 6, 7, 8}, []*autograd.Var{p}); err != nil {
		t.Fatal(err)
	}
	if p.Grad.At(0, 1) != 6 || p.Grad.At(1, 0) != 7 {
		t.Fatalf("grad %v", p.Grad)
	}
}

func TestFlatRejects(t *testing.T) {
	rng := tensor.NewRNG(2)
	tensor.RegisterDeviceMemory(tensor.KindCUDA, &fakeDeviceMemory{})
	s, err := tensor.NewDeviceStorage(tensor.F32, 3, tensor.CUDA(0))
	if err != nil {
		t.Fatal(err)
	}
	onGPU := autograd.Param(tensor.Zeros(tensor.F32, 3))
	onGPU.Grad = tensor.New(s, []int{3}, []int{1}, 0)

	mixed := params(rng, []int{2}, []int{3})
	mixed[1].Grad = tensor.Zeros(tensor.F64, 3)
	noGrads := params(rng, []int{2}, []int{3})
	noGrads[0].Grad, noGrads[1].Grad = nil, nil
	wrongSize := params(rng, []int{2})
	wrongSize[0].Grad = tensor.Zeros(tensor.F32, 5)
	cpuThenGPU := append(params(rng, []int{2}), onGPU)

	cases := []struct {
		name   string
		params []*autograd.Var
		n      int
		want   string
	}{
		{"empty", nil, 0, "empty"},
		{"nil parameter", []*autograd.Var{nil}, 0, "nil"},
		{"count mismatch", params(rng, []int{2}, []int{3}), 4, "elements"},
		{"no gradients", noGrads, 5, "no parameter has a gradient"},
		{"mixed dtypes", mixed, 5, "mix dtypes"},
		{"mixed devices", cpuThenGPU, 5, "mix devices"},
		{"device", []*autograd.Var{onGPU}, 3, "host memory"},
		{"gradient size", wrongSize, 2, "elements"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			flat := make([]float32, c.n)
			// GradsToFlat reads gradients on a device (explicit copies:
			// TestGradsToFlatOnSim); FlatToGrads writes only host memory.
			if err := GradsToFlat(c.params, flat); c.name != "device" && (!errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), c.want)) {
				t.Fatalf("GradsToFlat: %v, want ErrInvalid containing %q", err, c.want)
			}
			if c.name == "no gradients" {
				return // FlatToGrads creates missing gradients
			}
			err := FlatToGrads(flat, c.params)
			if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("FlatToGrads: %v, want ErrInvalid containing %q", err, c.want)
			}
		})
	}
}

func TestFlatToGradsCountMismatchChangesNothing(t *testing.T) {
	ps := params(tensor.NewRNG(3), []int{2}, []int{2})
	before := append([]float32{}, ps[0].Grad.F32()...)
	if err := FlatToGrads(make([]float32, 5), ps); !errors.Is(err, ErrInvalid) {
		t.Fatalf("FlatToGrads with 5 elements for 4: %v", err)
	}
	for i, v := range ps[0].Grad.F32() {
		if v != before[i] {
			t.Fatal("a rejected FlatToGrads wrote a gradient")
		}
	}
}

func TestFlatGradViewOverArena(t *testing.T) {
	ps := params(tensor.NewRNG(4), []int{3, 2}, []int{5}, []int{2})
	arena, err := optim.NewArena(ps)
	if err != nil {
		t.Fatal(err)
	}
	for i, p := range ps {
		p.Grad.Fill(float64(i + 1))
	}
	view, ok := FlatGradView(ps)
	if !ok {
		t.Fatal("arena gradients not recognised as one flat buffer")
	}
	if len(view) != arena.Len() || &view[0] != &arena.FlatGrad().F32()[0] {
		t.Fatal("view is not the arena's flat gradient")
	}
	if err := GradsToFlat(ps, view); err != nil {
		t.Fatalf("GradsToFlat onto its own arena: %v", err)
	}
	assertVec(t, "view", view, []float64{1, 1, 1, 1, 1, 1, 2, 2, 2, 2, 2, 3, 3}, 0)

	// Out of parameter order, the layout no longer matches.
	if _, ok := FlatGradView([]*autograd.Var{ps[1], ps[0]}); ok {
		t.Fatal("reordered parameters reported as a flat view")
	}
	if _, ok := FlatGradView(params(tensor.NewRNG(5), []int{2}, []int{2})); ok {
		t.Fatal("separate gradients reported as a flat view")
	}
}

func TestFlatCopiesAllocateNothing(t *testing.T) {
	ps := params(tensor.NewRNG(6), []int{16, 8}, []int{8}, []int{4, 4})
	flat := make([]float32, 16*8+8+16)
	allocs := testing.AllocsPerRun(50, func() {
		if err := GradsToFlat(ps, flat); err != nil {
			t.Fatal(err)
		}
		if err := FlatToGrads(flat, ps); err != nil {
			t.Fatal(err)
		}
	})
	if allocs != 0 {
		t.Fatalf("GradsToFlat+FlatToGrads: %v allocations, want 0", allocs)
	}
}

// TestGradsToFlatOnSim: gradients on the strict sim device are gathered
// there and read with one explicit device-to-host copy (one counted host
// sync), giving the host gradients' flat vector.
func TestGradsToFlatOnSim(t *testing.T) {
	rng := tensor.NewRNG(3)
	ps := params(rng, []int{2}, []int{3})
	want := make([]float32, 5)
	if err := GradsToFlat(ps, want); err != nil {
		t.Fatal(err)
	}
	dev := tensor.Sim(5)
	for _, p := range ps {
		g, err := p.Grad.ToDevice(dev)
		if err != nil {
			t.Fatal(err)
		}
		p.Grad = g
	}
	before := tensor.HostSyncs(dev)
	got := make([]float32, 5)
	if err := GradsToFlat(ps, got); err != nil {
		t.Fatal(err)
	}
	if n := tensor.HostSyncs(dev) - before; n != 1 {
		t.Fatalf("%d host syncs, want 1 (the gradients gathered, one copy)", n)
	}
	for i := range want {
		if math.Float32bits(want[i]) != math.Float32bits(got[i]) {
			t.Fatalf("element %d: %v, want %v", i, got[i], want[i])
		}
	}
}
