package nn

import (
	"math"
	"reflect"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/esper-go/esper/autograd"
	"github.com/esper-go/esper/internal/testdevice"
	"github.com/esper-go/esper/kernels"
	"github.com/esper-go/esper/tensor"
)

func names(ns []Named) []string {
	out := make([]string, len(ns))
	for i, n := range ns {
		out[i] = n.Name
	}
	return out
}

func bufferNames(ns []NamedBuffer) []string {
	out := make([]string, len(ns))
	for i, n := range ns {
		out[i] = n.Name
	}
	return out
}

// twoLayer is a user-defined module with named children, the way a model
// outside nn is written.
type twoLayer struct {
	Composite
	fc1, fc2 *Linear
	scale    *autograd.Var
}

func newTwoLayer(seed uint64) *twoLayer {
	rng := tensor.NewRNG(seed)
	n := &twoLayer{
		fc1:   MustLinear(rng, LinearOptions{In: 3, Out: 5}),
		fc2:   MustLinear(rng, LinearOptions{In: 5, Out: 2, NoBias: true}),
		scale: autograd.Param(tensor.Ones(tensor.F32, 1)),
	}
	n.RegisterParameter("scale", n.scale)
	n.Register("fc1", n.fc1)
	n.Register("fc2", n.fc2)
	n.RegisterBuffer("steps", tensor.Zeros(tensor.I64, 1))
	return n
}

func (n *twoLayer) Forward(x *autograd.Var) *autograd.Var {
	return autograd.Mul(n.fc2.Forward(autograd.Relu(n.fc1.Forward(x))), n.scale)
}

func TestNames(t *testing.T) {
	rng := tensor.NewRNG(1)
	inner := NewSequential(MustLinear(rng, LinearOptions{In: 4, Out: 4}), &ReLU{})
	cases := []struct {
		name    string
		m       Module
		params  []string
		buffers []string
	}{
		{"linear", MustLinear(rng, LinearOptions{In: 2, Out: 3}), []string{"weight", "bias"}, nil},
		{"linear no bias", MustLinear(rng, LinearOptions{In: 2, Out: 3, NoBias: true}), []string{"weight"}, nil},
		{"batchnorm", MustBatchNorm2d(BatchNorm2dOptions{Channels: 2}), []string{"weight", "bias"}, []string{"running_mean", "running_var"}},
		{"batchnorm no affine", MustBatchNorm2d(BatchNorm2dOptions{Channels: 2, NoAffine: true}), nil, []string{"running_mean", "running_var"}},
		{"cnn", newFixtureCNN(), []string{"0.weight", "1.weight", "1.bias", "5.weight", "5.bias"}, []string{"1.running_mean", "1.running_var"}},
		{"nested", NewSequential(inner, MustLinear(rng, LinearOptions{In: 4, Out: 1})), []string{"0.0.weight", "0.0.bias", "1.weight", "1.bias"}, nil},
		{"composite", newTwoLayer(1), []string{"scale", "fc1.weight", "fc1.bias", "fc2.weight"}, []string{"steps"}},
		{"mlp", MustMLP(rng, MLPOptions{Sizes: []int{8, 16, 16, 4}}), []string{"0.weight", "0.bias", "2.weight", "2.bias", "4.weight", "4.bias"}, nil},
		{"mlp norm dropout", MustMLP(rng, MLPOptions{Sizes: []int{8, 16, 4}, Dropout: 0.5,
			Norm: func(n int) Module { return MustLayerNorm(LayerNormOptions{Shape: []int{n}}) }}),
			[]string{"0.weight", "0.bias", "1.weight", "1.bias", "4.weight", "4.bias"}, nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			onDev(t, c.m) // moving keeps the variables and their names
			np := c.m.NamedParameters()
			if got := names(np); !reflect.DeepEqual(got, c.params) && (len(got) > 0 || len(c.params) > 0) {
				t.Errorf("parameters %q, want %q", got, c.params)
			}
			if got := bufferNames(c.m.NamedBuffers()); !reflect.DeepEqual(got, c.buffers) && (len(got) > 0 || len(c.buffers) > 0) {
				t.Errorf("buffers %q, want %q", got, c.buffers)
			}
			ps := c.m.Parameters()
			check(t, len(ps) == len(np), "Parameters has %d entries, NamedParameters %d", len(ps), len(np))
			for i, p := range ps {
				check(t, p == np[i].Var, "Parameters()[%d] is not NamedParameters()[%d].Var", i, i)
				check(t, p.Name == np[i].Name, "Var.Name %q, want the path %q", p.Name, np[i].Name)
				check(t, p.RequiresGrad(), "%s does not require grad", np[i].Name)
			}
		})
	}
}

func TestCompositeRegisterPanics(t *testing.T) {
	for _, name := range []string{"", "a.b", "fc1", "scale", "steps"} {
		t.Run(name, func(t *testing.T) {
			n := newTwoLayer(1)
			defer func() {
				check(t, recover() != nil, "Register(%q) did not panic", name)
			}()
			n.Register(name, &ReLU{})
		})
	}
}

func TestTrainEval(t *testing.T) {
	rng := tensor.NewRNG(4)
	bn := MustBatchNorm2d(BatchNorm2dOptions{Channels: 2})
	drop := MustDropout(DropoutOptions{P: 0.5, Seed: 9})
	net := NewSequential(bn, drop)
	check(t, net.Training() && bn.Training() && drop.Training(), "modules do not start in training mode")

	// Running statistics chosen so that eval output is known exactly.
	copy(bn.RunningMean.F32(), []float32{1, -2})
	copy(bn.RunningVar.F32(), []float32{4, 0.25})
	onDev(t, net)
	xh := tensor.Normal(rng, tensor.F32, 0.5, 2, 3, 2, 4, 4)
	x := testdevice.To(t, xh)

	Eval(net)
	check(t, !net.Training() && !bn.Training() && !drop.Training(), "Eval did not reach the children")
	var y *autograd.Var
	autograd.NoGrad(func() { y = net.Forward(autograd.Const(x)) })
	mean, vr := []float64{1, -2}, []float64{4, 0.25}
	xs, ys := xh.Float64s(), testdevice.F64(t, y.Value)
	for i := range xs {
		c := (i / 16) % 2
		want := (xs[i] - mean[c]) / sqrt(vr[c]+1e-5)
		check(t, abs(ys[i]-want) <= 1e-5*(1+abs(want)), "eval BatchNorm element %d = %v, want %v", i, ys[i], want)
	}
	check(t, at(t, bn.RunningMean, 0) == 1 && at(t, bn.RunningVar, 1) == 0.25, "eval forward changed the running statistics")
	check(t, drop.Forward(autograd.Const(x)).Value == x, "eval Dropout is not the identity")

	Train(net)
	check(t, net.Training() && bn.Training() && drop.Training(), "Train did not reach the children")
	autograd.NoGrad(func() { y = net.Forward(autograd.Const(x)) })
	check(t, at(t, bn.RunningMean, 0) != 1, "train forward did not update the running mean")
	// Train-mode BatchNorm output has per-channel batch mean 0; dropout
	// then zeroes about half the elements and doubles the others.
	zeros := 0
	for _, v := range testdevice.F64(t, y.Value) {
		if v == 0 {
			zeros++
		}
	}
	n := y.Value.Numel()
	check(t, zeros > n/4 && zeros < 3*n/4, "train Dropout(0.5) zeroed %d of %d elements", zeros, n)
}

func TestDropoutDeterministic(t *testing.T) {
	x := testdevice.To(t, tensor.Ones(tensor.F32, 64))
	run := func() [][]float64 {
		d := onDev(t, MustDropout(DropoutOptions{P: 0.3, Seed: 42}))
		var out [][]float64
		for i := 0; i < 3; i++ {
			out = append(out, testdevice.F64(t, d.Forward(autograd.Const(x)).Value))
		}
		return out
	}
	a, b := run(), run()
	check(t, reflect.DeepEqual(a, b), "same seed gave different masks")
	check(t, !reflect.DeepEqual(a[0], a[1]), "consecutive calls drew the same mask")
	for _, v := range a[0] {
		check(t, v == 0 || abs(v-1/0.7) < 1e-6, "dropout value %v, want 0 or 1/(1-p)", v)
	}
}

func TestForwardShapes(t *testing.T) {
	rng := tensor.NewRNG(5)
	x4 := autograd.Const(testdevice.To(t, tensor.Normal(rng, tensor.F32, 0, 1, 2, 4, 9, 8)))
	cases := []struct {
		name string
		m    Module
		x    *autograd.Var
		want []int
	}{
		{"linear", MustLinear(rng, LinearOptions{In: 8, Out: 3}), x4, []int{2, 4, 9, 3}},
		{"conv", MustConv2d(rng, Conv2dOptions{InChannels: 4, OutChannels: 6, KernelH: 3, KernelW: 2, Stride: 2, Padding: 1}), x4, []int{2, 6, 5, 5}},
		{"conv grouped dilated", MustConv2d(rng, Conv2dOptions{InChannels: 4, OutChannels: 8, KernelH: 3, Dilation: 2, Groups: 2}), x4, []int{2, 8, 5, 4}},
		{"maxpool", MustMaxPool2d(Pool2dOptions{Kernel: 2}), x4, []int{2, 4, 4, 4}},
		{"maxpool pad", MustMaxPool2d(Pool2dOptions{Kernel: 3, Stride: 2, Padding: 1}), x4, []int{2, 4, 5, 4}},
		{"avgpool", MustAvgPool2d(Pool2dOptions{Kernel: 3, Stride: 2, Padding: 1}), x4, []int{2, 4, 5, 4}},
		{"global avg", &GlobalAvgPool{}, x4, []int{2, 4}},
		{"flatten", &Flatten{}, x4, []int{2, 4 * 9 * 8}},
		{"flatten from 2", &Flatten{StartAxis: 2}, x4, []int{2, 4, 72}},
		{"groupnorm", MustGroupNorm(GroupNormOptions{Groups: 2, Channels: 4}), x4, []int{2, 4, 9, 8}},
		{"layernorm 2d", MustLayerNorm(LayerNormOptions{Shape: []int{9, 8}}), x4, []int{2, 4, 9, 8}},
		{"batchnorm", MustBatchNorm2d(BatchNorm2dOptions{Channels: 4}), x4, []int{2, 4, 9, 8}},
		{"embedding", MustEmbedding(rng, EmbeddingOptions{Num: 10, Dim: 3}), autograd.Const(testdevice.To(t, tensor.RandInt(rng, 10, 2, 5))), []int{2, 5, 3}},
		{"mlp", MustMLP(rng, MLPOptions{Sizes: []int{8, 5, 2}, Activation: func() Module { return &Tanh{} }}), x4, []int{2, 4, 9, 2}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			y := onDev(t, c.m).Forward(c.x)
			check(t, tensor.SameShape(y.Shape(), c.want), "output shape %v, want %v", y.Shape(), c.want)
			check(t, y.Value.Device() == testdevice.Device(t), "output on %v, want %v", y.Value.Device(), testdevice.Device(t))
		})
	}
}

func TestOptionsValidation(t *testing.T) {
	rng := tensor.NewRNG(6)
	cases := []struct {
		name string
		err  func() error
	}{
		{"linear zero in", func() error { _, err := NewLinear(rng, LinearOptions{Out: 3}); return err }},
		{"linear nil rng", func() error { _, err := NewLinear(nil, LinearOptions{In: 2, Out: 3}); return err }},
		{"linear int dtype", func() error { _, err := NewLinear(rng, LinearOptions{In: 2, Out: 3, DType: tensor.I64}); return err }},
		{"conv groups", func() error {
			_, err := NewConv2d(rng, Conv2dOptions{InChannels: 3, OutChannels: 4, KernelH: 3, Groups: 2})
			return err
		}},
		{"conv no kernel", func() error { _, err := NewConv2d(rng, Conv2dOptions{InChannels: 3, OutChannels: 4}); return err }},
		{"batchnorm momentum", func() error { _, err := NewBatchNorm2d(BatchNorm2dOptions{Channels: 3, Momentum: 1.5}); return err }},
		{"batchnorm eps", func() error { _, err := NewBatchNorm2d(BatchNorm2dOptions{Channels: 3, Eps: -1}); return err }},
		{"groupnorm divisible", func() error { _, err := NewGroupNorm(GroupNormOptions{Groups: 4, Channels: 6}); return err }},
		{"layernorm no shape", func() error { _, err := NewLayerNorm(LayerNormOptions{}); return err }},
		{"embedding", func() error { _, err := NewEmbedding(rng, EmbeddingOptions{Num: 3}); return err }},
		{"dropout p>1", func() error { _, err := NewDropout(DropoutOptions{P: 1.5}); return err }},
		{"dropout NaN", func() error { _, err := NewDropout(DropoutOptions{P: math.NaN()}); return err }},
		{"maxpool padding", func() error { _, err := NewMaxPool2d(Pool2dOptions{Kernel: 2, Padding: 2}); return err }},
		{"avgpool kernel", func() error { _, err := NewAvgPool2d(Pool2dOptions{}); return err }},
		{"mlp sizes", func() error { _, err := NewMLP(rng, MLPOptions{Sizes: []int{3}}); return err }},
		{"mlp zero width", func() error { _, err := NewMLP(rng, MLPOptions{Sizes: []int{3, 0, 2}}); return err }},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			err := c.err()
			check(t, err != nil, "no error")
			check(t, errorsIs(err, ErrOptions), "error %v does not wrap ErrOptions", err)
		})
	}
}

func TestMustPanics(t *testing.T) {
	defer func() { check(t, recover() != nil, "MustLinear did not panic") }()
	MustLinear(tensor.NewRNG(1), LinearOptions{})
}

// TestLinearForwardRelu: the fused ForwardRelu equals a Linear followed by
// ReLU, value and gradients, and checks its input like Forward.
func TestLinearForwardRelu(t *testing.T) {
	l := onDev(t, MustLinear(tensor.NewRNG(3), LinearOptions{In: 6, Out: 5}))
	x := testdevice.To(t, tensor.Uniform(tensor.NewRNG(4), tensor.F32, -2, 2, 7, 6))
	run := func(f func(*autograd.Var) *autograd.Var) ([]float32, []float32) {
		l.Weight.Grad = nil
		y := f(autograd.Const(x))
		autograd.Backward(autograd.SumAll(y))
		return testdevice.F32(t, y.Value), testdevice.F32(t, l.Weight.Grad)
	}
	y, g := run(l.ForwardRelu)
	yRef, gRef := run(func(v *autograd.Var) *autograd.Var { return autograd.Relu(l.Forward(v)) })
	require.Equal(t, yRef, y)
	require.Equal(t, gRef, g)
	require.Contains(t, yRef, float32(0), "some outputs clamped")
	require.PanicsWithValue(t, "nn: Linear(6→5) got input of shape [7 4]", func() {
		l.ForwardRelu(autograd.Const(testdevice.To(t, tensor.Empty(tensor.F32, 7, 4))))
	})
}

// TestConvBNReluFolds: in inference with the BatchNorm in eval mode,
// ConvBNRelu (one folded convolution) agrees with the three layers to
// rounding, with and without the convolution's bias and the norm's
// affine, and reads the running statistics current at the call; in
// training it is the three layers (bitwise, gradients flowing).
func TestConvBNReluFolds(t *testing.T) {
	for _, c := range []struct{ bias, affine bool }{{false, true}, {true, true}, {false, false}} {
		rng := tensor.NewRNG(8)
		conv := onDev(t, MustConv2d(rng, Conv2dOptions{InChannels: 3, OutChannels: 5, KernelH: 3, Padding: 1, NoBias: !c.bias}))
		bn := onDev(t, MustBatchNorm2d(BatchNorm2dOptions{Channels: 5, NoAffine: !c.affine}))
		x := autograd.Const(testdevice.To(t, tensor.Normal(rng, tensor.F32, 0, 1, 4, 3, 6, 6)))
		// Train a few steps so the running statistics are not 0 and 1.
		for i := 0; i < 3; i++ {
			bn.Forward(conv.Forward(x))
		}
		if c.affine {
			testdevice.Set(bn.Weight.Value, 1.5, 0)
			testdevice.Set(bn.Bias.Value, -0.25, 2)
		}
		bn.SetTraining(false)
		var fused, ref *autograd.Var
		autograd.InferenceMode(func() {
			fused = ConvBNRelu(conv, bn, x)
			ref = autograd.Relu(bn.Forward(conv.Forward(x)))
		})
		f, r := testdevice.F32(t, fused.Value), testdevice.F32(t, ref.Value)
		require.Equal(t, len(r), len(f))
		zeros := 0
		for i := range r {
			require.InDelta(t, r[i], f[i], 1e-5*(1+math.Abs(float64(r[i]))), "element %d (%+v)", i, c)
			if r[i] == 0 {
				zeros++
			}
		}
		require.True(t, zeros > 0 && zeros < len(r), "relu clamps some outputs")
		// Statistics changed after a fold are used by the next one.
		testdevice.Set(bn.RunningMean, 3, 1)
		var again, ref2 *autograd.Var
		autograd.InferenceMode(func() {
			again = ConvBNRelu(conv, bn, x)
			ref2 = autograd.Relu(bn.Forward(conv.Forward(x)))
		})
		require.InDeltaSlice(t, testdevice.F64(t, ref2.Value), testdevice.F64(t, again.Value), 1e-4)

		bn.SetTraining(true)
		y := ConvBNRelu(conv, bn, x)
		require.True(t, y.RequiresGrad(), "training mode keeps the graph")
	}
	conv := onDev(t, MustConv2d(tensor.NewRNG(1), Conv2dOptions{InChannels: 1, OutChannels: 2, KernelH: 3}))
	require.PanicsWithValue(t, "autograd: conv2d_affine_act has no gradient: call it under NoGrad or InferenceMode", func() {
		s := autograd.Const(testdevice.To(t, tensor.Ones(tensor.F32, 2)))
		autograd.Conv2dAffineAct(autograd.Const(testdevice.To(t, tensor.Zeros(tensor.F32, 1, 1, 4, 4))), conv.Weight, s, s, kernels.Relu, conv.Params())
	})
}
