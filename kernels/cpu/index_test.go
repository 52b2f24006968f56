package cpu

import (
	"testing"

	"github.com/esper-go/esper/tensor"
	"github.com/stretchr/testify/require"
)

func TestIndexOutOfRangePanics(t *testing.T) {
	require.PanicsWithValue(t, "cpu: IndexSelect: index 7 out of range [0, 3)", func() {
		be.IndexSelect(tensor.Empty(tensor.F32, 1, 2), tensor.Empty(tensor.F32, 3, 2), 0, tensor.FromSlice([]int64{7}))
	})
}
