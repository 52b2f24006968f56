package cpu

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/esper-go/esper/tensor"
)

// TestGraphAggregateRefusesBadCSR: the CPU checks the CSR's values at
// every launch and panics naming the op, instead of reading out of range.
func TestGraphAggregateRefusesBadCSR(t *testing.T) {
	be := Default()
	x := tensor.Zeros(tensor.F32, 2, 3)
	out := tensor.Zeros(tensor.F32, 2, 3)
	src := tensor.FromSlice([]int64{0, 5}, 2) // source 5 of 2
	rowPtr := tensor.FromSlice([]int64{0, 1, 2}, 3)
	order := tensor.FromSlice([]int64{0, 1}, 2)
	assert.PanicsWithValue(t, "cpu: GatherMean: src[1] = 5 outside [0, 2)", func() { be.GatherMean(out, x, src, rowPtr, order) })

	hc := tensor.Zeros(tensor.F32, 2, 3)
	attr, we := tensor.Zeros(tensor.F32, 2, 2), tensor.Zeros(tensor.F32, 3, 2)
	v3 := func() *tensor.Tensor { return tensor.Zeros(tensor.F32, 3) }
	bad := tensor.FromSlice([]int64{0, 2, 1}, 3) // rowPtr decreasing
	assert.PanicsWithValue(t, "cpu: GATAggregate: rowPtr must start at 0 and end at 2 edges", func() {
		be.GATAggregate(out, hc, hc, attr, we, v3(), v3(), v3(), v3(), tensor.FromSlice([]int64{0, 1}, 2), bad, order, 1, 0.2, 1, false)
	})
}
