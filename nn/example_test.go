package nn_test

import (
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"sort"

	"github.com/esper-go/esper/autograd"
	"github.com/esper-go/esper/kernels"
	"github.com/esper-go/esper/nn"
	"github.com/esper-go/esper/tensor"
)

func ExampleNewLinear() {
	rng := tensor.NewRNG(1)
	fc, err := nn.NewLinear(rng, nn.LinearOptions{In: 8, Out: 4})
	if err != nil {
		panic(err)
	}
	moveTo(fc) // layers are built on the CPU; nn.To moves them
	x := autograd.Const(toDevice(tensor.Normal(rng, tensor.F32, 0, 1, 5, 8)))
	y := fc.Forward(x)
	fmt.Println(fc.Weight.Shape(), fc.Bias.Shape(), y.Shape())
	// Output: [4 8] [4] [5 4]
}

func ExampleNewConv2d() {
	rng := tensor.NewRNG(1)
	conv := nn.MustConv2d(rng, nn.Conv2dOptions{InChannels: 3, OutChannels: 16, KernelH: 3, Stride: 2, Padding: 1, NoBias: true})
	moveTo(conv)
	y := conv.Forward(autograd.Const(toDevice(tensor.Zeros(tensor.F32, 2, 3, 32, 32))))
	fmt.Println(conv.Weight.Shape(), conv.Bias == nil, y.Shape())
	// Output: [16 3 3 3] true [2 16 16 16]
}

func ExampleNewBatchNorm2d() {
	bn := nn.MustBatchNorm2d(nn.BatchNorm2dOptions{Channels: 2})
	moveTo(bn)
	// Two samples, two channels: channel 0 sees 1 and 10, channel 1 sees 3
	// and 30.
	x := autograd.Const(toDevice(tensor.FromSlice([]float32{1, 3, 10, 30}, 2, 2, 1, 1)))

	// Training mode: normalise with the batch statistics and update the
	// running ones (momentum 0.1, unbiased variance).
	bn.Forward(x)
	fmt.Printf("running mean %.3f, running var %.3f\n", onHost(bn.RunningMean).Float64s(), onHost(bn.RunningVar).Float64s())

	// Evaluation mode: normalise with the running statistics.
	nn.Eval(bn)
	y := bn.Forward(x)
	fmt.Printf("eval output %.3f\n", onHost(y.Value).Float64s())
	// Output:
	// running mean [0.550 1.650], running var [4.950 37.350]
	// eval output [0.202 0.221 4.247 4.639]
}

func ExampleBatchNorm2d_ForwardRelu() {
	bn := nn.MustBatchNorm2d(nn.BatchNorm2dOptions{Channels: 1})
	moveTo(bn)
	// One channel, four values: normalised to zero mean and unit
	// variance, then clipped at zero in the same pass.
	x := autograd.Param(toDevice(tensor.FromSlice([]float32{1, 2, 3, 4}, 4, 1, 1, 1)))
	y := bn.ForwardRelu(x)
	fmt.Printf("%.3f\n", onHost(y.Value).Float64s())
	// The gradient of Σy flows in only where the output is positive
	// (dy = 0, 0, 1, 1), and then back through the normalisation:
	// (dy − mean(dy) − x̂·mean(dy·x̂))/σ with x̂ = (x − 2.5)/√1.25.
	autograd.Backward(autograd.Sum(y, []int{0, 1, 2, 3}, false))
	fmt.Printf("%.3f\n", onHost(x.Grad).Float64s())
	// Output:
	// [0.000 0.000 0.447 1.342]
	// [0.089 -0.268 0.268 -0.089]
}

func ExampleNewGroupNorm() {
	gn := nn.MustGroupNorm(nn.GroupNormOptions{Groups: 2, Channels: 4})
	moveTo(gn)
	y := gn.Forward(autograd.Const(toDevice(tensor.Arange(tensor.F32, 0, 16, 1).Reshape(1, 4, 2, 2))))
	fmt.Printf("%.3f\n", onHost(y.Value).Float64s()[:8])
	// Output: [-1.528 -1.091 -0.655 -0.218 0.218 0.655 1.091 1.528]
}

func ExampleGroupNorm_ForwardRelu() {
	gn := nn.MustGroupNorm(nn.GroupNormOptions{Groups: 2, Channels: 4})
	moveTo(gn)
	x := autograd.Param(toDevice(tensor.Arange(tensor.F32, 0, 16, 1).Reshape(1, 4, 2, 2)))
	// Each group of two channels normalised, then clipped at zero in the
	// same pass.
	y := gn.ForwardRelu(x)
	fmt.Printf("%.3f\n", onHost(y.Value).Float64s()[:8])
	// The gradient of Σy reaches only the positive outputs' inputs
	// through the normalisation.
	autograd.Backward(autograd.SumAll(y))
	fmt.Printf("%.3f\n", onHost(x.Grad).Float64s()[:8])
	// Output:
	// [0.000 0.000 0.000 0.000 0.218 0.655 1.091 1.528]
	// [0.073 -0.010 -0.094 -0.177 0.177 0.094 0.010 -0.073]
}

func ExampleNewLayerNorm() {
	ln := nn.MustLayerNorm(nn.LayerNormOptions{Shape: []int{4}})
	moveTo(ln)
	y := ln.Forward(autograd.Const(toDevice(tensor.FromSlice([]float32{1, 2, 3, 4}, 1, 4))))
	fmt.Printf("%.3f\n", onHost(y.Value).Float64s())
	// Output: [-1.342 -0.447 0.447 1.342]
}

func ExampleNewEmbedding() {
	emb := nn.MustEmbedding(tensor.NewRNG(1), nn.EmbeddingOptions{Num: 100, Dim: 16})
	moveTo(emb)
	tokens := toDevice(tensor.FromSlice([]int64{3, 14, 15, 92, 65, 35}, 2, 3))
	y := emb.Forward(autograd.Const(tokens))
	fmt.Println(y.Shape())
	// Output: [2 3 16]
}

func ExampleNewDropout() {
	drop := nn.MustDropout(nn.DropoutOptions{P: 0.5, Seed: 7})
	moveTo(drop) // its random state moves with it
	x := autograd.Const(toDevice(tensor.Ones(tensor.F32, 1000)))

	y := drop.Forward(x) // training mode: about half are zeroed, the rest doubled
	kept := 0
	for _, v := range onHost(y.Value).Float64s() {
		if v == 2 {
			kept++
		}
	}
	fmt.Println(kept > 400 && kept < 600)

	nn.Eval(drop) // evaluation mode: the identity
	fmt.Println(drop.Forward(x) == x)
	// Output:
	// true
	// true
}

func ExampleNewMaxPool2d() {
	pool := nn.MustMaxPool2d(nn.Pool2dOptions{Kernel: 2})
	x := toDevice(tensor.Arange(tensor.F32, 0, 16, 1).Reshape(1, 1, 4, 4))
	fmt.Println(onHost(pool.Forward(autograd.Const(x)).Value).Float64s())
	// Output: [5 7 13 15]
}

func ExampleNewAvgPool2d() {
	pool := nn.MustAvgPool2d(nn.Pool2dOptions{Kernel: 2})
	x := toDevice(tensor.Arange(tensor.F32, 0, 16, 1).Reshape(1, 1, 4, 4))
	fmt.Println(onHost(pool.Forward(autograd.Const(x)).Value).Float64s())
	// Output: [2.5 4.5 10.5 12.5]
}

func ExampleGlobalAvgPool() {
	x := toDevice(tensor.Arange(tensor.F32, 0, 8, 1).Reshape(1, 2, 2, 2))
	y := (&nn.GlobalAvgPool{}).Forward(autograd.Const(x))
	fmt.Println(y.Shape(), onHost(y.Value).Float64s())
	// Output: [1 2] [1.5 5.5]
}

func ExampleGELU() {
	x := autograd.Const(toDevice(tensor.FromSlice([]float32{-1, 0, 1})))
	exact := (&nn.GELU{}).Forward(x)
	tanh := (&nn.GELU{Approximate: true}).Forward(x)
	fmt.Printf("%.4f %.4f\n", onHost(exact.Value).Float64s(), onHost(tanh.Value).Float64s())
	// Output: [-0.1587 0.0000 0.8413] [-0.1588 0.0000 0.8412]
}

func ExampleReLU() {
	x := autograd.Const(toDevice(tensor.FromSlice([]float32{-2, 0, 2})))
	for _, m := range []nn.Module{&nn.ReLU{}, &nn.SiLU{}, &nn.Sigmoid{}, &nn.Tanh{}} {
		fmt.Printf("%T %.3f\n", m, onHost(m.Forward(x).Value).Float64s())
	}
	// Output:
	// *nn.ReLU [0.000 0.000 2.000]
	// *nn.SiLU [-0.238 0.000 1.762]
	// *nn.Sigmoid [0.119 0.500 0.881]
	// *nn.Tanh [-0.964 0.000 0.964]
}

func ExampleDropout_State() {
	drop := nn.MustDropout(nn.DropoutOptions{P: 0.1, Seed: 42})
	moveTo(drop)
	x := autograd.Const(toDevice(tensor.Ones(tensor.F32, 8)))
	drop.Forward(x)
	drop.Forward(x)
	fmt.Println(onHost(drop.State()).I64()) // {seed, calls so far}
	// Output: [42 2]
}

func ExampleFlatten() {
	x := autograd.Const(toDevice(tensor.Zeros(tensor.F32, 2, 3, 4, 5)))
	fmt.Println((&nn.Flatten{}).Forward(x).Shape(), (&nn.Flatten{StartAxis: 2}).Forward(x).Shape())
	// Output: [2 60] [2 3 20]
}

func ExampleNewSequential() {
	rng := tensor.NewRNG(1)
	net := nn.NewSequential(
		nn.MustLinear(rng, nn.LinearOptions{In: 8, Out: 16}),
		&nn.ReLU{},
		nn.MustLinear(rng, nn.LinearOptions{In: 16, Out: 4}),
	)
	for _, p := range net.NamedParameters() {
		fmt.Println(p.Name, p.Var.Shape())
	}
	// Output:
	// 0.weight [16 8]
	// 0.bias [16]
	// 2.weight [4 16]
	// 2.bias [4]
}

// Net is a model written outside nn: embed Composite, register the
// children by name and write Forward.
type Net struct {
	nn.Composite
	fc1, fc2 *nn.Linear
}

func NewNet(seed uint64) *Net {
	rng := tensor.NewRNG(seed)
	n := &Net{
		fc1: nn.MustLinear(rng, nn.LinearOptions{In: 4, Out: 8}),
		fc2: nn.MustLinear(rng, nn.LinearOptions{In: 8, Out: 2}),
	}
	n.Register("fc1", n.fc1)
	n.Register("fc2", n.fc2)
	return n
}

func (n *Net) Forward(x *autograd.Var) *autograd.Var {
	return n.fc2.Forward(autograd.Relu(n.fc1.Forward(x)))
}

func ExampleComposite() {
	net := NewNet(1)
	for _, p := range net.NamedParameters() {
		fmt.Println(p.Name, p.Var.Name)
	}
	// Output:
	// fc1.weight fc1.weight
	// fc1.bias fc1.bias
	// fc2.weight fc2.weight
	// fc2.bias fc2.bias
}

func ExampleNewMLP() {
	mlp := nn.MustMLP(tensor.NewRNG(1), nn.MLPOptions{
		Sizes:      []int{784, 256, 10},
		Activation: func() nn.Module { return &nn.GELU{} },
		Dropout:    0.1,
	})
	for i := 0; i < mlp.Len(); i++ {
		fmt.Printf("%d %T\n", i, mlp.At(i))
	}
	// Output:
	// 0 *nn.Linear
	// 1 *nn.GELU
	// 2 *nn.Dropout
	// 3 *nn.Linear
}

func ExampleEval() {
	net := nn.NewSequential(nn.MustBatchNorm2d(nn.BatchNorm2dOptions{Channels: 3}), nn.MustDropout(nn.DropoutOptions{P: 0.2}))
	fmt.Println(net.Training(), net.At(0).Training())
	nn.Eval(net)
	fmt.Println(net.Training(), net.At(0).Training())
	nn.Train(net)
	fmt.Println(net.Training(), net.At(1).Training())
	// Output:
	// true true
	// false false
	// true true
}

func ExampleStateDict() {
	net := nn.NewSequential(nn.MustConv2d(tensor.NewRNG(1), nn.Conv2dOptions{InChannels: 1, OutChannels: 4, KernelH: 3}),
		nn.MustBatchNorm2d(nn.BatchNorm2dOptions{Channels: 4}))
	moveTo(net)
	sd := nn.StateDict(net) // copies, on the module's device
	var names []string
	for k := range sd {
		names = append(names, k)
	}
	sort.Strings(names)
	fmt.Println(names)
	// Output: [0.bias 0.weight 1.bias 1.running_mean 1.running_var 1.weight]
}

func ExampleLoadStateDict() {
	a := nn.MustLinear(tensor.NewRNG(1), nn.LinearOptions{In: 3, Out: 2})
	b := nn.MustLinear(tensor.NewRNG(2), nn.LinearOptions{In: 3, Out: 2})
	moveTo(a)
	moveTo(b)
	if err := nn.LoadStateDict(b, nn.StateDict(a), true); err != nil {
		panic(err)
	}
	fmt.Println(onHost(a.Weight.Value).Float64s()[0] == onHost(b.Weight.Value).Float64s()[0])

	// A wrong shape is refused before anything is copied.
	err := nn.LoadStateDict(b, map[string]*tensor.Tensor{"weight": toDevice(tensor.Zeros(tensor.F32, 3, 2))}, false)
	fmt.Println(err)
	// Output:
	// true
	// nn: load state dict: weight: shape [2 3] in module, [3 2] in state dict
}

func ExampleStateDictError() {
	m := nn.MustLinear(tensor.NewRNG(1), nn.LinearOptions{In: 3, Out: 2})
	moveTo(m)
	err := nn.LoadStateDict(m, map[string]*tensor.Tensor{"weight": toDevice(tensor.Zeros(tensor.F32, 2, 3)), "scale": toDevice(tensor.Ones(tensor.F32, 1))}, true)
	var se *nn.StateDictError
	if errors.As(err, &se) {
		fmt.Println(se.Missing, se.Unexpected)
	}
	// Output: [bias] [scale]
}

func ExampleSave() {
	dir, err := os.MkdirTemp("", "nn-example")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "model.safetensors")

	trained := nn.MustMLP(tensor.NewRNG(1), nn.MLPOptions{Sizes: []int{4, 8, 2}})
	moveTo(trained)
	// Save copies a device's tensors to the host explicitly.
	if err := nn.Save(path, trained, map[string]string{"epoch": "10"}); err != nil {
		panic(err)
	}

	fresh := nn.MustMLP(tensor.NewRNG(2), nn.MLPOptions{Sizes: []int{4, 8, 2}})
	moveTo(fresh)
	// Load copies the file's tensors to the module's device.
	if err := nn.Load(path, fresh); err != nil {
		panic(err)
	}
	fmt.Println(onHost(nn.StateDict(fresh)["2.bias"]).Float64s()[0] == onHost(nn.StateDict(trained)["2.bias"]).Float64s()[0])
	// Output: true
}

func ExampleLoad() {
	dir, err := os.MkdirTemp("", "nn-example")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "broken.safetensors")
	if err := os.WriteFile(path, []byte{200, 0, 0, 0, 0, 0, 0, 0, '{'}, 0o644); err != nil {
		panic(err)
	}
	m := nn.MustLinear(tensor.NewRNG(1), nn.LinearOptions{In: 3, Out: 2})
	moveTo(m)
	before := onHost(m.Weight.Value).Float64s()
	err = nn.Load(path, m)
	fmt.Println(err != nil, onHost(m.Weight.Value).Float64s()[0] == before[0])
	// Output: true true
}

func ExampleKaimingUniform() {
	w := toDevice(tensor.Empty(tensor.F32, 256, 512))
	nn.KaimingUniform(tensor.NewRNG(1), w, nn.KaimingOptions{Nonlinearity: nn.NonlinearityReLU})
	bound := math.Sqrt(6.0 / 512) // gain √2 · √(3/fan_in)
	max := 0.0
	for _, v := range onHost(w).Float64s() {
		max = math.Max(max, math.Abs(v))
	}
	fmt.Println(max <= bound)
	// Output: true
}

// std returns the standard deviation of t's elements about zero.
func std(t *tensor.Tensor) float64 {
	var s float64
	for _, v := range onHost(t).Float64s() {
		s += v * v
	}
	return math.Sqrt(s / float64(t.Numel()))
}

func ExampleKaimingNormal() {
	// A conv weight [out, in, kh, kw]: fan_out = 64·3·3.
	w := toDevice(tensor.Empty(tensor.F32, 64, 32, 3, 3))
	nn.KaimingNormal(tensor.NewRNG(1), w, nn.KaimingOptions{Mode: nn.FanOut, Nonlinearity: nn.NonlinearityReLU})
	fmt.Printf("std %.3f, target √(2/576) = %.3f\n", std(w), math.Sqrt(2.0/576))
	// Output: std 0.059, target √(2/576) = 0.059
}

func ExampleXavierUniform() {
	w := toDevice(tensor.Empty(tensor.F32, 300, 500))
	nn.XavierUniform(tensor.NewRNG(1), w, nn.Gain(nn.NonlinearityTanh, 0))
	fmt.Printf("std %.3f, target 5/3·√(2/800) = %.3f\n", std(w), 5.0/3*math.Sqrt(2.0/800))
	// Output: std 0.083, target 5/3·√(2/800) = 0.083
}

func ExampleXavierNormal() {
	w := toDevice(tensor.Empty(tensor.F32, 300, 500))
	nn.XavierNormal(tensor.NewRNG(1), w, 1)
	fmt.Printf("std %.3f\n", std(w))
	// Output: std 0.050
}

func ExampleUniform() {
	w := toDevice(tensor.Empty(tensor.F32, 2, 3))
	nn.Zeros(w)
	fmt.Println(onHost(w).Float64s())
	nn.Ones(w)
	fmt.Println(onHost(w).Float64s())
	nn.Constant(w, 0.5)
	fmt.Println(onHost(w).Float64s())
	nn.Uniform(tensor.NewRNG(1), w, -1, 1)
	nn.Normal(tensor.NewRNG(1), w, 0, 0.02)
	fmt.Println(w.Shape())
	// Output:
	// [0 0 0 0 0 0]
	// [1 1 1 1 1 1]
	// [0.5 0.5 0.5 0.5 0.5 0.5]
	// [2 3]
}

func ExampleOrthogonal() {
	w := toDevice(tensor.Empty(tensor.F64, 3, 5))
	nn.Orthogonal(tensor.NewRNG(1), w, 1)
	// The rows are orthonormal: W·Wᵀ = I.
	x := autograd.Const(w)
	g := onHost(autograd.MatMulT(x, x, false, true).Value)
	for i := 0; i < 3; i++ {
		fmt.Printf("%.6f\n", g.Select(0, i).Float64s())
	}
	// Output:
	// [1.000000 0.000000 0.000000]
	// [0.000000 1.000000 0.000000]
	// [0.000000 0.000000 1.000000]
}

func ExampleGain() {
	fmt.Printf("%.4f %.4f %.4f\n", nn.Gain(nn.NonlinearityReLU, 0), nn.Gain(nn.NonlinearityTanh, 0), nn.Gain(nn.NonlinearityLeakyReLU, math.Sqrt(5)))
	// Output: 1.4142 1.6667 0.5774
}

func ExampleFans() {
	in, out := nn.Fans([]int{16, 3, 5, 5})
	fmt.Println(in, out)
	// Output: 75 400
}

func ExampleErrOptions() {
	_, err := nn.NewConv2d(tensor.NewRNG(1), nn.Conv2dOptions{InChannels: 3, OutChannels: 8, KernelH: 3, Groups: 2})
	fmt.Println(errors.Is(err, nn.ErrOptions))
	fmt.Println(err)
	// Output:
	// true
	// nn: Conv2d: invalid options: InChannels 3 and OutChannels 8 must be divisible by Groups 2
}

// A cross-entropy training step on a Sequential, for orientation: the
// module moved to its device, the batch copied there.
func Example() {
	rng := tensor.NewRNG(1)
	net := nn.NewSequential(
		nn.MustConv2d(rng, nn.Conv2dOptions{InChannels: 1, OutChannels: 4, KernelH: 3, Padding: 1}),
		nn.MustBatchNorm2d(nn.BatchNorm2dOptions{Channels: 4}),
		&nn.ReLU{},
		nn.MustMaxPool2d(nn.Pool2dOptions{Kernel: 2}),
		&nn.Flatten{},
		nn.MustLinear(rng, nn.LinearOptions{In: 4 * 4 * 4, Out: 3}),
	)
	moveTo(net)
	x := toDevice(tensor.Normal(rng, tensor.F32, 0, 1, 6, 1, 8, 8))
	target := toDevice(tensor.RandInt(rng, 3, 6))

	loss := autograd.CrossEntropy(net.Forward(autograd.Const(x)), target, kernels.CrossEntropyParams{})
	autograd.Backward(loss)
	for _, p := range net.NamedParameters() {
		fmt.Println(p.Name, p.Var.Grad.Shape())
	}
	// Output:
	// 0.weight [4 1 3 3]
	// 0.bias [4]
	// 1.weight [4]
	// 1.bias [4]
	// 5.weight [3 64]
	// 5.bias [3]
}
