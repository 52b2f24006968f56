package cpu

import (
	"runtime"
	"testing"

	"github.com/esper-go/esper/tensor"
)

func TestBatchNormDeterministic(t *testing.T) {
	x := randT(1, tensor.F32, 64, 8, 30, 30)
	dy := randT(2, tensor.F32, 64, 8, 30, 30)
	run := func(p int) [][]float64 {
		defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(p))
		y, sm, sr := tensor.Empty(tensor.F32, 64, 8, 30, 30), tensor.Empty(tensor.F32, 8), tensor.Empty(tensor.F32, 8)
		rm, rv := tensor.Zeros(tensor.F32, 8), tensor.Ones(tensor.F32, 8)
		be.BatchNorm(y, sm, sr, x, nil, nil, rm, rv, true, 0.1, 1e-5)
		dx, dw, db := tensor.Empty(tensor.F32, 64, 8, 30, 30), tensor.Empty(tensor.F32, 8), tensor.Empty(tensor.F32, 8)
		be.BatchNormBackward(dx, dw, db, dy, x, sm, sr, nil, true)
		return [][]float64{vals(y), vals(rv), vals(dx), vals(dw)}
	}
	a, b := run(1), run(2)
	for i := range a {
		same(t, name("bn ", i), a[i], b[i])
	}
}
