package kernels

// PoolFamily is the 2-D pooling op family (NCHW): max and average
// pooling and their gradients.
type PoolFamily interface {
	// MaxPool2d writes the window maxima and the flat H*W index (I32) of
	// each maximum within its input plane; padding never wins.
	MaxPool2d(dst, argmax, x *T, p Pool2dParams)
	// MaxPool2dBackward overwrites dx with dy routed to the argmax.
	MaxPool2dBackward(dx, dy, argmax *T, p Pool2dParams)
	// AvgPool2d averages each window.
	AvgPool2d(dst, x *T, p Pool2dParams)
	// AvgPool2dBackward overwrites dx.
	AvgPool2dBackward(dx, dy *T, p Pool2dParams)
}

// Pool2dParams configures max/avg pooling. Zero stride means stride =
// kernel size. CountIncludePad (avg only) divides by the full window as
// PyTorch's default does.
type Pool2dParams struct {
	KernelH, KernelW int
	StrideH, StrideW int
	PadH, PadW       int
	CountIncludePad  bool
}

// Norm fills defaults.
func (p Pool2dParams) Norm() Pool2dParams {
	if p.StrideH == 0 {
		p.StrideH = p.KernelH
	}
	if p.StrideW == 0 {
		p.StrideW = p.KernelW
	}
	return p
}
