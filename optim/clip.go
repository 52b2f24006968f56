package optim

import (
	"fmt"
	"math"

	"github.com/esper-go/esper/kernels"
	"github.com/esper-go/esper/tensor"
)

// clipEps keeps the clipping coefficient finite for a zero norm
// (torch.nn.utils.clip_grad_norm_ uses the same 1e-6).
const clipEps = 1e-6

// GradNorm returns the global L2 norm of every gradient in the arena as a
// one-element tensor of shape [] on the arena's device (F32, or F64 when
// the arena holds F64 parameters). It launches one ForeachNorm per call
// (two with several dtypes) and reads nothing back, so it can be captured.
func GradNorm(a *Arena) *tensor.Tensor {
	be := kernels.For(a.device)
	ndt := normDType(a)
	norms := outOn(a.device, ndt, len(a.grads))
	be.ForeachNorm(norms, a.grads)
	if len(a.grads) == 1 {
		return norms.Reshape()
	}
	total := outOn(a.device, ndt, 1)
	be.ForeachNorm(total, []*tensor.Tensor{norms})
	return total.Reshape()
}

// ClipGradNorm scales every gradient in the arena in place by
// min(1, maxNorm/(norm+1e-6)), where norm is the global L2 norm over all
// gradients, as torch.nn.utils.clip_grad_norm_ does, and returns the norm
// before clipping (a shape [] tensor, see GradNorm). The coefficient is
// computed on the device and applied there (kernels.GradClipper: two
// launches on CUDA for a one-bucket arena), so nothing is read back and
// the whole clip can be captured. A NaN or Inf norm makes
// every gradient NaN, as in PyTorch; a GradScaler step then skips.
//
// It panics when maxNorm is negative or not finite.
func ClipGradNorm(a *Arena, maxNorm float64) *tensor.Tensor {
	if !(maxNorm >= 0) || math.IsInf(maxNorm, 0) {
		panic(fmt.Sprintf("optim: ClipGradNorm with maxNorm %v (want finite, ≥ 0)", maxNorm))
	}
	be := kernels.For(a.device)
	norm := outOn(a.device, normDType(a))
	if gc, ok := be.(kernels.GradClipper); ok {
		gc.ClipByNorm(norm, a.grads, maxNorm, clipEps)
	} else {
		kernels.ClipByNormOps(be, norm, a.grads, maxNorm, clipEps)
	}
	return norm
}

// normDType is the dtype of a's gradient norm: F64 when a holds F64
// parameters, else F32.
func normDType(a *Arena) tensor.DType {
	for _, b := range a.buckets {
		if b.dtype == tensor.F64 {
			return tensor.F64
		}
	}
	return tensor.F32
}
