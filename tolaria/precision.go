package tolaria

import (
	"fmt"

	"github.com/esper-go/esper/autograd"
	"github.com/esper-go/esper/kasmina"
	"github.com/esper-go/esper/kernels"
	"github.com/esper-go/esper/optim"
	"github.com/esper-go/esper/tensor"
)

// AMPMode selects the trainer's automatic mixed precision
// (TrainerOptions.AMP).
type AMPMode string

// AMP modes (ARCHITECTURE.md "Precision").
const (
	// AMPOff trains in fp32.
	AMPOff AMPMode = ""
	// AMPBF16 runs the forward pass and the loss under
	// autograd.Autocast(BF16): matmuls and convolutions in bf16 with fp32
	// accumulation, the loss and every gradient in fp32. bf16 has fp32's
	// range, so no loss scaling is needed.
	AMPBF16 AMPMode = "bf16"
	// AMPFP16 runs the forward pass under autograd.Autocast(F16) and
	// scales the loss with an optim.GradScaler: the gradients are
	// unscaled and checked before clipping, a step with an inf or NaN
	// gradient is skipped by every optimizer, and the scale backs off
	// (or grows after 2000 clean steps).
	AMPFP16 AMPMode = "fp16"
)

// scalerPrefix is where a checkpoint keeps the GradScaler's state.
const scalerPrefix = "amp/scaler/"

// precision is the trainer's mixed-precision setup: the autocast dtype
// and, for fp16, the loss scaler. Everything it does in a step only
// launches kernels, so the step stays capturable.
type precision struct {
	mode   AMPMode
	cast   tensor.DType // BF16 or F16; Invalid without AMP
	scaler *optim.GradScaler
	dev    tensor.Device
	be     kernels.Backend
	inv    *tensor.Tensor // F32 [1]: 1/scale for the seed optimizers' gradients
	grads  []*tensor.Tensor
}

// newPrecision validates mode and builds the scaler on dev.
func newPrecision(mode AMPMode, dev tensor.Device) (*precision, error) {
	p := &precision{mode: mode, cast: tensor.Invalid, dev: dev}
	switch mode {
	case AMPOff:
		return p, nil
	case AMPBF16:
		p.cast = tensor.BF16
		return p, nil
	case AMPFP16:
		p.cast = tensor.F16
	default:
		return nil, fmt.Errorf("%w: AMP %q (want \"\", %q or %q)", ErrOptions, string(mode), AMPBF16, AMPFP16)
	}
	s, err := optim.NewGradScaler(optim.GradScalerOptions{Device: dev})
	if err != nil {
		return nil, fmt.Errorf("tolaria: grad scaler: %w", err)
	}
	be, err := kernels.Lookup(dev)
	if err != nil {
		return nil, fmt.Errorf("tolaria: grad scaler: %w", err)
	}
	inv, err := tensor.EmptyOn(dev, tensor.F32, 1)
	if err != nil {
		return nil, fmt.Errorf("tolaria: grad scaler: %w", err)
	}
	p.scaler, p.be, p.inv = s, be, inv
	return p, nil
}

// enabled reports whether a mixed-precision mode is on.
func (p *precision) enabled() bool { return p.mode != AMPOff }

// forward runs f (the forward pass and the loss) under autocast when AMP
// is on.
//
// autograd's autocast dtype is process-wide, not per goroutine: while f
// runs, any other goroutine building a graph (a late controller still
// running its own inference, another trainer in the same process) also
// sees it. Run concurrent AMP trainers in separate processes.
func (p *precision) forward(f func()) {
	if p.cast == tensor.Invalid {
		f()
		return
	}
	autograd.Autocast(p.cast, f)
}

// scale returns the loss to differentiate: multiplied by the scaler's
// device-resident scale under fp16, loss itself otherwise.
func (p *precision) scale(loss *autograd.Var) *autograd.Var {
	if p.scaler == nil {
		return loss
	}
	return p.scaler.Scale(loss)
}

// unscale divides every optimizer's gradients by the scale and records
// in the scaler's found-inf flag whether any of them is inf or NaN. It
// returns that flag (nil without a scaler), for every optimizer's
// StepSkipIf: one bad gradient anywhere skips the whole step, host and
// seeds alike (PyTorch skips per optimizer; one model's step is one
// decision here, so no seed moves on a step its host discarded).
//
// The GradScaler unscales one optimizer per iteration; the host's goes
// through it (which zeroes the flag), the seeds' through the same
// UnscaleCheck kernel with the same 1/scale, which only ever sets the
// flag. Nothing is read back, so this runs inside a captured step.
func (p *precision) unscale(opt *optimizers, m *kasmina.MorphogeneticModel) *tensor.Tensor {
	if p.scaler == nil {
		return nil
	}
	p.scaler.Unscale(opt.host)
	p.grads = p.grads[:0]
	for _, s := range opt.slotsOf(m) {
		if so := opt.seeds[s.ID()]; so != nil {
			for _, b := range so.sgd.Arena().Buckets() {
				p.grads = append(p.grads, b.FlatGrad())
			}
		}
	}
	if len(p.grads) > 0 {
		p.be.BinaryScalar(kernels.Div, p.inv, p.scaler.ScaleTensor(), 1, true)
		p.be.UnscaleCheck(p.grads, p.inv, p.scaler.FoundInf())
	}
	clear(p.grads)
	return p.scaler.FoundInf()
}

// update advances the scaler's state machine after the optimizers
// stepped (or skipped).
func (p *precision) update() {
	if p.scaler != nil {
		p.scaler.Update()
	}
}

// foundInf reads the last step's found-inf flag back to the host (false
// without a scaler): one explicit copy, a host sync on a device. Only
// outside a captured region; the trainer asks only on the steps that
// need the answer (a PCGrad combination, a gradient telemetry step). A
// failed copy counts as found (the step's gradients are not trusted).
func (p *precision) foundInf() bool {
	if p.scaler == nil {
		return false
	}
	h, err := hostCopy(p.scaler.FoundInf())
	return err != nil || h.Item() != 0
}

// Scaler returns the fp16 loss scaler (its scale and growth tracker), or
// nil unless TrainerOptions.AMP is "fp16".
func (t *Trainer) Scaler() *optim.GradScaler { return t.prec.scaler }

// setMatmulPrecision applies TrainerOptions.TF32 to the model's backend
// and returns the function that restores the default (Highest). The CPU
// backend always computes fp32 (SetMatmulPrecision is a no-op there), so
// TF32 only changes results on a CUDA device of compute capability 8.0 or
// newer. kernels has no getter for the precision in effect: the trainer
// assumes the process default, Highest, outside its epochs.
func (t *Trainer) setMatmulPrecision() (restore func()) {
	if !t.o.TF32 {
		return func() {}
	}
	be := kernels.For(t.prec.dev)
	be.SetMatmulPrecision(kernels.High)
	return func() { be.SetMatmulPrecision(kernels.Highest) }
}
