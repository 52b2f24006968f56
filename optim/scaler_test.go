package optim_test

import (
	"errors"
	"math"
	"testing"

	"github.com/esper-go/esper/autograd"
	"github.com/esper-go/esper/internal/testdevice"
	"github.com/esper-go/esper/optim"
	"github.com/esper-go/esper/tensor"
)

// scalerIteration runs one unscale/step/update iteration with gradients
// gs multiplied by the current scale (what Backward of a scaled loss
// gives).
func scalerIteration(t *testing.T, s *optim.GradScaler, opt optim.Optimizer, ps []*autograd.Var, gs [][]float64) {
	t.Helper()
	sc := s.CurrentScale()
	scaled := cloneVals(gs)
	for i := range scaled {
		for j := range scaled[i] {
			scaled[i][j] *= sc
		}
	}
	setGrads(t, ps, scaled)
	s.Step(opt)
	s.Update()
}

func TestGradScalerStateMachine(t *testing.T) {
	defer failOnPanic(t)
	rng := tensor.NewRNG(31)
	ps := randParams(t, rng, tensor.F32, []int{10, 10}, []int{10})
	opt, err := optim.NewSGD(ps, optim.SGDOptions{LR: 0.1, Momentum: 0.9})
	if err != nil {
		t.Fatal(err)
	}
	s, err := optim.NewGradScaler(optim.GradScalerOptions{InitScale: 1024, GrowthInterval: 3, Device: testdevice.Device(t)})
	if err != nil {
		t.Fatal(err)
	}
	ref := &refSGD{lr: 0.1, momentum: 0.9}
	want := values(t, ps)

	// Clean steps: unscaled updates, the tracker counts, growth at 3.
	for i, w := range []struct {
		scale   float64
		tracker int
	}{{1024, 1}, {1024, 2}, {2048, 0}, {2048, 1}} {
		gs := randGrads(rng, ps)
		scalerIteration(t, s, opt, ps, gs)
		ref.update(want, gs)
		if s.CurrentScale() != w.scale || s.GrowthTracker() != w.tracker {
			t.Fatalf("clean step %d: scale %v tracker %d, want %v %d", i, s.CurrentScale(), s.GrowthTracker(), w.scale, w.tracker)
		}
		if item(t, s.FoundInf()) != 0 {
			t.Fatalf("clean step %d: found inf", i)
		}
		for j, p := range ps {
			if e := relErr(f64(t, p.Value), want[j]); e > 1e-5 {
				t.Fatalf("clean step %d param %d: rel err %.3g", i, j, e)
			}
		}
	}

	// An inf gradient: skip (nothing changes), back off, reset the tracker.
	for k, bad := range []float64{math.Inf(1), math.NaN()} {
		before, sd := values(t, ps), opt.StateDict()
		gs := randGrads(rng, ps)
		gs[1][3] = bad
		scalerIteration(t, s, opt, ps, gs)
		wantScale := 2048 * math.Pow(0.5, float64(k+1))
		if s.CurrentScale() != wantScale || s.GrowthTracker() != 0 || item(t, s.FoundInf()) != 1 {
			t.Fatalf("%v gradient: scale %v tracker %d foundInf %v, want %v 0 1", bad, s.CurrentScale(), s.GrowthTracker(), item(t, s.FoundInf()), wantScale)
		}
		for j := range ps {
			if relErr(f64(t, ps[j].Value), before[j]) != 0 {
				t.Fatalf("%v gradient changed param %d", bad, j)
			}
		}
		if opt.StepCount() != 4 || relErr(f64(t, opt.StateDict()["momentum_buffer.f32"]), f64(t, sd["momentum_buffer.f32"])) != 0 {
			t.Fatalf("%v gradient changed the optimizer state", bad)
		}
	}

	// Training resumes cleanly at the reduced scale.
	gs := randGrads(rng, ps)
	scalerIteration(t, s, opt, ps, gs)
	ref.update(want, gs)
	for j, p := range ps {
		if e := relErr(f64(t, p.Value), want[j]); e > 1e-5 {
			t.Fatalf("after the skips, param %d: rel err %.3g", j, e)
		}
	}
	if s.CurrentScale() != 512 || s.GrowthTracker() != 1 {
		t.Errorf("after the skips: scale %v tracker %d", s.CurrentScale(), s.GrowthTracker())
	}
}

func TestGradScalerUnscaleThenClip(t *testing.T) {
	defer failOnPanic(t)
	ps := randParams(t, tensor.NewRNG(32), tensor.F32, []int{4})
	opt, err := optim.NewSGD(ps, optim.SGDOptions{LR: 1})
	if err != nil {
		t.Fatal(err)
	}
	s, err := optim.NewGradScaler(optim.GradScalerOptions{InitScale: 8, Device: testdevice.Device(t)})
	if err != nil {
		t.Fatal(err)
	}
	before := f64(t, ps[0].Value)
	setGrads(t, ps, [][]float64{{24, 0, 0, 32}}) // 8·{3, 0, 0, 4}
	s.Unscale(opt)
	if got := f64(t, ps[0].Grad); relErr(got, []float64{3, 0, 0, 4}) != 0 {
		t.Fatalf("unscaled grad %v", got)
	}
	norm := optim.ClipGradNorm(opt.Arena(), 1)
	if math.Abs(item(t, norm)-5) > 1e-6 {
		t.Errorf("norm %v, want 5", item(t, norm))
	}
	mustPanic(t, "twice", func() { s.Unscale(opt) })
	s.Step(opt) // must not unscale again
	s.Update()
	got := f64(t, ps[0].Value)
	for j, d := range []float64{0.6, 0, 0, 0.8} {
		if math.Abs(before[j]-got[j]-d) > 1e-5 {
			t.Errorf("param[%d] moved by %v, want %v", j, before[j]-got[j], d)
		}
	}
	mustPanic(t, "without Unscale", s.Update)
}

func TestGradScalerScaleLoss(t *testing.T) {
	defer failOnPanic(t)
	for _, dt := range []tensor.DType{tensor.F32, tensor.F64} {
		w := autograd.Param(testdevice.To(t, tensor.Scalar(dt, 3)))
		s, err := optim.NewGradScaler(optim.GradScalerOptions{InitScale: 4, Device: testdevice.Device(t)})
		if err != nil {
			t.Fatal(err)
		}
		loss := autograd.Mul(w, w) // 9, d/dw = 6
		scaled := s.Scale(loss)
		if scaled.DType() != dt || item(t, scaled.Value) != 36 {
			t.Fatalf("%v: scaled loss %v", dt, scaled)
		}
		autograd.Backward(scaled)
		if item(t, w.Grad) != 24 {
			t.Errorf("%v: scaled grad %v, want 24", dt, item(t, w.Grad))
		}
	}
}

func TestGradScalerCaptureReplay(t *testing.T) {
	defer failOnPanic(t)
	rng := tensor.NewRNG(33)
	ps := randParams(t, rng, tensor.F32, []int{64})
	opt, err := optim.NewSGD(ps, optim.SGDOptions{LR: 0.1})
	if err != nil {
		t.Fatal(err)
	}
	s, err := optim.NewGradScaler(optim.GradScalerOptions{InitScale: 16, GrowthInterval: 2, Device: testdevice.Device(t)})
	if err != nil {
		t.Fatal(err)
	}
	g := capture(t, func() {
		s.Step(opt)
		s.Update()
	})
	// Replays decide on the device whether to skip and how to move the
	// scale: clean, clean (grow to 32), inf (back off to 16), clean.
	for i, w := range []struct {
		bad   bool
		scale float64
	}{{false, 16}, {false, 32}, {true, 16}, {false, 16}} {
		before := values(t, ps)
		gs := randGrads(rng, ps)
		sc := s.CurrentScale()
		for j := range gs[0] {
			gs[0][j] *= sc
		}
		if w.bad {
			gs[0][5] = math.Inf(-1)
		}
		setGrads(t, ps, gs)
		g.Replay()
		if s.CurrentScale() != w.scale {
			t.Fatalf("replay %d: scale %v, want %v", i, s.CurrentScale(), w.scale)
		}
		moved := relErr(f64(t, ps[0].Value), before[0]) != 0
		if moved == w.bad {
			t.Fatalf("replay %d: params moved = %v with an inf gradient = %v", i, moved, w.bad)
		}
	}
}

func TestGradScalerStateDict(t *testing.T) {
	defer failOnPanic(t)
	s, err := optim.NewGradScaler(optim.GradScalerOptions{Device: testdevice.Device(t)})
	if err != nil {
		t.Fatal(err)
	}
	if s.CurrentScale() != 65536 || s.GrowthTracker() != 0 {
		t.Fatalf("initial scale %v tracker %d", s.CurrentScale(), s.GrowthTracker())
	}
	o := s.Options()
	if o.GrowthFactor != 2 || o.BackoffFactor != 0.5 || o.GrowthInterval != 2000 {
		t.Errorf("defaults %+v", o)
	}
	sd := map[string]*tensor.Tensor{"scale": tensor.Full(tensor.F32, 128, 1), "growth_tracker": tensor.FromSlice([]int32{17})}
	if err := s.LoadStateDict(sd); err != nil {
		t.Fatal(err)
	}
	got := s.StateDict()
	if item(t, got["scale"]) != 128 || item(t, got["growth_tracker"]) != 17 || got["growth_tracker"].DType() != tensor.I32 {
		t.Fatalf("round trip: %v %v", got["scale"], got["growth_tracker"])
	}
	s2, _ := optim.NewGradScaler(optim.GradScalerOptions{Device: testdevice.Device(t)})
	if err := s2.LoadStateDict(got); err != nil || s2.CurrentScale() != 128 || s2.GrowthTracker() != 17 {
		t.Fatalf("load into a fresh scaler: %v", err)
	}
	testdevice.Fill(got["scale"], -1) // a copy: the scaler is unaffected
	if s.CurrentScale() != 128 {
		t.Errorf("StateDict returned a view, not a copy")
	}
	for name, bad := range map[string]map[string]*tensor.Tensor{
		"no scale":          {"growth_tracker": tensor.FromSlice([]int32{0})},
		"no tracker":        {"scale": tensor.Scalar(tensor.F32, 1)},
		"negative scale":    {"scale": tensor.Scalar(tensor.F32, -1), "growth_tracker": tensor.FromSlice([]int32{0})},
		"infinite scale":    {"scale": tensor.Scalar(tensor.F32, math.Inf(1)), "growth_tracker": tensor.FromSlice([]int32{0})},
		"negative tracker":  {"scale": tensor.Scalar(tensor.F32, 1), "growth_tracker": tensor.FromSlice([]int32{-1})},
		"two-element scale": {"scale": tensor.Zeros(tensor.F32, 2), "growth_tracker": tensor.FromSlice([]int32{0})},
	} {
		if err := s.LoadStateDict(bad); err == nil {
			t.Errorf("%s: LoadStateDict succeeded", name)
		}
	}
	if s.CurrentScale() != 128 {
		t.Errorf("a rejected LoadStateDict changed the scale")
	}
}

func TestGradScalerDisabled(t *testing.T) {
	defer failOnPanic(t)
	ps := randParams(t, tensor.NewRNG(34), tensor.F32, []int{3})
	opt, _ := optim.NewSGD(ps, optim.SGDOptions{LR: 0.5})
	s, err := optim.NewGradScaler(optim.GradScalerOptions{Disabled: true, Device: testdevice.Device(t)})
	if err != nil {
		t.Fatal(err)
	}
	loss := autograd.Param(testdevice.To(t, tensor.Scalar(tensor.F32, 2)))
	if s.Enabled() || s.Scale(loss) != loss {
		t.Fatal("disabled scaler scaled the loss")
	}
	before := f64(t, ps[0].Value)
	setGrads(t, ps, [][]float64{{1, 2, 3}})
	s.Unscale(opt)
	s.Step(opt)
	s.Update()
	after := f64(t, ps[0].Value)
	for j, g := range []float64{1, 2, 3} {
		if got := after[j]; math.Abs(before[j]-0.5*g-got) > 1e-6 {
			t.Errorf("param[%d] = %v, want %v", j, got, before[j]-0.5*g)
		}
	}
}

func TestGradScalerOptions(t *testing.T) {
	for name, o := range map[string]optim.GradScalerOptions{
		"negative init":    {InitScale: -1},
		"NaN init":         {InitScale: math.NaN()},
		"growth below one": {GrowthFactor: 0.5},
		"growth one":       {GrowthFactor: 1},
		"backoff one":      {BackoffFactor: 1},
		"negative backoff": {BackoffFactor: -0.5},
		"negative period":  {GrowthInterval: -1},
		"no backend":       {Device: tensor.Device{Kind: 7}},
	} {
		if _, err := optim.NewGradScaler(o); !errors.Is(err, optim.ErrOptions) {
			t.Errorf("%s: NewGradScaler: %v, want ErrOptions", name, err)
		}
	}
}
