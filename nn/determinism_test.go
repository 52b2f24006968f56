package nn_test

import (
	"math"
	"reflect"
	"runtime"
	"strconv"
	"testing"

	"github.com/esper-go/esper/autograd"
	"github.com/esper-go/esper/internal/testdevice"
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

// inlineSGD is SGD with momentum written out with elementwise backend ops
// on the parameters' device (p −= lr·(buf = 0.9·buf + g)), so that one
// determinism variant covers nn, autograd and the kernels only.
type inlineSGD struct {
	params    []*autograd.Var
	bufs, tmp []*tensor.Tensor
	lr        float64
}

func newInlineSGD(t *testing.T, ps []*autograd.Var, lr float64) *inlineSGD {
	s := &inlineSGD{params: ps, lr: lr}
	zeros := func(p *autograd.Var) *tensor.Tensor {
		z, err := tensor.EmptyOn(p.Value.Device(), p.Value.DType(), p.Value.Shape()...)
		if err != nil {
			t.Fatal(err)
		}
		kernels.For(z.Device()).Fill(z, 0)
		return z
	}
	for _, p := range ps {
		s.bufs = append(s.bufs, zeros(p))
		s.tmp = append(s.tmp, zeros(p))
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
		be, b := kernels.For(p.Value.Device()), s.bufs[i]
		be.BinaryScalar(kernels.Mul, b, b, 0.9, false)
		be.Binary(kernels.Add, b, b, p.Grad)
		be.BinaryScalar(kernels.Mul, s.tmp[i], b, s.lr, false)
		be.Binary(kernels.Sub, p.Value, p.Value, s.tmp[i])
	}
}

// trainCNN trains a small Conv-BN-ReLU-MaxPool-Flatten-Linear network on a
// fixed random batch of 16 1×12×12 images for steps steps under GOMAXPROCS
// procs on the test device and returns the raw bytes of its final state
// dict (parameters and running statistics, host copies). It fails the
// test when the loss does not fall.
func trainCNN(t *testing.T, useOptim bool, procs int, seed uint64, steps int) map[string]string {
	t.Helper()
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(procs))

	rng := tensor.NewRNG(seed)
	net := onDevice(t, nn.NewSequential(
		nn.MustConv2d(rng, nn.Conv2dOptions{InChannels: 1, OutChannels: 16, KernelH: 3, Padding: 1}),
		nn.MustBatchNorm2d(nn.BatchNorm2dOptions{Channels: 16}),
		&nn.ReLU{},
		nn.MustMaxPool2d(nn.Pool2dOptions{Kernel: 2}),
		&nn.Flatten{},
		nn.MustLinear(rng, nn.LinearOptions{In: 16 * 6 * 6, Out: 10}),
	))
	x := autograd.Const(testdevice.To(t, tensor.Normal(rng, tensor.F32, 0, 1, 16, 1, 12, 12)))
	target := testdevice.To(t, tensor.RandInt(rng, 10, 16))

	var opt sgdStep = newInlineSGD(t, net.Parameters(), 0.05)
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
		if last = testdevice.Item(t, loss.Value); step == 0 {
			first = last
		}
	}
	if steps > 1 && !(last < first/2) {
		t.Fatalf("loss went from %v to %v in %d steps", first, last, steps)
	}
	sd, err := nn.HostStateDict(net)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for k, v := range sd {
		for _, f := range v.Float64s() { // float32 widens exactly
			out[k] += strconv.FormatUint(math.Float64bits(f), 16) + " "
		}
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
