package kernels

import (
	"fmt"

	"github.com/esper-go/esper/tensor"
)

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

// Pool2dGeom is the geometry of a checked pooling: input [N, C, H, W],
// output [N, C, Ho, Wo].
type Pool2dGeom struct {
	// P is the parameters with their defaults filled (Norm).
	P          Pool2dParams
	N, C, H, W int
	Ho, Wo     int
}

// Planes is the number of (sample, channel) planes, N·C.
func (g *Pool2dGeom) Planes() int { return g.N * g.C }

// CheckPool2d checks the shapes of a pooling's input x and output y (for
// the backward passes: dx, and dy) against p and returns the geometry:
// rank-4 shapes, a positive window and stride, padding of at most half
// the window (PyTorch's rule), and y of the size they give.
func CheckPool2d(name string, x, y []int, p Pool2dParams) (Pool2dGeom, error) {
	p = p.Norm()
	bad := func(why string) (Pool2dGeom, error) {
		return Pool2dGeom{}, fmt.Errorf("%s: %s: input %v, output %v (kernel %d,%d stride %d,%d pad %d,%d)", name, why, x, y,
			p.KernelH, p.KernelW, p.StrideH, p.StrideW, p.PadH, p.PadW)
	}
	if len(x) != 4 || len(y) != 4 {
		return bad("want rank-4 tensors")
	}
	if p.KernelH <= 0 || p.KernelW <= 0 || p.StrideH <= 0 || p.StrideW <= 0 || p.PadH < 0 || p.PadW < 0 || 2*p.PadH > p.KernelH || 2*p.PadW > p.KernelW {
		return bad("invalid parameters")
	}
	g := Pool2dGeom{P: p, N: x[0], C: x[1], H: x[2], W: x[3]}
	g.Ho = (g.H+2*p.PadH-p.KernelH)/p.StrideH + 1
	g.Wo = (g.W+2*p.PadW-p.KernelW)/p.StrideW + 1
	if g.Ho <= 0 || g.Wo <= 0 || y[0] != g.N || y[1] != g.C || y[2] != g.Ho || y[3] != g.Wo {
		return bad("output shape mismatch")
	}
	return g, nil
}

// CheckPoolArgmax checks the indices of a max pooling: I32 or I64 of the
// pooled output's shape out.
func CheckPoolArgmax(name string, argmax *T, out []int) error {
	if !tensor.SameShape(argmax.Shape(), out) {
		return fmt.Errorf("%s: argmax has shape %v, want %v", name, argmax.Shape(), append([]int(nil), out...))
	}
	if !isIndex(argmax) {
		return indexError(name, "argmax", argmax)
	}
	return nil
}
