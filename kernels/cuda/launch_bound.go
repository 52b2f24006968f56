//go:build cuda

package cuda

import "github.com/esper-go/esper/kernels"

var _ kernels.LaunchBounder = (*Backend)(nil)

// LaunchBound implements kernels.LaunchBounder: a launch here costs
// microseconds of host and device time, more than copying a small
// layer's weights, so products that share an input are joined.
func (b *Backend) LaunchBound() bool { return true }
