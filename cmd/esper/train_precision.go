package main

import (
	"fmt"

	"github.com/esper-go/esper/kernels"
	"github.com/esper-go/esper/tensor"
	"github.com/esper-go/esper/tolaria"
)

// precision is what --amp and --tf32 resolve to on the run's device.
type precision struct {
	amp  tolaria.AMPMode
	tf32 bool
	// note is the one line that reports TF32 on a CUDA device (on by
	// default from compute capability 8.0), printed once at the start;
	// empty elsewhere.
	note string
}

// ampModes are --amp's values.
var ampModes = map[string]tolaria.AMPMode{"off": tolaria.AMPOff, "bf16": tolaria.AMPBF16, "fp16": tolaria.AMPFP16}

// resolvePrecision settles --amp and --tf32 (tf32Set: given on the
// command line) for dev, whose backend be is open, or says in one line
// why the device cannot do what was asked:
//
//   - --tf32 on cpu or sim: they compute F32 products in fp32 always
//     (kernels' SetMatmulPrecision is a no-op there), so asking for TF32
//     would be a run that silently does not do what its command line
//     says; --tf32=false, which is what they do, is accepted.
//   - --tf32 on a CUDA device of compute capability below 8.0, which has
//     no TF32 arithmetic.
//
// Every --amp mode runs on every device (the CUDA backend has F16 kernels
// beside its BF16 ones, so fp16 autocast with the GradScaler trains
// there). On a CUDA device of compute capability 8.0 or newer TF32 is on
// unless --tf32=false, as PyTorch's cuDNN convolutions are by default.
func resolvePrecision(dev tensor.Device, be kernels.Backend, amp string, tf32, tf32Set bool) (precision, error) {
	mode, ok := ampModes[amp]
	if !ok {
		return precision{}, fmt.Errorf("unknown --amp %q (off, bf16 or fp16)", amp)
	}
	p := precision{amp: mode}
	if dev.Kind != tensor.KindCUDA {
		if tf32Set && tf32 {
			return p, fmt.Errorf("--tf32 on %v: TF32 is a matmul mode of CUDA devices of compute capability 8.0 or newer, and %v always computes in fp32 (leave --tf32 out)", dev, dev)
		}
		return p, nil
	}
	desc, ok := be.(kernels.DeviceDescriber)
	if !ok {
		return p, fmt.Errorf("--device %v: the %s backend cannot say its compute capability (kernels.DeviceDescriber), which --tf32 depends on", dev, be.Name())
	}
	major, minor, err := desc.ComputeCapability()
	if err != nil {
		return p, fmt.Errorf("--device %v: %w", dev, err)
	}
	what := fmt.Sprintf("%v (%s, compute capability %d.%d)", dev, desc.DeviceName(), major, minor)
	capable := major >= 8
	switch {
	case tf32Set && tf32 && !capable:
		return p, fmt.Errorf("--tf32 on %s: TF32 needs compute capability 8.0 or newer", what)
	case tf32Set:
		p.tf32 = tf32
	default:
		p.tf32 = capable
	}
	switch {
	case p.tf32 && tf32Set:
		p.note = "TF32 on for F32 matmuls and convolutions on " + what + " (--tf32)"
	case p.tf32:
		p.note = "TF32 on for F32 matmuls and convolutions on " + what + ", the default from compute capability 8.0 (--tf32=false turns it off)"
	case capable:
		p.note = "TF32 off on " + what + " (--tf32=false): F32 matmuls and convolutions in fp32"
	default:
		p.note = "TF32 off on " + what + ", which has none: F32 matmuls and convolutions in fp32"
	}
	return p, nil
}
