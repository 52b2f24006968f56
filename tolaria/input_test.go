package tolaria

import (
	"context"
	"errors"
	"iter"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/esper-go/esper/data"
	"github.com/esper-go/esper/leyline"
	"github.com/esper-go/esper/nn"
	"github.com/esper-go/esper/tensor"
)

// toySet is n samples of hostToyData's task as one dataset.
func toySet(t *testing.T, seed uint64, n int) *data.TensorDataset {
	t.Helper()
	b := hostToyData(seed, 1, n)
	ds, err := data.NewTensorDataset("toy", b.x[0], b.y[0], 3, data.Normalization{Std: 1})
	require.NoError(t, err)
	return ds
}

// toyLoaders are the training (40 samples, batches of 8, shuffled, the
// last partial batch dropped: 5 steps) and validation (20 samples in
// order, batches of 8, the last of 4 kept) loaders of the input tests,
// delivering on dev: copied ahead, or from a dataset resident there.
func toyLoaders(t *testing.T, dev tensor.Device, resident bool) (train, val *data.Loader) {
	t.Helper()
	mk := func(ds data.Dataset, o data.LoaderOptions) *data.Loader {
		o.Device, o.Resident, o.Pinned = dev, resident, true
		l, err := data.NewLoader(ds, o)
		require.NoError(t, err)
		t.Cleanup(l.Close)
		return l
	}
	train = mk(toySet(t, 1, 40), data.LoaderOptions{BatchSize: 8, Shuffle: true, Seed: 6, DropLast: true})
	val = mk(toySet(t, 2, 20), data.LoaderOptions{BatchSize: 8})
	return train, val
}

// TestDeviceInputOnSimEqualsCPU: the lifecycle run of
// TestTrainerOnSimEqualsCPU fed by data.Loaders gives, on sim, the CPU's
// epoch reports and final parameters bit for bit whether the batches
// are copied by the trainer (CPU loaders), copied ahead by the loader
// (LoaderOptions.Device) or selected from a dataset resident on sim
// (Resident) — and the same host syncs per epoch in the three: the
// input path reads nothing back.
func TestDeviceInputOnSimEqualsCPU(t *testing.T) {
	sim := tensor.Sim(0)
	run := func(model tensor.Device, loaders tensor.Device, resident bool) (Summary, map[string][]float32) {
		tr, val := toyLoaders(t, loaders, resident)
		return simRun(t, model, TrainerOptions{Train: tr, Val: val, Epochs: 4, Controller: script, HostLR: 0.05})
	}
	want, wp := run(tensor.CPU, tensor.CPU, false)
	for _, c := range []struct {
		name     string
		loaders  tensor.Device
		resident bool
	}{
		{"trainer copies", tensor.CPU, false},
		{"copied ahead", sim, false},
		{"resident", sim, true},
	} {
		got, gp := run(sim, c.loaders, c.resident)
		sameReports(t, want.Epochs, got.Epochs)
		require.Equal(t, wp, gp, "%s: final parameters", c.name)
		var syncs []uint64
		for _, r := range got.Epochs {
			syncs = append(syncs, r.HostSyncs)
		}
		// As TestTrainerOnSimEqualsCPU counts them: 1 read per epoch,
		// the gradient telemetry's norms of global steps 10 and 20 in it.
		require.Equal(t, []uint64{1, 1, 1, 1}, syncs, "%s: host syncs per epoch", c.name)
	}
}

// pinnedSource wraps a Batches source as an InputSource that says its
// batches are pinned and that each pass cost it perPass of copying, so
// that the trainer's sums can be checked exactly.
type pinnedSource struct {
	src     Batches
	dev     tensor.Device
	perPass time.Duration
	passes  *int
}

func (p pinnedSource) Batches(e int) iter.Seq2[*tensor.Tensor, *tensor.Tensor] {
	*p.passes++
	return p.src.Batches(e)
}
func (p pinnedSource) Device() tensor.Device   { return p.dev }
func (p pinnedSource) Pinned() bool            { return true }
func (p pinnedSource) CopyTime() time.Duration { return time.Duration(*p.passes) * p.perPass }

// epochInput returns tolaria.train.pin_memory and tolaria.h2d_copy_ms of
// each epoch's METRICS event.
func epochInput(t *testing.T, rec *recorder, epochs int) (pin, h2d []float64) {
	t.Helper()
	for e := range epochs {
		ms := epochMetrics(t, rec, e)
		pin = append(pin, metricValue(t, ms, leyline.MetricTolariaTrainPinMemory))
		h2d = append(h2d, metricValue(t, ms, leyline.MetricTolariaH2DCopyMs))
	}
	return pin, h2d
}

// TestInputTelemetry: tolaria.train.pin_memory is 1 only when the
// training source says its batches come through pinned staging, and
// tolaria.h2d_copy_ms is each epoch's copy time — 0 on the cpu, the
// trainer's own copies of CPU batches on sim, a device loader's copies
// (a resident one's: the epoch's order), and for an InputSource the
// growth of its CopyTime over the epoch, a source given as Train and
// Val counted once. EpochReport.H2DCopy is the same figure.
func TestInputTelemetry(t *testing.T) {
	sim := tensor.Sim(0)
	run := func(model tensor.Device, train, val Batches) ([]float64, []float64, Summary) {
		rec := &recorder{}
		m := hostTrainerModel(t)
		require.NoError(t, nn.To(m, model))
		tr, err := NewTrainer(TrainerOptions{Model: m, Train: train, Val: val, Epochs: 2, Sink: rec})
		require.NoError(t, err)
		sum, err := tr.Fit(context.Background())
		require.NoError(t, err)
		pin, h2d := epochInput(t, rec, 2)
		for i, r := range sum.Epochs {
			require.Equal(t, float64(r.H2DCopy.Nanoseconds())/1e6, h2d[i], "epoch %d: the metric is the report's", i)
		}
		return pin, h2d, sum
	}
	positive := func(what string, h2d []float64) {
		t.Helper()
		for i, v := range h2d {
			require.Greater(t, v, 0.0, "%s: epoch %d", what, i)
		}
	}

	tr, val := toyLoaders(t, tensor.CPU, false)
	pin, h2d, _ := run(tensor.CPU, tr, val)
	require.Equal(t, []float64{0, 0}, pin, "cpu")
	require.Equal(t, []float64{0, 0}, h2d, "cpu: nothing is copied")

	pin, h2d, _ = run(sim, tr, val)
	require.Equal(t, []float64{0, 0}, pin, "sim, CPU batches")
	positive("sim, the trainer's copies", h2d)

	for _, resident := range []bool{false, true} {
		dtr, dval := toyLoaders(t, sim, resident)
		before := dtr.Stats().Copies + dval.Stats().Copies
		pin, h2d, _ = run(sim, dtr, dval)
		require.Equal(t, []float64{0, 0}, pin, "sim has no pinned staging")
		positive("sim, the loaders' copies", h2d)
		copies := dtr.Stats().Copies + dval.Stats().Copies - before
		want := 2 * 2 * (5 + 3) // 2 epochs of 5 training and 3 validation batches, 2 copies each
		if resident {
			want = 2 // the training order of each epoch; the validation batches, never shuffled, are views
		}
		require.Equal(t, want, copies, "resident %v: copies in the run", resident)
	}

	passes := 0
	dtr, dval := toyLoaders(t, sim, true)
	src := pinnedSource{src: dtr, dev: sim, perPass: 3 * time.Millisecond, passes: &passes}
	pin, h2d, _ = run(sim, src, pinnedSource{src: dval, dev: sim, perPass: 2 * time.Millisecond, passes: &passes})
	require.Equal(t, []float64{1, 1}, pin)
	// Each epoch: one training and one validation pass, both counted by
	// both sources (they share the pass counter): 2·3 + 2·2 ms.
	require.Equal(t, []float64{10, 10}, h2d)

	passes = 0
	pin, h2d, _ = run(sim, src, src)
	require.Equal(t, []float64{1, 1}, pin)
	require.Equal(t, []float64{6, 6}, h2d, "one source as Train and Val: 2 passes of 3 ms, counted once")
}

// TestInputSourceDeviceMismatch: a source delivering on a device other
// than the model's is refused by NewTrainer; one on the CPU is copied.
func TestInputSourceDeviceMismatch(t *testing.T) {
	m := hostTrainerModel(t)
	require.NoError(t, nn.To(m, tensor.Sim(0)))
	tr, val := toyLoaders(t, tensor.Sim(1), false)
	_, err := NewTrainer(TrainerOptions{Model: m, Train: tr, Val: val, Epochs: 1})
	require.True(t, errors.Is(err, ErrOptions), "%v", err)
	require.ErrorContains(t, err, "sim:1")
	htr, hval := toyLoaders(t, tensor.CPU, false)
	_, err = NewTrainer(TrainerOptions{Model: m, Train: htr, Val: hval, Epochs: 1})
	require.NoError(t, err)
}
