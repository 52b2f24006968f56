package optim_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/esper-go/esper/autograd"
	"github.com/esper-go/esper/internal/testdevice"
	"github.com/esper-go/esper/optim"
	"github.com/esper-go/esper/tensor"
)

func TestArenaViewsShareMemory(t *testing.T) {
	rng := tensor.NewRNG(1)
	ps := randParams(t, rng, tensor.F32, []int{3, 4}, []int{5}, []int{}, []int{2, 3, 2})
	want := values(t, ps)
	a, err := optim.NewArena(ps)
	if err != nil {
		t.Fatal(err)
	}
	if a.Len() != 12+5+1+12 || a.Version() != 1 || len(a.Buckets()) != 1 {
		t.Fatalf("Len %d Version %d buckets %d", a.Len(), a.Version(), len(a.Buckets()))
	}
	flat, grad := a.Flat(), a.FlatGrad()
	if !tensor.SameShape(flat.Shape(), []int{a.Len()}) || !tensor.SameShape(grad.Shape(), []int{a.Len()}) {
		t.Fatalf("flat shapes %v %v", flat.Shape(), grad.Shape())
	}
	off := 0
	for i, p := range ps {
		// Values were copied in, in order, without gaps.
		if got := f64(t, p.Value); relErr(got, want[i]) != 0 {
			t.Errorf("param %d value changed by NewArena", i)
		}
		if p.Value.Storage() != flat.Storage() || p.Value.Offset() != off || !p.Value.IsContiguous() {
			t.Errorf("param %d is not the view at %d of Flat", i, off)
		}
		if p.Grad == nil || p.Grad.Storage() != grad.Storage() || p.Grad.Offset() != off || !tensor.SameShape(p.Grad.Shape(), p.Value.Shape()) {
			t.Errorf("grad %d is not the view at %d of FlatGrad", i, off)
		}
		if got := a.Buckets()[0].Offset(i); got != off {
			t.Errorf("Offset(%d) = %d, want %d", i, got, off)
		}
		off += p.Value.Numel()
	}
	// Writing Flat changes v.Value, and writing v.Grad changes FlatGrad.
	testdevice.Set(flat, 42, 12+5)
	if got := item(t, ps[2].Value); got != 42 {
		t.Errorf("scalar param reads %v after writing Flat, want 42", got)
	}
	testdevice.Set(ps[3].Grad, 7, 1, 2, 1)
	if got := f64(t, grad)[12+5+1+(1*6+2*2+1)]; got != 7 {
		t.Errorf("FlatGrad reads %v after writing Grad, want 7", got)
	}
	if err := a.Verify(); err != nil {
		t.Error(err)
	}
}

func TestArenaZeroGrad(t *testing.T) {
	defer failOnPanic(t)
	ps := randParams(t, tensor.NewRNG(2), tensor.F32, []int{100}, []int{7, 3})
	a, err := optim.NewArena(ps)
	if err != nil {
		t.Fatal(err)
	}
	g := tensor.Arange(tensor.F32, 1, float64(a.Len()+1), 1)
	write(t, a.FlatGrad(), g)
	if f64(t, a.FlatGrad())[a.Len()-1] != float64(a.Len()) {
		t.Fatal("the gradients were not written")
	}
	a.ZeroGrad()
	for i, v := range f64(t, a.FlatGrad()) {
		if v != 0 {
			t.Fatalf("grad[%d] = %v after ZeroGrad", i, v)
		}
	}
}

func TestArenaMixedDTypes(t *testing.T) {
	rng := tensor.NewRNG(3)
	p32 := randParams(t, rng, tensor.F32, []int{4}, []int{2, 2})
	p64 := randParams(t, rng, tensor.F64, []int{3})
	ps := []*autograd.Var{p32[0], p64[0], p32[1]}
	a, err := optim.NewArena(ps)
	if err != nil {
		t.Fatal(err)
	}
	bs := a.Buckets()
	if len(bs) != 2 || bs[0].DType() != tensor.F32 || bs[1].DType() != tensor.F64 || bs[0].Len() != 8 || bs[1].Len() != 3 {
		t.Fatalf("buckets: %d", len(bs))
	}
	if got := bs[0].Params(); got[0] != p32[0] || got[1] != p32[1] {
		t.Errorf("F32 bucket params out of order")
	}
	if p32[1].Value.Offset() != 4 || p64[0].Value.Storage() != bs[1].Flat().Storage() {
		t.Errorf("layout of the mixed arena is wrong")
	}
	mustPanic(t, "2 dtypes", func() { a.Flat() })
	mustPanic(t, "2 dtypes", func() { a.FlatGrad() })
}

func TestArenaRebuild(t *testing.T) {
	rng := tensor.NewRNG(4)
	ps := randParams(t, rng, tensor.F32, []int{3}, []int{2, 2}, []int{5})
	a, err := optim.NewArena(ps[:2])
	if err != nil {
		t.Fatal(err)
	}
	testdevice.Set(ps[0].Value, 11, 1) // train a little: the arena holds the truth
	want := values(t, ps)
	oldFlat := a.Flat()
	if err := a.Rebuild([]*autograd.Var{ps[2], ps[0]}); err != nil {
		t.Fatal(err)
	}
	if a.Version() != 2 || a.Len() != 8 {
		t.Fatalf("Version %d Len %d after Rebuild", a.Version(), a.Len())
	}
	if relErr(f64(t, ps[0].Value), want[0]) != 0 || relErr(f64(t, ps[2].Value), want[2]) != 0 {
		t.Errorf("Rebuild lost values")
	}
	if ps[0].Value.Storage() == oldFlat.Storage() || ps[0].Value.Offset() != 5 {
		t.Errorf("Rebuild did not re-lay ps[0] out")
	}
	// A failed Rebuild leaves the arena as it was.
	if err := a.Rebuild([]*autograd.Var{ps[0], ps[0]}); err == nil {
		t.Fatal("Rebuild with a duplicate succeeded")
	}
	if a.Version() != 2 || len(a.Params()) != 2 {
		t.Errorf("failed Rebuild changed the arena")
	}
}

func TestArenaVerify(t *testing.T) {
	ps := randParams(t, tensor.NewRNG(5), tensor.F32, []int{3}, []int{4})
	a, err := optim.NewArena(ps)
	if err != nil {
		t.Fatal(err)
	}
	ps[1].Value = testdevice.To(t, testdevice.Host(t, ps[1].Value).Clone())
	if err := a.Verify(); err == nil || !strings.Contains(err.Error(), `"p1"`) {
		t.Errorf("Verify after replacing a Value: %v", err)
	}
	ps[1].Value = a.Flat().Narrow(0, 3, 4)
	ps[0].Grad = nil
	if err := a.Verify(); err == nil || !strings.Contains(err.Error(), "gradient") {
		t.Errorf("Verify after dropping a Grad: %v", err)
	}
}

// fakeDeviceMemory lets a test create tensors on cuda:0 without a GPU;
// nothing ever computes on them.
type fakeDeviceMemory struct{ next tensor.DevicePtr }

func (m *fakeDeviceMemory) Alloc(n int) (tensor.DevicePtr, error) {
	m.next += 4096
	return m.next, nil
}
func (m *fakeDeviceMemory) Free(tensor.DevicePtr)                            {}
func (m *fakeDeviceMemory) CopyToDevice(tensor.DevicePtr, int, []byte) error { return nil }
func (m *fakeDeviceMemory) CopyToHost([]byte, tensor.DevicePtr, int) error   { return nil }

func TestArenaRejects(t *testing.T) {
	rng := tensor.NewRNG(6)
	ok := randParams(t, rng, tensor.F32, []int{2}, []int{3})
	frozen := autograd.NewVar(testdevice.To(t, tensor.Zeros(tensor.F32, 2)))
	ints := autograd.Param(testdevice.To(t, tensor.Zeros(tensor.I64, 2)))
	var nonLeaf *autograd.Var
	func() {
		defer failOnPanic(t)
		nonLeaf = autograd.Add(ok[0], ok[0])
	}()
	tensor.RegisterDeviceMemory(tensor.KindCUDA, &fakeDeviceMemory{})
	s, err := tensor.NewDeviceStorage(tensor.F32, 2, tensor.CUDA(0))
	if err != nil {
		t.Fatal(err)
	}
	onGPU := autograd.Param(tensor.New(s, []int{2}, []int{1}, 0))

	cases := []struct {
		name   string
		params []*autograd.Var
		want   string
	}{
		{"empty", nil, "empty"},
		{"nil", []*autograd.Var{ok[0], nil}, "nil"},
		{"duplicate", []*autograd.Var{ok[0], ok[1], ok[0]}, "appears twice"},
		{"frozen", []*autograd.Var{ok[0], frozen}, "does not require a gradient"},
		{"int", []*autograd.Var{ints}, "non-float"},
		{"non-leaf", []*autograd.Var{ok[1], nonLeaf}, "not a leaf"},
		{"mixed devices", []*autograd.Var{ok[0], onGPU}, "cuda:0"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if c.name == "non-leaf" && nonLeaf == nil {
				t.Fatal("could not build a non-leaf Var with autograd.Add")
			}
			before := ok[0].Value
			_, err := optim.NewArena(c.params)
			if err == nil || !errors.Is(err, optim.ErrArena) || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("NewArena: %v, want an ErrArena containing %q", err, c.want)
			}
			if ok[0].Value != before {
				t.Errorf("a rejected NewArena repointed a parameter")
			}
		})
	}
}
