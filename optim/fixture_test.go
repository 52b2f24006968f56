package optim_test

import (
	"fmt"
	"testing"

	"github.com/esper-go/esper/autograd"
	"github.com/esper-go/esper/internal/testdevice"
	"github.com/esper-go/esper/kernels"
	"github.com/esper-go/esper/optim"
	"github.com/esper-go/esper/tensor"
	"github.com/esper-go/esper/tensor/safetensors"
)

const mlpFixture = "../testdata/fixtures/mlp.safetensors"

// mlpParams are the state-dict names of the fixture MLP, in model order:
// Linear(8,16) → ReLU → Linear(16,4).
var mlpParams = []string{"0.weight", "0.bias", "2.weight", "2.bias"}

// fixtureTol is the per-tensor relative error (max|a−b| / max|b|) allowed
// against the PyTorch trajectories.
const fixtureTol = 1e-5

// TestMLPTrajectories trains the fixture MLP for three steps with each
// optimizer the fixture recorded, exactly as the PyTorch script did, and
// compares every parameter after every step.
func TestMLPTrajectories(t *testing.T) {
	defer failOnPanic(t)
	f, err := safetensors.ReadFile(mlpFixture)
	if err != nil {
		t.Fatal(err)
	}
	get := func(name string) *tensor.Tensor {
		t.Helper()
		x, ok := f.Tensors[name]
		if !ok {
			t.Fatalf("fixture has no %q", name)
		}
		return x
	}
	for _, k := range []string{"sgd.lr", "sgd.momentum", "sgd.weight_decay", "adamw.lr", "adamw.weight_decay", "adamw.betas", "adamw.eps"} {
		t.Logf("fixture %s = %s", k, f.Metadata[k])
	}
	cases := []struct {
		prefix string
		mk     func([]*autograd.Var) (optim.Optimizer, error)
	}{
		{"sgd", func(ps []*autograd.Var) (optim.Optimizer, error) {
			return optim.NewSGD(ps, optim.SGDOptions{LR: 0.1, Momentum: 0.9, WeightDecay: 5e-4})
		}},
		{"sgdnesterov", func(ps []*autograd.Var) (optim.Optimizer, error) {
			return optim.NewSGD(ps, optim.SGDOptions{LR: 0.1, Momentum: 0.9, WeightDecay: 5e-4, Nesterov: true})
		}},
		{"adamw", func(ps []*autograd.Var) (optim.Optimizer, error) {
			return optim.NewAdamW(ps, optim.AdamWOptions{LR: 0.01, Beta1: 0.9, Beta2: 0.999, Eps: 1e-8, WeightDecay: 0.01})
		}},
	}
	x, target := autograd.Const(testdevice.To(t, get("input.x"))), testdevice.To(t, get("input.target"))
	for _, c := range cases {
		t.Run(c.prefix, func(t *testing.T) {
			defer failOnPanic(t)
			ps := make([]*autograd.Var, len(mlpParams))
			for i, n := range mlpParams {
				ps[i] = autograd.Param(testdevice.To(t, get("param."+n).Clone()))
				ps[i].Name = n
			}
			opt, err := c.mk(ps)
			if err != nil {
				t.Fatal(err)
			}
			var worst float64
			for step := 1; step <= 3; step++ {
				opt.ZeroGrad()
				h := autograd.Relu(autograd.Linear(x, ps[0], ps[1]))
				logits := autograd.Linear(h, ps[2], ps[3])
				loss := autograd.CrossEntropy(logits, target, kernels.CrossEntropyParams{})
				if step == 1 {
					// The first forward and backward match the fixture's
					// single-step tensors; check them so that a failure
					// below points at the optimizer.
					if e := relErr(f64(t, loss.Value), f64(t, get("output.loss"))); e > fixtureTol {
						t.Fatalf("initial loss rel err %.3g", e)
					}
				}
				autograd.Backward(loss)
				if step == 1 {
					for i, n := range mlpParams {
						if e := relErr(f64(t, ps[i].Grad), f64(t, get("grad."+n))); e > fixtureTol {
							t.Fatalf("initial grad %s rel err %.3g", n, e)
						}
					}
				}
				opt.Step()
				for i, n := range mlpParams {
					want := get(fmt.Sprintf("%s.step%d.%s", c.prefix, step, n))
					e := relErr(f64(t, ps[i].Value), f64(t, want))
					worst = max(worst, e)
					if e > fixtureTol {
						t.Errorf("step %d %s: rel err %.3g > %g", step, n, e, fixtureTol)
					}
				}
			}
			t.Logf("%s: max rel err over 3 steps and 4 tensors = %.3g", c.prefix, worst)
		})
	}
}

// TestMLPCapturedTrajectories runs the same three steps through
// autograd.Capture (eager warm-up, capture, replay) with the arena version
// in the guard: the captured optimizer, scaler-free, must follow the
// PyTorch trajectories exactly as the eager one does.
func TestMLPCapturedTrajectories(t *testing.T) {
	defer failOnPanic(t)
	f, err := safetensors.ReadFile(mlpFixture)
	if err != nil {
		t.Fatal(err)
	}
	for _, prefix := range []string{"sgd", "adamw"} {
		t.Run(prefix, func(t *testing.T) {
			defer failOnPanic(t)
			ps := make([]*autograd.Var, len(mlpParams))
			for i, n := range mlpParams {
				ps[i] = autograd.Param(testdevice.To(t, f.Tensors["param."+n].Clone()))
			}
			var opt optim.Optimizer
			if prefix == "sgd" {
				opt, err = optim.NewSGD(ps, optim.SGDOptions{LR: 0.1, Momentum: 0.9, WeightDecay: 5e-4})
			} else {
				opt, err = optim.NewAdamW(ps, optim.AdamWOptions{LR: 0.01})
			}
			if err != nil {
				t.Fatal(err)
			}
			target := testdevice.To(t, f.Tensors["input.target"])
			step := autograd.Capture(func(in []*tensor.Tensor) []*tensor.Tensor {
				opt.ZeroGrad()
				h := autograd.Relu(autograd.Linear(autograd.Const(in[0]), ps[0], ps[1]))
				loss := autograd.CrossEntropy(autograd.Linear(h, ps[2], ps[3]), target, kernels.CrossEntropyParams{})
				autograd.Backward(loss)
				opt.Step()
				return []*tensor.Tensor{loss.Value}
			}, autograd.CaptureOptions{Version: opt.Arena().Version, Policy: autograd.FailOnMismatch})
			in := []*tensor.Tensor{testdevice.To(t, f.Tensors["input.x"])}
			for k := 1; k <= 3; k++ {
				if _, err := step.Run(in...); err != nil {
					t.Fatal(err)
				}
				for i, n := range mlpParams {
					want := f.Tensors[fmt.Sprintf("%s.step%d.%s", prefix, k, n)]
					if e := relErr(f64(t, ps[i].Value), f64(t, want)); e > fixtureTol {
						t.Errorf("step %d %s: rel err %.3g", k, n, e)
					}
				}
			}
			if st := step.Stats(); st.Captures != 1 || st.Replays < 1 {
				t.Errorf("capture stats %+v: want one capture and replays", st)
			}
			// Growing the parameter set changes the version: the guard
			// refuses the stale graph instead of replaying it.
			extra := autograd.Param(testdevice.To(t, tensor.Zeros(tensor.F32, 2)))
			if err := opt.Arena().Rebuild(append(opt.Arena().Params(), extra)); err != nil {
				t.Fatal(err)
			}
			if _, err := step.Run(in...); err == nil {
				t.Error("Run after Arena.Rebuild replayed a stale graph")
			}
		})
	}
}
