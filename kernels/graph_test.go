package kernels_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/esper-go/esper/kernels"
)

// TestBuildCSR: edges grouped by destination in ascending edge id, a
// destination without edges an empty row, and the result passes
// CheckCSRValues.
func TestBuildCSR(t *testing.T) {
	dst := []int64{2, 0, 2, 3, 0, 2}
	rowPtr, order, err := kernels.BuildCSR(dst, 5)
	require.NoError(t, err)
	assert.Equal(t, []int64{0, 2, 2, 5, 6, 6}, rowPtr)
	assert.Equal(t, []int64{1, 4, 0, 2, 5, 3}, order)
	src := []int64{0, 1, 2, 0, 1, 2}
	assert.NoError(t, kernels.CheckCSRValues("t", src, rowPtr, order, 3, nil))

	_, _, err = kernels.BuildCSR([]int64{0, 5}, 5)
	assert.ErrorContains(t, err, "dst[1] = 5 outside [0, 5)")
}

// TestCheckCSRValuesRefuses: every rule of the CSR fails on its own.
func TestCheckCSRValuesRefuses(t *testing.T) {
	src := []int64{0, 1, 2}
	for _, c := range []struct {
		what          string
		rowPtr, order []int64
		ns            int
		want          string
	}{
		{"end", []int64{0, 1, 2}, []int64{0, 1, 2}, 3, "end at 3 edges"},
		{"decreasing", []int64{0, 2, 1, 3}, []int64{0, 1, 2}, 3, "decreases at node 1"},
		{"repeat", []int64{0, 2, 3}, []int64{0, 0, 2}, 3, "order[1] = 0 is not a new edge id"},
		{"range", []int64{0, 2, 3}, []int64{0, 1, 7}, 3, "order[2] = 7"},
		{"unsorted", []int64{0, 2, 3}, []int64{1, 0, 2}, 3, "not ascending within node 0"},
		{"source", []int64{0, 2, 3}, []int64{0, 1, 2}, 2, "src[2] = 2 outside [0, 2)"},
	} {
		err := kernels.CheckCSRValues("t", src, c.rowPtr, c.order, c.ns, make([]bool, 3))
		assert.ErrorContains(t, err, c.want, c.what)
	}
}
