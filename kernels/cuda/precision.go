//go:build cuda

package cuda

import "github.com/esper-go/esper/kernels"

// Precision selects the arithmetic of float32 products (PyTorch's
// torch.set_float32_matmul_precision). It is kernels.Precision, the one
// precision enum, under the name this package's signatures use.
type Precision = kernels.Precision

// Precisions, kernels' values.
const (
	Highest = kernels.Highest // full fp32
	High    = kernels.High    // TF32 tensor cores
	Medium  = kernels.Medium  // bf16 tensor cores, fp32 accumulation
)
