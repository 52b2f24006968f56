package optim_test

import (
	"errors"
	"fmt"
	"math"
	"testing"

	"github.com/esper-go/esper/autograd"
	"github.com/esper-go/esper/internal/testdevice"
	"github.com/esper-go/esper/optim"
	"github.com/esper-go/esper/tensor"
)

// refShapes are many elements in tensors of assorted ranks, enough for
// the CPU kernels to split the arena across workers.
var refShapes = [][]int{{64, 300}, {300}, {}, {17, 5, 3}, {1}, {128, 129}, {7}}

// refTol is the per-tensor relative tolerance against the float64
// reference: F64 kernels compute in float64, F32 kernels in float32.
func refTol(dt tensor.DType) float64 {
	if dt == tensor.F64 {
		return 1e-12
	}
	return 1e-5
}

func TestSGDMatchesReference(t *testing.T) {
	defer failOnPanic(t)
	cases := []struct {
		name string
		o    optim.SGDOptions
	}{
		{"plain", optim.SGDOptions{LR: 0.1}},
		{"weight decay", optim.SGDOptions{LR: 0.05, WeightDecay: 1e-2}},
		{"momentum", optim.SGDOptions{LR: 0.1, Momentum: 0.9, WeightDecay: 5e-4}},
		{"dampening", optim.SGDOptions{LR: 0.1, Momentum: 0.8, Dampening: 0.3, WeightDecay: 1e-3}},
		{"nesterov", optim.SGDOptions{LR: 0.1, Momentum: 0.9, WeightDecay: 5e-4, Nesterov: true}},
		{"maximize", optim.SGDOptions{LR: 0.02, Momentum: 0.5, WeightDecay: 1e-2, Maximize: true}},
		{"maximize plain", optim.SGDOptions{LR: 0.02, Maximize: true}},
	}
	for _, dt := range []tensor.DType{tensor.F64, tensor.F32} {
		for ci, c := range cases {
			t.Run(fmt.Sprintf("%v/%s", dt, c.name), func(t *testing.T) {
				defer failOnPanic(t)
				rng := tensor.NewRNG(uint64(100 + ci))
				ps := randParams(t, rng, dt, refShapes...)
				opt, err := optim.NewSGD(ps, c.o)
				if err != nil {
					t.Fatal(err)
				}
				ref := &refSGD{lr: c.o.LR, momentum: c.o.Momentum, dampening: c.o.Dampening, wd: c.o.WeightDecay, nesterov: c.o.Nesterov, maximize: c.o.Maximize}
				want := values(t, ps)
				for step := 1; step <= 5; step++ {
					if step == 4 { // a schedule change between steps
						opt.SetLR(c.o.LR / 2)
						ref.lr = c.o.LR / 2
					}
					gs := randGrads(rng, ps)
					opt.ZeroGrad()
					setGrads(t, ps, gs)
					opt.Step()
					ref.update(want, gs)
					for i, p := range ps {
						if e := relErr(f64(t, p.Value), want[i]); e > refTol(dt) {
							t.Fatalf("step %d param %d %v: rel err %.3g > %.3g", step, i, p.Shape(), e, refTol(dt))
						}
					}
				}
				if n := opt.StepCount(); n != 5 {
					t.Errorf("StepCount = %d, want 5", n)
				}
			})
		}
	}
}

func TestSGDMixedDTypes(t *testing.T) {
	defer failOnPanic(t)
	rng := tensor.NewRNG(7)
	p32 := randParams(t, rng, tensor.F32, []int{40, 3}, []int{5})
	p64 := randParams(t, rng, tensor.F64, []int{6, 6})
	ps := []*autograd.Var{p32[0], p64[0], p32[1]}
	o := optim.SGDOptions{LR: 0.1, Momentum: 0.9, Nesterov: true, WeightDecay: 1e-3}
	opt, err := optim.NewSGD(ps, o)
	if err != nil {
		t.Fatal(err)
	}
	ref := &refSGD{lr: o.LR, momentum: o.Momentum, wd: o.WeightDecay, nesterov: true}
	want := values(t, ps)
	for step := 0; step < 3; step++ {
		gs := randGrads(rng, ps)
		setGrads(t, ps, gs)
		opt.Step()
		ref.update(want, gs)
	}
	for i, p := range ps {
		if e := relErr(f64(t, p.Value), want[i]); e > refTol(p.DType()) {
			t.Errorf("param %d (%v): rel err %.3g", i, p.DType(), e)
		}
	}
	if n := opt.StepCount(); n != 3 {
		t.Errorf("StepCount %d after 3 steps over 2 buckets, want 3", n)
	}
	sd := opt.StateDict()
	if sd["momentum_buffer.f32"] == nil || sd["momentum_buffer.f64"] == nil || sd["momentum_buffer.f64"].Numel() != 36 {
		t.Errorf("state dict keys: %v", keys(sd))
	}
}

func keys(m map[string]*tensor.Tensor) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

func TestSGDSkipIf(t *testing.T) {
	defer failOnPanic(t)
	rng := tensor.NewRNG(8)
	ps := randParams(t, rng, tensor.F32, []int{50}, []int{3, 3})
	opt, err := optim.NewSGD(ps, optim.SGDOptions{LR: 0.1, Momentum: 0.9})
	if err != nil {
		t.Fatal(err)
	}
	setGrads(t, ps, randGrads(rng, ps))
	opt.Step()
	before, sd := values(t, ps), opt.StateDict()
	foundInf := testdevice.To(t, tensor.Full(tensor.F32, 1, 1))
	setGrads(t, ps, randGrads(rng, ps))
	opt.StepSkipIf(foundInf)
	if opt.StepCount() != 1 {
		t.Errorf("a skipped step counted: StepCount = %d", opt.StepCount())
	}
	for i, p := range ps {
		if relErr(f64(t, p.Value), before[i]) != 0 {
			t.Errorf("a skipped step changed param %d", i)
		}
	}
	if relErr(f64(t, opt.StateDict()["momentum_buffer.f32"]), f64(t, sd["momentum_buffer.f32"])) != 0 {
		t.Errorf("a skipped step changed the momentum")
	}
	testdevice.Fill(foundInf, 0)
	opt.StepSkipIf(foundInf)
	if opt.StepCount() != 2 || relErr(f64(t, ps[0].Value), before[0]) == 0 {
		t.Errorf("StepSkipIf with a zero flag did not step")
	}
}

// TestSGDStateDict checks that a state dict taken mid-run and loaded into
// a fresh optimizer continues the same trajectory, and that ResetState
// restarts the momentum.
func TestSGDStateDict(t *testing.T) {
	defer failOnPanic(t)
	rng := tensor.NewRNG(9)
	o := optim.SGDOptions{LR: 0.1, Momentum: 0.9, Dampening: 0.1, WeightDecay: 1e-3}
	ps := randParams(t, rng, tensor.F64, []int{20}, []int{4, 5})
	opt, err := optim.NewSGD(ps, o)
	if err != nil {
		t.Fatal(err)
	}
	grads := [][][]float64{randGrads(rng, ps), randGrads(rng, ps), randGrads(rng, ps)}
	setGrads(t, ps, grads[0])
	opt.Step()
	opt.SetLR(0.05)
	sd := opt.StateDict()
	if item(t, sd["lr"]) != 0.05 || item(t, sd["step"]) != 1 || sd["step"].Rank() != 0 {
		t.Fatalf("state dict lr %v step %v", sd["lr"], sd["step"])
	}
	saved := values(t, ps)

	for _, g := range grads[1:] {
		setGrads(t, ps, g)
		opt.Step()
	}
	want := values(t, ps)

	// A second model starting from the saved parameters and state.
	qs := make([]*autograd.Var, len(ps))
	for i := range ps {
		qs[i] = autograd.Param(testdevice.To(t, tensor.FromSlice(saved[i], ps[i].Shape()...)))
	}
	opt2, err := optim.NewSGD(qs, optim.SGDOptions{Momentum: 0.9, Dampening: 0.1, WeightDecay: 1e-3})
	if err != nil {
		t.Fatal(err)
	}
	// Loaded from host copies, as a checkpoint read back from disk is.
	if err := opt2.LoadStateDict(hostDict(t, sd)); err != nil {
		t.Fatal(err)
	}
	if opt2.LR() != 0.05 || opt2.StepCount() != 1 {
		t.Fatalf("loaded LR %v StepCount %d", opt2.LR(), opt2.StepCount())
	}
	for _, g := range grads[1:] {
		setGrads(t, qs, g)
		opt2.Step()
	}
	for i := range qs {
		if e := relErr(f64(t, qs[i].Value), want[i]); e > 1e-15 {
			t.Errorf("resumed param %d: rel err %.3g", i, e)
		}
	}

	// ResetState: the next step behaves like a first step.
	opt2.ResetState()
	if opt2.StepCount() != 0 || opt2.LR() != 0.05 {
		t.Errorf("after ResetState: StepCount %d LR %v", opt2.StepCount(), opt2.LR())
	}
	ref := &refSGD{lr: 0.05, momentum: 0.9, dampening: 0.1, wd: 1e-3}
	cur := values(t, qs)
	setGrads(t, qs, grads[0])
	opt2.Step()
	ref.update(cur, grads[0])
	for i := range qs {
		if e := relErr(f64(t, qs[i].Value), cur[i]); e > 1e-12 {
			t.Errorf("first step after ResetState, param %d: rel err %.3g", i, e)
		}
	}
}

func TestSGDLoadStateDictRejects(t *testing.T) {
	ps := randParams(t, tensor.NewRNG(10), tensor.F32, []int{4}, []int{2})
	opt, err := optim.NewSGD(ps, optim.SGDOptions{Momentum: 0.9})
	if err != nil {
		t.Fatal(err)
	}
	good := func() map[string]*tensor.Tensor {
		return map[string]*tensor.Tensor{
			"lr": tensor.Scalar(tensor.F64, 0.1), "step": tensor.Scalar(tensor.F64, 3),
			"momentum_buffer.f32": tensor.Zeros(tensor.F32, 6),
		}
	}
	cases := []struct {
		name string
		edit func(map[string]*tensor.Tensor)
	}{
		{"no lr", func(m map[string]*tensor.Tensor) { delete(m, "lr") }},
		{"no step", func(m map[string]*tensor.Tensor) { delete(m, "step") }},
		{"no momentum", func(m map[string]*tensor.Tensor) { delete(m, "momentum_buffer.f32") }},
		{"momentum shape", func(m map[string]*tensor.Tensor) { m["momentum_buffer.f32"] = tensor.Zeros(tensor.F32, 7) }},
		{"momentum dtype", func(m map[string]*tensor.Tensor) { m["momentum_buffer.f32"] = tensor.Zeros(tensor.I64, 6) }},
		{"negative lr", func(m map[string]*tensor.Tensor) { m["lr"] = tensor.Scalar(tensor.F64, -1) }},
		{"NaN lr", func(m map[string]*tensor.Tensor) { m["lr"] = tensor.Scalar(tensor.F64, math.NaN()) }},
		{"fractional step", func(m map[string]*tensor.Tensor) { m["step"] = tensor.Scalar(tensor.F64, 1.5) }},
		{"two-element step", func(m map[string]*tensor.Tensor) { m["step"] = tensor.Zeros(tensor.F64, 2) }},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			sd := good()
			c.edit(sd)
			if err := opt.LoadStateDict(sd); err == nil {
				t.Fatal("LoadStateDict accepted a bad state dict")
			}
			if opt.LR() != optim.DefaultSGDLR {
				t.Errorf("a rejected LoadStateDict changed LR to %v", opt.LR())
			}
		})
	}
	if err := opt.LoadStateDict(good()); err != nil {
		t.Errorf("good state dict: %v", err)
	}
}

func TestSGDOptions(t *testing.T) {
	ps := func() []*autograd.Var { return randParams(t, tensor.NewRNG(11), tensor.F32, []int{2}) }
	bad := []struct {
		name string
		o    optim.SGDOptions
	}{
		{"negative lr", optim.SGDOptions{LR: -0.1}},
		{"NaN lr", optim.SGDOptions{LR: math.NaN()}},
		{"negative momentum", optim.SGDOptions{Momentum: -0.1}},
		{"negative weight decay", optim.SGDOptions{WeightDecay: -1}},
		{"infinite weight decay", optim.SGDOptions{WeightDecay: math.Inf(1)}},
		{"negative dampening", optim.SGDOptions{Momentum: 0.9, Dampening: -1}},
		{"nesterov without momentum", optim.SGDOptions{Nesterov: true}},
		{"nesterov with dampening", optim.SGDOptions{Momentum: 0.9, Dampening: 0.1, Nesterov: true}},
	}
	for _, c := range bad {
		t.Run(c.name, func(t *testing.T) {
			if _, err := optim.NewSGD(ps(), c.o); !errors.Is(err, optim.ErrOptions) {
				t.Errorf("NewSGD: %v, want ErrOptions", err)
			}
		})
	}
	half := []*autograd.Var{autograd.Param(testdevice.To(t, tensor.Zeros(tensor.BF16, 4)))}
	if _, err := optim.NewSGD(half, optim.SGDOptions{}); !errors.Is(err, optim.ErrOptions) {
		t.Errorf("NewSGD over BF16 parameters: %v, want ErrOptions", err)
	}
	if _, err := optim.NewAdamW(half, optim.AdamWOptions{}); !errors.Is(err, optim.ErrOptions) {
		t.Errorf("NewAdamW over BF16 parameters: %v, want ErrOptions", err)
	}
	opt, err := optim.NewSGD(ps(), optim.SGDOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if opt.LR() != optim.DefaultSGDLR || opt.Options().LR != optim.DefaultSGDLR {
		t.Errorf("default LR %v", opt.LR())
	}
	if _, err := optim.NewSGDOnArena(nil, optim.SGDOptions{}); err == nil {
		t.Error("NewSGDOnArena(nil) succeeded")
	}
	mustPanic(t, "learning rate", func() { opt.SetLR(-1) })
}

// TestSGDCaptureReplay records one step with the CPU backend's capture and
// replays it: each replay advances the step counter and reads the learning
// rate set since, as a captured training step must.
func TestSGDCaptureReplay(t *testing.T) {
	defer failOnPanic(t)
	rng := tensor.NewRNG(12)
	ps := randParams(t, rng, tensor.F32, []int{300, 30}, []int{30})
	o := optim.SGDOptions{LR: 0.1, Momentum: 0.9, WeightDecay: 1e-3}
	opt, err := optim.NewSGD(ps, o)
	if err != nil {
		t.Fatal(err)
	}
	ref := &refSGD{lr: o.LR, momentum: o.Momentum, wd: o.WeightDecay}
	want := values(t, ps)

	gs := randGrads(rng, ps)
	setGrads(t, ps, gs)
	opt.Step() // eager warm-up
	ref.update(want, gs)

	before := values(t, ps)
	g := capture(t, opt.Step)
	if g.Len() != 2 {
		t.Errorf("captured SGD step has %d launches, want 2 (Increment, SGDStep)", g.Len())
	}
	for i := range ps {
		if relErr(f64(t, ps[i].Value), before[i]) != 0 {
			t.Fatal("capture executed the step")
		}
	}
	for r := 0; r < 3; r++ {
		if r == 2 {
			opt.SetLR(0.01)
			ref.lr = 0.01
		}
		gs := randGrads(rng, ps)
		setGrads(t, ps, gs)
		g.Replay()
		ref.update(want, gs)
		for i, p := range ps {
			if e := relErr(f64(t, p.Value), want[i]); e > 1e-5 {
				t.Fatalf("replay %d param %d: rel err %.3g", r, i, e)
			}
		}
	}
	if opt.StepCount() != 4 {
		t.Errorf("StepCount after 1 eager step and 3 replays = %d", opt.StepCount())
	}
}

// TestSGDFollowsRebuild grows the parameter set mid-run: the old
// parameters keep their momentum, the new one starts from zero state.
func TestSGDFollowsRebuild(t *testing.T) {
	defer failOnPanic(t)
	rng := tensor.NewRNG(13)
	ps := randParams(t, rng, tensor.F64, []int{10}, []int{3, 4}, []int{6})
	o := optim.SGDOptions{LR: 0.1, Momentum: 0.9}
	opt, err := optim.NewSGD(ps[:2], o)
	if err != nil {
		t.Fatal(err)
	}
	ref := &refSGD{lr: o.LR, momentum: o.Momentum}
	want := values(t, ps[:2])
	for i := 0; i < 2; i++ {
		gs := randGrads(rng, ps[:2])
		setGrads(t, ps[:2], gs)
		opt.Step()
		ref.update(want, gs)
	}
	if err := opt.Arena().Rebuild([]*autograd.Var{ps[2], ps[1], ps[0]}); err != nil {
		t.Fatal(err)
	}
	gs := randGrads(rng, ps)
	setGrads(t, ps, gs)
	opt.Step()
	ref.update(want, gs[:2])
	for i := 0; i < 2; i++ {
		if e := relErr(f64(t, ps[i].Value), want[i]); e > 1e-12 {
			t.Errorf("kept param %d lost its momentum: rel err %.3g", i, e)
		}
	}
	// The new parameter's buffer was zero at step 3 (not 1): buf = g.
	sd := f64(t, opt.StateDict()["momentum_buffer.f64"])
	for j, v := range sd[:6] {
		if math.Abs(v-gs[2][j]) > 1e-12 {
			t.Fatalf("new param momentum[%d] = %v, want the gradient %v", j, v, gs[2][j])
		}
	}
}

// TestCapturedStepAllocatesNothing: a replayed optimizer step (with the
// scaler and clipping) must not allocate, the W1 budget's premise.
func TestCapturedStepAllocatesNothing(t *testing.T) {
	defer failOnPanic(t)
	rng := tensor.NewRNG(14)
	ps := randParams(t, rng, tensor.F32, []int{16, 4}, []int{4})
	for _, mk := range []func() (optim.Optimizer, error){
		func() (optim.Optimizer, error) { return optim.NewSGD(ps, optim.SGDOptions{Momentum: 0.9}) },
		func() (optim.Optimizer, error) { return optim.NewAdamW(ps, optim.AdamWOptions{}) },
	} {
		opt, err := mk()
		if err != nil {
			t.Fatal(err)
		}
		s, err := optim.NewGradScaler(optim.GradScalerOptions{Device: testdevice.Device(t)})
		if err != nil {
			t.Fatal(err)
		}
		setGrads(t, ps, randGrads(rng, ps))
		g := capture(t, func() {
			s.Unscale(opt)
			optim.ClipGradNorm(opt.Arena(), 1)
			s.Step(opt)
			s.Update()
			opt.ZeroGrad()
		})
		if n := testing.AllocsPerRun(20, g.Replay); n != 0 {
			t.Errorf("%T: a replay allocates %v times", opt, n)
		}
	}
}
