package nn_test

import (
	"reflect"
	"runtime"
	"testing"

	"github.com/esper-go/esper/autograd"
	"github.com/esper-go/esper/kernels"
	"github.com/esper-go/esper/nn"
	"github.com/esper-go/esper/optim"
	"github.com/esper-go/esper/tensor"
)

// sgdStep updates the parameters after a backward pass.
type sgdStep interface {
	ZeroGrad()
	Step()
}

// inlineSGD is SGD with momentum written out (p −= lr·(buf = 0.9·buf + g)),
// so that one determinism variant covers nn, autograd and the kernels only.
type inlineSGD struct {
	params []*autograd.Var
	bufs   [][]float32
	lr     float32
}

func newInlineSGD(ps []*autograd.Var, lr float32) *inlineSGD {
	s := &inlineSGD{params: ps, lr: lr}
	for _, p := range ps {
		s.bufs = append(s.bufs, make([]float32, p.Value.Numel()))
	}
	return s
}

func (s *inlineSGD) ZeroGrad() {
	for _, p := range s.params {
		p.ZeroGrad()
	}
}

func (s *inlineSGD) Step() {
	for i, p := range s.params {
		w, g, b := p.Value.F32(), p.Grad.F32(), s.bufs[i]
		for j := range w {
			b[j] = 0.9*b[j] + g[j]
			w[j] -= s.lr * b[j]
		}
	}
}

// trainCNN trains a small Conv-BN-ReLU-MaxPool-Flatten-Linear network on a
// fixed random batch of 16 1×12×12 images for steps steps under GOMAXPROCS
// procs and returns the raw bytes of its final state dict (parameters and
// running statistics). It fails the test when the loss does not fall.
func trainCNN(t *testing.T, useOptim bool, procs int, seed uint64, steps int) map[string]string {
	t.Helper()
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(procs))

	rng := tensor.NewRNG(seed)
	net := nn.NewSequential(
		nn.MustConv2d(rng, nn.Conv2dOptions{InChannels: 1, OutChannels: 16, KernelH: 3, Padding: 1}),
		nn.MustBatchNorm2d(nn.BatchNorm2dOptions{Channels: 16}),
		&nn.ReLU{},
		nn.MustMaxPool2d(nn.Pool2dOptions{Kernel: 2}),
		&nn.Flatten{},
		nn.MustLinear(rng, nn.LinearOptions{In: 16 * 6 * 6, Out: 10}),
	)
	x := autograd.Const(tensor.Normal(rng, tensor.F32, 0, 1, 16, 1, 12, 12))
	target := tensor.RandInt(rng, 10, 16)

	var opt sgdStep = newInlineSGD(net.Parameters(), 0.05)
	if useOptim {
		o, err := optim.NewSGD(net.Parameters(), optim.SGDOptions{LR: 0.05, Momentum: 0.9})
		if err != nil {
			t.Fatal(err)
		}
		opt = o
	}
	var first, last float64
	for step := 0; step < steps; step++ {
		opt.ZeroGrad()
		loss := autograd.CrossEntropy(net.Forward(x), target, kernels.CrossEntropyParams{})
		autograd.Backward(loss)
		opt.Step()
		if last = loss.Item(); step == 0 {
			first = last
		}
	}
	if steps > 1 && !(last < first/2) {
		t.Fatalf("loss went from %v to %v in %d steps", first, last, steps)
	}
	out := map[string]string{}
	for k, v := range nn.StateDict(net) {
		out[k] = string(v.Storage().Bytes())
	}
	return out
}

// TestCNNDeterminism: the same seed gives bitwise the same trained
// parameters and running statistics for any GOMAXPROCS and on every run.
func TestCNNDeterminism(t *testing.T) {
	const steps, seed = 20, 77
	for _, v := range []struct {
		name     string
		useOptim bool
	}{{"inline SGD", false}, {"optim.SGD", true}} {
		t.Run(v.name, func(t *testing.T) {
			one := trainCNN(t, v.useOptim, 1, seed, steps)
			runs := []struct {
				name string
				bits map[string]string
			}{
				{"GOMAXPROCS=2", trainCNN(t, v.useOptim, 2, seed, steps)},
				{"GOMAXPROCS=2 again", trainCNN(t, v.useOptim, 2, seed, steps)},
				{"GOMAXPROCS=1 again", trainCNN(t, v.useOptim, 1, seed, steps)},
				{"GOMAXPROCS=NumCPU", trainCNN(t, v.useOptim, runtime.NumCPU(), seed, steps)},
			}
			for _, r := range runs {
				if len(r.bits) != len(one) {
					t.Fatalf("%s: %d state-dict entries, want %d", r.name, len(r.bits), len(one))
				}
				for k := range one {
					if r.bits[k] != one[k] {
						t.Errorf("%s: %s differs bitwise from the GOMAXPROCS=1 run", r.name, k)
					}
				}
			}
			if reflect.DeepEqual(one, trainCNN(t, v.useOptim, 2, seed+1, steps)) {
				t.Error("a different seed trained to the same state")
			}
			if reflect.DeepEqual(one, trainCNN(t, v.useOptim, 1, seed, 0)) {
				t.Error("training did not change the state")
			}
		})
	}
}
