package nn

import (
	"testing"

	"github.com/esper-go/esper/autograd"
	"github.com/esper-go/esper/internal/testdevice"
	"github.com/esper-go/esper/kernels"
	"github.com/esper-go/esper/tensor"
)

// The parity tests rebuild the PyTorch models of testdata/fixtures (see its
// README), load the stored initial state by name through LoadStateDict and
// compare every output, gradient and updated buffer.

func TestMLPParity(t *testing.T) {
	f := readFixture(t, "mlp.safetensors")
	rng := tensor.NewRNG(1)
	net := onDev(t, NewSequential(
		MustLinear(rng, LinearOptions{In: 8, Out: 16}),
		&ReLU{},
		MustLinear(rng, LinearOptions{In: 16, Out: 4}),
	))
	noErr(t, LoadStateDict(net, devDict(t, withPrefix(f, "param.")), true))

	x := autograd.Param(testdevice.To(t, fixture(t, f, "input.x").Clone()))
	logits := net.Forward(x)
	loss := autograd.CrossEntropy(logits, testdevice.To(t, fixture(t, f, "input.target")), kernels.CrossEntropyParams{})
	autograd.Backward(loss)

	p := newParity(t)
	p.check("output.logits", logits.Value, fixture(t, f, "output.logits"))
	p.check("output.loss", loss.Value, fixture(t, f, "output.loss"))
	for _, np := range net.NamedParameters() {
		p.check("grad."+np.Name, np.Var.Grad, fixture(t, f, "grad."+np.Name))
	}
	p.check("grad_input.x", x.Grad, fixture(t, f, "grad_input.x"))
	p.report()
}

// newFixtureCNN builds the model of cnn.safetensors (its initial values
// come from the fixture).
func newFixtureCNN() *Sequential {
	rng := tensor.NewRNG(2)
	return NewSequential(
		MustConv2d(rng, Conv2dOptions{InChannels: 1, OutChannels: 4, KernelH: 3, Padding: 1, NoBias: true}),
		MustBatchNorm2d(BatchNorm2dOptions{Channels: 4}),
		&ReLU{},
		MustMaxPool2d(Pool2dOptions{Kernel: 2}),
		&Flatten{},
		MustLinear(rng, LinearOptions{In: 64, Out: 3}),
	)
}

func TestCNNParity(t *testing.T) {
	f := readFixture(t, "cnn.safetensors")
	net := onDev(t, newFixtureCNN())
	noErr(t, LoadStateDict(net, devDict(t, withPrefix(f, "param.")), true))
	check(t, net.Training(), "a new Sequential is not in training mode")

	x := autograd.Param(testdevice.To(t, fixture(t, f, "input.x").Clone()))
	logits := net.Forward(x)
	loss := autograd.CrossEntropy(logits, testdevice.To(t, fixture(t, f, "input.target")), kernels.CrossEntropyParams{})
	autograd.Backward(loss)

	p := newParity(t)
	p.check("output.logits", logits.Value, fixture(t, f, "output.logits"))
	p.check("output.loss", loss.Value, fixture(t, f, "output.loss"))
	for _, np := range net.NamedParameters() {
		p.check("grad."+np.Name, np.Var.Grad, fixture(t, f, "grad."+np.Name))
	}
	p.check("grad_input.x", x.Grad, fixture(t, f, "grad_input.x"))
	for _, b := range net.NamedBuffers() {
		p.check("after.fwd."+b.Name, b.Tensor, fixture(t, f, "after.fwd."+b.Name))
	}

	// Eval mode: the same parameters, the running statistics after that
	// one forward, and no further update of them.
	Eval(net)
	before := StateDict(net)
	var eval *autograd.Var
	autograd.NoGrad(func() { eval = net.Forward(autograd.Const(testdevice.To(t, fixture(t, f, "input.x")))) })
	p.check("output.eval_logits", eval.Value, fixture(t, f, "output.eval_logits"))
	for k, v := range StateDict(net) {
		check(t, relErr(t, v, before[k]) == 0, "%s changed in an eval forward", k)
	}
	p.report()
}

// fnModule adapts an autograd function without an nn layer (Softplus).
type fnModule struct {
	leaf
	f func(*autograd.Var) *autograd.Var
}

func (m *fnModule) Forward(x *autograd.Var) *autograd.Var { return m.f(x) }

func TestLayersParity(t *testing.T) {
	f := readFixture(t, "layers.safetensors")
	rng := tensor.NewRNG(3)
	cases := []struct {
		prefix  string
		mod     Module
		params  []string // state-dict names loaded from <prefix>.<name>
		buffers []string
	}{
		{"layernorm", MustLayerNorm(LayerNormOptions{Shape: []int{10}}), []string{"weight", "bias"}, nil},
		{"groupnorm", MustGroupNorm(GroupNormOptions{Groups: 2, Channels: 6}), []string{"weight", "bias"}, nil},
		{"embedding", MustEmbedding(rng, EmbeddingOptions{Num: 11, Dim: 5}), []string{"weight"}, nil},
		{"gelu_tanh", &GELU{Approximate: true}, nil, nil},
		{"gelu_erf", &GELU{}, nil, nil},
		{"silu", &SiLU{}, nil, nil},
		{"sigmoid", &Sigmoid{}, nil, nil},
		{"tanh", &Tanh{}, nil, nil},
		{"softplus", &fnModule{f: autograd.Softplus}, nil, nil},
		{"batchnorm", MustBatchNorm2d(BatchNorm2dOptions{Channels: 3}), []string{"weight", "bias"}, []string{"running_mean", "running_var"}},
	}
	worst, worstKey := 0.0, ""
	for _, c := range cases {
		t.Run(c.prefix, func(t *testing.T) {
			sd := map[string]*tensor.Tensor{}
			for _, n := range append(append([]string(nil), c.params...), c.buffers...) {
				sd[n] = fixture(t, f, c.prefix+"."+n)
			}
			onDev(t, c.mod)
			noErr(t, LoadStateDict(c.mod, devDict(t, sd), true))

			xt := fixture(t, f, c.prefix+".x")
			x := autograd.Const(testdevice.To(t, xt))
			if xt.DType().IsFloat() {
				x = autograd.Param(testdevice.To(t, xt.Clone()))
			}
			y := c.mod.Forward(x)
			autograd.Backward(y, testdevice.To(t, fixture(t, f, c.prefix+".dy")))

			p := newParity(t)
			p.check(c.prefix+".y", y.Value, fixture(t, f, c.prefix+".y"))
			if xt.DType().IsFloat() {
				p.check(c.prefix+".grad_x", x.Grad, fixture(t, f, c.prefix+".grad_x"))
			}
			for _, np := range c.mod.NamedParameters() {
				key := c.prefix + ".grad_" + np.Name
				p.check(key, np.Var.Grad, fixture(t, f, key))
			}
			for _, b := range c.mod.NamedBuffers() {
				key := c.prefix + "." + b.Name + "_after"
				p.check(key, b.Tensor, fixture(t, f, key))
			}
			p.report()
			if p.worst > worst {
				worst, worstKey = p.worst, p.worstKey
			}
		})
	}
	t.Logf("worst relative error over layers.safetensors %.3g (%s)", worst, worstKey)
}
