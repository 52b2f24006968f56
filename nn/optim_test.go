package nn_test

import (
	"math"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/esper-go/esper/autograd"
	"github.com/esper-go/esper/internal/testdevice"
	"github.com/esper-go/esper/kernels"
	"github.com/esper-go/esper/nn"
	"github.com/esper-go/esper/optim"
	"github.com/esper-go/esper/tensor"
	"github.com/esper-go/esper/tensor/safetensors"
)

// TestCNNOptimizerTrajectories trains the cnn.safetensors model for three
// steps with optim's SGD and AdamW, whose arena repoints every parameter's
// Value, and compares every state-dict entry (BatchNorm running statistics
// included) after each step with PyTorch's. It checks that nn reads Value
// afresh on every Forward and that StateDict follows the arena.
func TestCNNOptimizerTrajectories(t *testing.T) {
	f, err := safetensors.ReadFile(filepath.Join("..", "testdata", "fixtures", "cnn.safetensors"))
	if err != nil {
		t.Fatal(err)
	}
	type stepper interface {
		ZeroGrad()
		Step()
	}
	cases := []struct {
		prefix string
		opt    func(ps []*autograd.Var) (stepper, error)
	}{
		{"sgd", func(ps []*autograd.Var) (stepper, error) {
			return optim.NewSGD(ps, optim.SGDOptions{LR: 0.1, Momentum: 0.9, WeightDecay: 5e-4})
		}},
		{"adamw", func(ps []*autograd.Var) (stepper, error) {
			return optim.NewAdamW(ps, optim.AdamWOptions{LR: 0.01, Beta1: 0.9, Beta2: 0.999, Eps: 1e-8, WeightDecay: 0.01})
		}},
	}
	for _, c := range cases {
		t.Run(c.prefix, func(t *testing.T) {
			rng := tensor.NewRNG(2)
			net := onDevice(t, nn.NewSequential(
				nn.MustConv2d(rng, nn.Conv2dOptions{InChannels: 1, OutChannels: 4, KernelH: 3, Padding: 1, NoBias: true}),
				nn.MustBatchNorm2d(nn.BatchNorm2dOptions{Channels: 4}),
				&nn.ReLU{},
				nn.MustMaxPool2d(nn.Pool2dOptions{Kernel: 2}),
				&nn.Flatten{},
				nn.MustLinear(rng, nn.LinearOptions{In: 64, Out: 3}),
			))
			init := map[string]*tensor.Tensor{}
			for _, k := range f.Names() {
				if len(k) > 6 && k[:6] == "param." {
					init[k[6:]] = testdevice.To(t, f.Tensors[k])
				}
			}
			if err := nn.LoadStateDict(net, init, true); err != nil {
				t.Fatal(err)
			}
			opt, err := c.opt(net.Parameters())
			if err != nil {
				t.Fatal(err)
			}
			if d := opt.(interface{ Arena() *optim.Arena }).Arena().Device(); d != testdevice.Device(t) {
				t.Fatalf("the optimizer's arena is on %v, want %v", d, testdevice.Device(t))
			}
			x := autograd.Const(testdevice.To(t, f.Tensors["input.x"]))
			target := testdevice.To(t, f.Tensors["input.target"])
			worst := 0.0
			for step := 1; step <= 3; step++ {
				opt.ZeroGrad()
				loss := autograd.CrossEntropy(net.Forward(x), target, kernels.CrossEntropyParams{})
				autograd.Backward(loss)
				opt.Step()
				sd, err := nn.HostStateDict(net)
				if err != nil {
					t.Fatal(err)
				}
				for name, got := range sd {
					key := c.prefix + ".step" + strconv.Itoa(step) + "." + name
					want, ok := f.Tensors[key]
					if !ok {
						t.Fatalf("fixture has no %s", key)
					}
					// The README's suggested check for trajectories:
					// atol 1e-5, rtol 1e-4.
					g, w := got.Float64s(), want.Float64s()
					for i := range w {
						d := math.Abs(g[i] - w[i])
						worst = math.Max(worst, d)
						if d > 1e-5+1e-4*math.Abs(w[i]) {
							t.Fatalf("%s[%d] = %v, want %v", key, i, g[i], w[i])
						}
					}
				}
			}
			t.Logf("worst absolute error over 3 steps %.3g", worst)
		})
	}
}
