package optim

import (
	"fmt"
	"math"

	"github.com/esper-go/esper/tensor"
)

// Optimizer is what the trainer, the GradScaler and the schedules need
// from SGD and AdamW.
type Optimizer interface {
	// Step applies one update to every parameter of the arena from its
	// gradient. It reads nothing back to the host, so it can be
	// captured.
	Step()
	// StepSkipIf is Step, except that when the one-element tensor
	// foundInf is non-zero at run time nothing changes: neither the
	// parameters, nor the state, nor the step counter.
	StepSkipIf(foundInf *tensor.Tensor)
	// ZeroGrad zeroes every gradient in the arena.
	ZeroGrad()
	// SetLR sets the learning rate by writing the device-resident
	// hyperparameter tensor in place. It is not a kernel launch and is
	// never captured: call it between replays, and the next replay sees
	// the new value.
	SetLR(lr float64)
	// LR returns the learning rate last set (no device read).
	LR() float64
	// Arena is the parameter arena the optimizer updates.
	Arena() *Arena
	// StateDict returns copies of the optimizer state (hyperparameter
	// tensor entries and per-dtype buffers), keyed by name.
	StateDict() map[string]*tensor.Tensor
	// LoadStateDict copies state saved by StateDict into the optimizer's
	// buffers in place (captured steps keep seeing them). It validates
	// every key, shape and value before changing anything. The state
	// dict may be on another device than the optimizer (a checkpoint
	// read on the host, for an optimizer on a device): its tensors are
	// copied over explicitly.
	LoadStateDict(sd map[string]*tensor.Tensor) error
	// ResetState forgets the step count and every state buffer, as if
	// no step had been taken (the governor's rollback uses it).
	ResetState()
}

// Keys shared by the state dicts of every optimizer.
const (
	keyLR   = "lr"
	keyStep = "step"
)

// hyper is the device-resident F64 [2] tensor {lr, step} the step kernels
// read at run time. lr mirrors element 0 on the host so LR never reads the
// device.
type hyper struct {
	t       *tensor.Tensor // F64 [2]
	counter *tensor.Tensor // view of element 1
	lr      float64
}

func newHyper(dev tensor.Device, lr float64) *hyper {
	t := emptyOn(dev, tensor.F64, 2)
	h := &hyper{t: t, counter: t.Narrow(0, 1, 1)}
	h.setLR(lr)
	return h
}

func (h *hyper) setLR(lr float64) {
	if !(lr >= 0) || math.IsInf(lr, 0) {
		panic(fmt.Sprintf("optim: SetLR(%v): the learning rate must be finite and non-negative", lr))
	}
	h.lr = lr
	writeScalar(h.t, 0, lr)
}

func (h *hyper) resetStep() { writeScalar(h.t, 1, 0) }

// steps reads the step counter back (a device read).
func (h *hyper) steps() int { return int(readScalar(h.counter)) }

// stateDict adds "lr" and "step" (F64 scalars) to sd.
func (h *hyper) stateDict(sd map[string]*tensor.Tensor) {
	sd[keyLR] = tensor.Scalar(tensor.F64, h.lr)
	sd[keyStep] = cloneTensor(h.counter).Reshape()
}

// checkStateDict validates "lr" and "step" in sd and returns their values.
func (h *hyper) checkStateDict(sd map[string]*tensor.Tensor) (lr, step float64, err error) {
	for _, k := range []string{keyLR, keyStep} {
		t, ok := sd[k]
		if !ok || t == nil {
			return 0, 0, fmt.Errorf("optim: state dict has no %q", k)
		}
		if t.Numel() != 1 {
			return 0, 0, fmt.Errorf("optim: state dict %q has shape %v, want one element", k, t.Shape())
		}
	}
	lr, step = readScalar(sd[keyLR]), readScalar(sd[keyStep])
	if !(lr >= 0) || math.IsInf(lr, 0) {
		return 0, 0, fmt.Errorf("optim: state dict lr %v is not a finite non-negative number", lr)
	}
	if !(step >= 0) || step != math.Trunc(step) || step > 1<<52 {
		return 0, 0, fmt.Errorf("optim: state dict step %v is not a non-negative integer", step)
	}
	return lr, step, nil
}

// load writes checked values in place.
func (h *hyper) load(lr, step float64) {
	h.setLR(lr)
	writeScalar(h.t, 1, step)
}

// checkStepDTypes rejects arenas the step kernels cannot update: they
// take F32 or F64 parameters (mixed precision keeps F32 master weights and
// runs the low-precision compute under autograd.Autocast).
func checkStepDTypes(opt string, a *Arena) error {
	for _, b := range a.buckets {
		if b.dtype != tensor.F32 && b.dtype != tensor.F64 {
			return fmt.Errorf("%w: %s updates F32 or F64 parameters, the arena holds %v ones (keep F32 master weights and use autograd.Autocast)", ErrOptions, opt, b.dtype)
		}
	}
	return nil
}

// checkFinite returns an error naming the option when v is NaN or Inf.
func checkFinite(name string, v float64) error {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return fmt.Errorf("optim: %s = %v is not finite", name, v)
	}
	return nil
}
