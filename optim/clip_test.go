package optim_test

import (
	"math"
	"testing"

	"github.com/esper-go/esper/autograd"
	"github.com/esper-go/esper/internal/testdevice"
	"github.com/esper-go/esper/optim"
	"github.com/esper-go/esper/tensor"
)

func TestClipGradNorm(t *testing.T) {
	defer failOnPanic(t)
	rng := tensor.NewRNG(41)
	cases := []struct {
		name    string
		maxNorm float64 // as a fraction of the norm
		mixed   bool
	}{
		{"clips", 0.25, false},
		{"leaves small gradients", 2, false},
		{"zero max", 0, false},
		{"mixed dtypes clips", 0.5, true},
		{"mixed dtypes leaves", 3, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			defer failOnPanic(t)
			ps := randParams(t, rng, tensor.F32, []int{200, 30}, []int{30}, []int{})
			if c.mixed {
				ps = append(ps, randParams(t, rng, tensor.F64, []int{9, 9})...)
			}
			a, err := optim.NewArena(ps)
			if err != nil {
				t.Fatal(err)
			}
			gs := randGrads(rng, ps)
			setGrads(t, ps, gs)
			var ss float64
			for _, g := range gs {
				for _, v := range g {
					ss += v * v
				}
			}
			norm := math.Sqrt(ss)
			maxNorm := c.maxNorm * norm
			got := optim.ClipGradNorm(a, maxNorm)
			if got.Rank() != 0 || math.Abs(item(t, got)-norm) > 1e-5*norm {
				t.Fatalf("norm %v (shape %v), want %v", item(t, got), got.Shape(), norm)
			}
			coef := math.Min(1, maxNorm/(norm+1e-6))
			for i, p := range ps {
				want := append([]float64(nil), gs[i]...)
				for j := range want {
					want[j] *= coef
				}
				if e := relErr(f64(t, p.Grad), want); e > 1e-6 {
					t.Errorf("grad %d: rel err %.3g (coef %v)", i, e, coef)
				}
			}
			if g := item(t, optim.GradNorm(a)); math.Abs(g-math.Min(norm, maxNorm)) > 1e-5*norm {
				t.Errorf("norm after clipping %v, want %v", g, math.Min(norm, maxNorm))
			}
		})
	}
}

func TestClipGradNormNonFinite(t *testing.T) {
	defer failOnPanic(t)
	ps := []*autograd.Var{autograd.Param(testdevice.To(t, tensor.Zeros(tensor.F32, 3)))}
	a, err := optim.NewArena(ps)
	if err != nil {
		t.Fatal(err)
	}
	// Zero gradients stay zero (the 1e-6 keeps the coefficient finite).
	if n := item(t, optim.ClipGradNorm(a, 1)); n != 0 {
		t.Errorf("norm of zero gradients %v", n)
	}
	for _, v := range f64(t, ps[0].Grad) {
		if v != 0 {
			t.Fatal("clipping zero gradients changed them")
		}
	}
	testdevice.Set(ps[0].Grad, math.Inf(1), 1)
	if n := item(t, optim.ClipGradNorm(a, 1)); !math.IsInf(n, 1) && !math.IsNaN(n) {
		t.Errorf("norm with an inf gradient %v", n)
	}
	mustPanic(t, "maxNorm", func() { optim.ClipGradNorm(a, -1) })
	mustPanic(t, "maxNorm", func() { optim.ClipGradNorm(a, math.NaN()) })
}

// TestClipGradNormCapture checks that clipping can be replayed: the norm
// tensor and the scaling follow the gradients present at each replay.
func TestClipGradNormCapture(t *testing.T) {
	defer failOnPanic(t)
	rng := tensor.NewRNG(42)
	ps := randParams(t, rng, tensor.F32, []int{50, 4})
	a, err := optim.NewArena(ps)
	if err != nil {
		t.Fatal(err)
	}
	var norm *tensor.Tensor
	g := capture(t, func() { norm = optim.ClipGradNorm(a, 1) })
	for r := 0; r < 3; r++ {
		gs := randGrads(rng, ps)
		for j := range gs[0] {
			gs[0][j] *= float64(r) * 0.05 // norms ≈ 0, 0.7, 1.4
		}
		setGrads(t, ps, gs)
		g.Replay()
		var ss float64
		for _, v := range gs[0] {
			ss += v * v
		}
		n := math.Sqrt(ss)
		if math.Abs(item(t, norm)-n) > 1e-5*math.Max(n, 1) {
			t.Fatalf("replay %d: norm %v, want %v", r, item(t, norm), n)
		}
		if got := item(t, optim.GradNorm(a)); math.Abs(got-math.Min(n, 1)) > 1e-5 {
			t.Fatalf("replay %d: clipped norm %v, want %v", r, got, math.Min(n, 1))
		}
	}
}
