package kasmina

import (
	"math"
	"testing"

	"github.com/stretchr/testify/require"

	_ "github.com/esper-go/esper/kernels/sim"
	"github.com/esper-go/esper/tensor"
)

// TestTensorNorms: per-tensor L2 norms computed where the tensors are —
// on sim bit for bit the CPU's, with one host sync and no tensor copied
// back; -1 for a nil tensor, NaN and +Inf for tensors holding them; and
// integer tensors measured too (on the host where the kernel refuses
// them).
func TestTensorNorms(t *testing.T) {
	rng := tensor.NewRNG(2)
	host := []*tensor.Tensor{
		tensor.Normal(rng, tensor.F32, 0, 3, 7, 5),
		nil,
		tensor.FromSlice([]float32{3, 4}),
		tensor.FromSlice([]float32{1, float32(math.NaN())}),
		tensor.FromSlice([]float32{1, float32(math.Inf(-1))}),
		tensor.Normal(rng, tensor.F64, 0, 1e-9, 11),
	}
	want, err := TensorNorms(host)
	require.NoError(t, err)
	require.Equal(t, -1.0, want[1])
	require.Equal(t, 5.0, want[2])
	require.True(t, math.IsNaN(want[3]))
	require.True(t, math.IsInf(want[4], 1))
	var ssq float64
	for _, v := range host[0].Float64s() {
		ssq += v * v
	}
	require.InDelta(t, math.Sqrt(ssq), want[0], 1e-12*math.Sqrt(ssq))

	dev := tensor.Sim(0)
	onDev := make([]*tensor.Tensor, len(host))
	for i, h := range host {
		if h != nil {
			onDev[i], err = h.ToDevice(dev)
			require.NoError(t, err)
		}
	}
	before := tensor.HostSyncs(dev)
	got, err := TensorNorms(onDev)
	require.NoError(t, err)
	require.Equal(t, uint64(1), tensor.HostSyncs(dev)-before, "one read of the norms")
	require.Equal(t, len(want), len(got))
	for i := range want {
		require.Equal(t, math.Float64bits(want[i]), math.Float64bits(got[i]), "tensor %d: %v, CPU %v", i, got[i], want[i])
	}

	ints, err := tensor.FromSlice([]int64{3, 4}).ToDevice(dev)
	require.NoError(t, err)
	n, err := TensorNorms([]*tensor.Tensor{ints})
	require.NoError(t, err)
	require.Equal(t, []float64{5}, n, "integers (through the host where the kernel refuses them)")
}
