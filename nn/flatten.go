package nn

import "github.com/esper-go/esper/autograd"

// Flatten merges the axes from StartAxis to the last into one, like
// PyTorch's nn.Flatten: [N, C, H, W] → [N, C·H·W] by default, in
// row-major (channel-major) order.
type Flatten struct {
	leaf
	// StartAxis is the first merged axis; zero means 1, which keeps the
	// batch axis (PyTorch's default start_dim=1). A negative value
	// counts from the end. To flatten everything use autograd.Reshape.
	StartAxis int
}

// Forward flattens x.
func (f *Flatten) Forward(x *autograd.Var) *autograd.Var {
	start := f.StartAxis
	if start == 0 {
		start = 1
	}
	return autograd.Flatten(x, start)
}
