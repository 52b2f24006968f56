package nn

import (
	"reflect"
	"runtime"
	"testing"

	"github.com/esper-go/esper/autograd"
	"github.com/esper-go/esper/kernels"
	"github.com/esper-go/esper/tensor"
)

// trainCNN trains a small Conv-BN-ReLU-MaxPool-Flatten-Linear network for
// steps steps of SGD with momentum (written out here so that the test
// covers nn, autograd and the kernels only) under GOMAXPROCS procs and
// returns the raw bytes of its final state dict. It fails the test when
// the loss does not fall.
func trainCNN(t *testing.T, procs int, seed uint64, steps int) map[string]string {
	t.Helper()
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(procs))

	rng := tensor.NewRNG(seed)
	net := NewSequential(
		MustConv2d(rng, Conv2dOptions{InChannels: 1, OutChannels: 16, KernelH: 3, Padding: 1}),
		MustBatchNorm2d(BatchNorm2dOptions{Channels: 16}),
		&ReLU{},
		MustMaxPool2d(Pool2dOptions{Kernel: 2}),
		&Flatten{},
		MustLinear(rng, LinearOptions{In: 16 * 6 * 6, Out: 10}),
	)
	x := tensor.Normal(rng, tensor.F32, 0, 1, 16, 1, 12, 12)
	target := tensor.RandInt(rng, 10, 16)

	const lr, momentum = 0.05, 0.9
	params := net.Parameters()
	bufs := make([][]float32, len(params))
	for i, p := range params {
		bufs[i] = make([]float32, p.Value.Numel())
	}
	var first, last float64
	for step := 0; step < steps; step++ {
		for _, p := range params {
			p.ZeroGrad()
		}
		loss := autograd.CrossEntropy(net.Forward(autograd.Const(x)), target, kernels.CrossEntropyParams{})
		autograd.Backward(loss)
		if last = loss.Item(); step == 0 {
			first = last
		}
		for i, p := range params {
			w, g, b := p.Value.F32(), p.Grad.F32(), bufs[i]
			for j := range w {
				b[j] = momentum*b[j] + g[j]
				w[j] -= lr * b[j]
			}
		}
	}
	check(t, steps < 2 || last < first/2, "loss went from %v to %v in %d steps", first, last, steps)
	return bits(net)
}

// TestCNNDeterminism: the same seed gives bitwise the same trained
// parameters and running statistics for any GOMAXPROCS and on every run.
func TestCNNDeterminism(t *testing.T) {
	const steps = 20
	one := trainCNN(t, 1, 77, steps)
	two := trainCNN(t, 2, 77, steps)
	again := trainCNN(t, 2, 77, steps)
	many := trainCNN(t, runtime.NumCPU(), 77, steps)
	for name, got := range map[string]map[string]string{"GOMAXPROCS=2": two, "second run": again, "GOMAXPROCS=NumCPU": many} {
		for k := range one {
			if got[k] != one[k] {
				t.Errorf("%s: %s differs bitwise from the GOMAXPROCS=1 run", name, k)
			}
		}
	}
	other := trainCNN(t, 2, 78, steps)
	check(t, !reflect.DeepEqual(one, other), "a different seed trained to the same parameters")
	initial := trainCNN(t, 1, 77, 0)
	check(t, !reflect.DeepEqual(one, initial), "training did not change the parameters")
}
