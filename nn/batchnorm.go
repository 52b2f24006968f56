package nn

import (
	"fmt"

	"github.com/esper-go/esper/autograd"
	"github.com/esper-go/esper/kernels"
	"github.com/esper-go/esper/tensor"
)

// BatchNorm2dOptions configure a BatchNorm2d layer.
type BatchNorm2dOptions struct {
	// Channels is C of the [N, C, H, W] input (required, > 0).
	Channels int
	// Eps is added to the variance; zero means 1e-5.
	Eps float64
	// Momentum of the running statistics, in (0, 1]; zero means 0.1:
	// running = (1−Momentum)·running + Momentum·batch.
	Momentum float64
	// NoAffine leaves out the learned per-channel scale and shift; by
	// default the layer has them (PyTorch's affine=True).
	NoAffine bool
	// DType of the parameters and buffers; zero means F32.
	DType tensor.DType
}

// BatchNorm2d normalises each channel of NCHW input, like PyTorch's
// nn.BatchNorm2d. In training mode it uses the batch mean and biased
// variance over (N, H, W) and updates the running statistics with the
// unbiased variance; in evaluation mode it uses the running statistics.
// Weight (init 1) and Bias (init 0) are [Channels], nil with NoAffine;
// RunningMean (init 0) and RunningVar (init 1) are the buffers
// "running_mean" and "running_var". PyTorch's num_batches_tracked is not
// kept (it only matters for momentum=None).
type BatchNorm2d struct {
	leaf
	Weight      *autograd.Var
	Bias        *autograd.Var
	RunningMean *tensor.Tensor
	RunningVar  *tensor.Tensor
	opts        BatchNorm2dOptions
}

// NewBatchNorm2d returns a BatchNorm2d in training mode.
func NewBatchNorm2d(o BatchNorm2dOptions) (*BatchNorm2d, error) {
	const name = "BatchNorm2d"
	dt, err := paramDType(name, o.DType)
	if err != nil {
		return nil, err
	}
	o.DType = dt
	if o.Eps == 0 {
		o.Eps = 1e-5
	}
	if o.Momentum == 0 {
		o.Momentum = 0.1
	}
	switch {
	case o.Channels <= 0:
		return nil, optionsErr(name, "Channels must be positive, got %d", o.Channels)
	case !(o.Eps > 0):
		return nil, optionsErr(name, "Eps must be positive, got %v", o.Eps)
	case !(o.Momentum > 0 && o.Momentum <= 1):
		return nil, optionsErr(name, "Momentum must be in (0, 1], got %v", o.Momentum)
	}
	if err := checkSizes(name, dt, []int{4, o.Channels}); err != nil { // weight, bias and two running statistics
		return nil, err
	}
	b := &BatchNorm2d{opts: o}
	if !o.NoAffine {
		b.Weight = b.addParam("weight", tensor.Ones(dt, o.Channels))
		b.Bias = b.addParam("bias", tensor.Zeros(dt, o.Channels))
	}
	b.RunningMean = b.addBuffer("running_mean", tensor.Zeros(dt, o.Channels))
	b.RunningVar = b.addBuffer("running_var", tensor.Ones(dt, o.Channels))
	return b, nil
}

// MustBatchNorm2d is NewBatchNorm2d that panics on invalid options.
func MustBatchNorm2d(o BatchNorm2dOptions) *BatchNorm2d { return must(NewBatchNorm2d(o)) }

// Options returns the options the layer was built with (defaults filled).
func (b *BatchNorm2d) Options() BatchNorm2dOptions { return b.opts }

// Forward normalises x [N, Channels, H, W]; in training mode it also
// updates the running statistics in place (even under autograd.NoGrad, as
// PyTorch does).
func (b *BatchNorm2d) Forward(x *autograd.Var) *autograd.Var {
	b.check(x)
	return autograd.BatchNorm(x, b.Weight, b.Bias, b.RunningMean, b.RunningVar, b.Training(), b.opts.Momentum, b.opts.Eps)
}

// ForwardRelu is Relu(Forward(x)) with the ReLU folded into the batch
// norm's passes (autograd.BatchNormRelu): the same values and gradients,
// one pass fewer each way.
func (b *BatchNorm2d) ForwardRelu(x *autograd.Var) *autograd.Var {
	b.check(x)
	return autograd.BatchNormRelu(x, b.Weight, b.Bias, b.RunningMean, b.RunningVar, b.Training(), b.opts.Momentum, b.opts.Eps)
}

// ForwardReluMaxPool is a 2×2, stride-2 max pool of ForwardRelu(x), the
// pool folded into the batch norm's normalising pass
// (autograd.BatchNormReluMaxPool): the same values and gradients without
// writing the full-size activation. x's planes must be at least 2×2.
func (b *BatchNorm2d) ForwardReluMaxPool(x *autograd.Var) *autograd.Var {
	b.check(x)
	return autograd.BatchNormReluMaxPool(x, b.Weight, b.Bias, b.RunningMean, b.RunningVar, b.Training(), b.opts.Momentum, b.opts.Eps)
}

// check panics on an input Forward cannot take.
func (b *BatchNorm2d) check(x *autograd.Var) {
	if x.Value.Rank() != 4 || x.Value.Dim(1) != b.opts.Channels {
		panic(fmt.Sprintf("nn: BatchNorm2d(%d) got input of shape %v (want [N %d H W])", b.opts.Channels, x.Shape(), b.opts.Channels))
	}
	if s := x.Shape(); b.Training() && s[0]*s[2]*s[3] < 2 {
		// The unbiased variance of the running statistics needs two
		// values (PyTorch raises the same error).
		panic(fmt.Sprintf("nn: BatchNorm2d(%d) in training mode needs more than one value per channel, got input of shape %v", b.opts.Channels, s))
	}
}

// EvalAffine returns the per-channel scale and shift that the layer
// applies in eval mode, y = x·scale + shift with scale = w/√(var + ε) and
// shift = b − mean·scale (w = 1, b = 0 without affine), computed on the
// layer's device without gradient (autograd.BatchNormEvalAffine: one
// launch where the backend fuses it), so that a captured step reads the
// running statistics of its replay, not of its capture.
func (b *BatchNorm2d) EvalAffine() (scale, shift *autograd.Var) {
	return autograd.BatchNormEvalAffine(b.Weight, b.Bias, b.RunningMean, b.RunningVar, b.opts.Eps)
}

// ConvBNReluMaxPool is a 2×2, stride-2 max pool of ConvBNRelu(conv, bn,
// x), the block's full-size activation never written: with gradients
// on, the pool folds into the batch norm (BatchNorm2d.ForwardReluMaxPool);
// in inference with bn in eval mode, the batch norm, ReLU and pool fold
// into the convolution's epilogue (autograd.Conv2dAffineActMaxPool). The
// output planes of the convolution must be at least 2×2.
func ConvBNReluMaxPool(conv *Conv2d, bn *BatchNorm2d, x *autograd.Var) *autograd.Var {
	if !autograd.GradEnabled() && !bn.Training() {
		scale, shift, ok := convBNFold(conv, bn, x)
		if !ok {
			return autograd.MaxPool2d(ConvBNRelu(conv, bn, x), kernels.Pool2dParams{KernelH: 2, KernelW: 2})
		}
		return autograd.Conv2dAffineActMaxPool(x, conv.Weight, scale, shift, kernels.Relu, conv.params)
	}
	return bn.ForwardReluMaxPool(conv.Forward(x))
}

// ConvBNRelu is relu(bn(conv(x))), the usual CNN block. With gradients
// off (NoGrad, InferenceMode) and bn in eval mode, the BatchNorm and the
// ReLU are folded into the convolution's epilogue
// (autograd.Conv2dAffineAct): one pass over the output instead of three,
// and one output tensor instead of three; the values agree with the three
// layers to rounding. Otherwise the convolution runs, then the batch norm
// with the ReLU folded into its passes (ForwardRelu).
func ConvBNRelu(conv *Conv2d, bn *BatchNorm2d, x *autograd.Var) *autograd.Var {
	scale, shift, ok := convBNFold(conv, bn, x)
	if !ok {
		return bn.ForwardRelu(conv.Forward(x))
	}
	return autograd.Conv2dAffineAct(x, conv.Weight, scale, shift, kernels.Relu, conv.params)
}

// convBNFold returns the per-channel affine map of bn folded after conv
// (the convolution's bias included) when the two can run as one
// convolution with an epilogue: gradients off, bn in eval mode, no
// autocast, matching dtypes and widths. It panics on an input conv
// cannot take.
func convBNFold(conv *Conv2d, bn *BatchNorm2d, x *autograd.Var) (scale, shift *autograd.Var, ok bool) {
	fold := !autograd.GradEnabled() && !bn.Training() && autograd.AutocastDType() == 0 &&
		x.Value.DType() == conv.Weight.Value.DType() && bn.opts.Channels == conv.opts.OutChannels
	if !fold {
		return nil, nil, false
	}
	if x.Value.Rank() != 4 || x.Value.Dim(1) != conv.opts.InChannels {
		panic(fmt.Sprintf("nn: Conv2d(%d→%d) got input of shape %v (want [N %d H W])", conv.opts.InChannels, conv.opts.OutChannels, x.Shape(), conv.opts.InChannels))
	}
	scale, shift = bn.EvalAffine()
	if conv.Bias != nil {
		autograd.NoGrad(func() { shift = autograd.Add(shift, autograd.Mul(conv.Bias, scale)) })
	}
	return scale, shift, true
}
