package simic

import (
	"fmt"
	"math"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	_ "github.com/esper-go/esper/internal/testdevice" // registers the sim backend
	"github.com/esper-go/esper/tensor"
	"github.com/esper-go/esper/tolaria"
)

// cartPoleOn is newCartPoleTrainer's trainer with the policy on dev.
func cartPoleOn(t *testing.T, dev tensor.Device, o PPOOptions, envs, steps int) (*Trainer[[]float32], *MLPPolicy) {
	t.Helper()
	spec := (&CartPole{}).Spec()
	pol, err := NewMLPPolicy(MLPPolicyOptions{ObsDim: 4, Spec: spec, Seed: 5, Device: dev})
	require.NoError(t, err)
	agent, err := NewPPO[[]float32](pol, spec, o)
	require.NoError(t, err)
	vec, err := NewVecEnv(envs, func(i int) (Env[[]float32], error) { return NewCartPole(uint64(100 + i)), nil })
	require.NoError(t, err)
	tr, err := NewTrainer(agent, vec, TrainerOptions[[]float32]{Steps: steps})
	require.NoError(t, err)
	return tr, pol
}

// TestPPOUpdateReadsTheDeviceOnce: on a device (sim), a PPO update of
// several minibatches reads the device back once — its statistics, in
// one copy — plus once per epoch boundary when the KL early stop may end
// the update there; a rollout reads once per lock-step step (the MLP's
// Act) and once for the bootstrap values.
func TestPPOUpdateReadsTheDeviceOnce(t *testing.T) {
	dev := tensor.Sim(0)
	for _, tc := range []struct {
		name  string
		o     PPOOptions
		reads uint64
	}{
		{"one epoch of 4 minibatches", PPOOptions{Seed: 1, MinibatchSize: 16}, 1},
		{"3 epochs without the KL stop", PPOOptions{Seed: 1, Epochs: 3, MinibatchSize: 16, NoKLStop: true}, 1},
		{"3 epochs with the KL stop", PPOOptions{Seed: 1, Epochs: 3, MinibatchSize: 16, TargetKL: 1e9}, 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tr, _ := cartPoleOn(t, dev, tc.o, 2, 32)
			s0 := tensor.HostSyncs(dev)
			_, err := tr.Collect()
			require.NoError(t, err)
			require.Equal(t, uint64(32+1), tensor.HostSyncs(dev)-s0, "rollout: one Act read per step, one Values read")
			s0 = tensor.HostSyncs(dev)
			st, err := tr.PPO().Update(tr.Buffer())
			require.NoError(t, err)
			require.Equal(t, tc.reads, tensor.HostSyncs(dev)-s0, "update reads")
			require.Equal(t, 4*max(1, tc.o.Epochs), st.Steps)
		})
	}
}

// TestPPOOnSimIsTheCPUBitForBit: the same CartPole training on the cpu
// and on sim (the CPU's kernels behind the device boundary) ends with
// bit-identical parameters and the same statistics, the KL early stop
// and the skipped steps decided on the device included.
func TestPPOOnSimIsTheCPUBitForBit(t *testing.T) {
	for _, tc := range []struct {
		o    PPOOptions
		stop bool
	}{
		{PPOOptions{Seed: 1, Epochs: 3, MinibatchSize: 16}, false},
		{PPOOptions{Seed: 2, Epochs: 4, LR: 0.5, MaxGradNorm: 100, MinibatchSize: 16}, true},
	} {
		o := tc.o
		run := func(dev tensor.Device) (string, [][]float64) {
			tr, pol := cartPoleOn(t, dev, o, 2, 32)
			var stats string
			for i := 0; i < 3; i++ {
				it, err := tr.Iterate()
				require.NoError(t, err)
				stats += fmt.Sprintf("%+v\n", *it.Update)
			}
			var params [][]float64
			for _, p := range pol.Parameters() {
				v, err := hostFloat64s(p.Value)
				require.NoError(t, err)
				params = append(params, v)
			}
			return stats, params
		}
		cs, cp := run(tensor.CPU)
		ss, sp := run(tensor.Sim(0))
		require.Equal(t, cs, ss)
		require.Equal(t, tc.stop, strings.Contains(cs, "EarlyStopped:true"), cs)
		for i := range cp {
			for j := range cp[i] {
				require.Equal(t, math.Float64bits(cp[i][j]), math.Float64bits(sp[i][j]), "parameter %d[%d]", i, j)
			}
		}
	}
}

// TestSyntheticDataResidentOnDevice: with a Device, NewSyntheticData's
// batches are gathered on that device (no copy from the host per batch)
// and are bitwise the host loader's, training and validation alike.
func TestSyntheticDataResidentOnDevice(t *testing.T) {
	o := SyntheticDataOptions{Train: 96, Val: 40, Batch: 32, Seed: 3}
	host, err := NewSyntheticData(o)
	require.NoError(t, err)
	defer host.Close()
	o.Device = tensor.Sim(0)
	dev, err := NewSyntheticData(o)
	require.NoError(t, err)
	defer dev.Close()
	for _, pair := range [][2]tolaria.Batches{{host.Train, dev.Train}, {host.Val, dev.Val}} {
		for e := 0; e < 2; e++ {
			var hx, hy []*tensor.Tensor
			for x, y := range pair[0].Batches(e) {
				hx, hy = append(hx, x.Clone()), append(hy, y.Clone())
			}
			i := 0
			for x, y := range pair[1].Batches(e) {
				require.Equal(t, tensor.Sim(0), x.Device())
				require.Equal(t, tensor.Sim(0), y.Device())
				gx, err := x.ToDevice(tensor.CPU)
				require.NoError(t, err)
				gy, err := y.ToDevice(tensor.CPU)
				require.NoError(t, err)
				require.Less(t, i, len(hx), "more batches on the device")
				require.Equal(t, hx[i].F32(), gx.F32(), "epoch %d batch %d images", e, i)
				require.Equal(t, hy[i].Float64s(), gy.Float64s(), "epoch %d batch %d labels", e, i)
				i++
			}
			require.Equal(t, len(hx), i, "epoch %d batches", e)
		}
	}
}
