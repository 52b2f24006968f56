package rollback

import (
	"context"
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/esper-go/esper/autograd"
	"github.com/esper-go/esper/internal/testdevice"
	"github.com/esper-go/esper/leyline"
	"github.com/esper-go/esper/nn"
	"github.com/esper-go/esper/optim"
	"github.com/esper-go/esper/tensor"
)

func metric(t *testing.T, tt *TwoTier, name string) float64 {
	t.Helper()
	for _, m := range tt.Metrics() {
		if m.Name == name {
			return m.Value
		}
	}
	t.Fatalf("no metric %q", name)
	return 0
}

func TestTwoTierFastThenSlow(t *testing.T) {
	fast := newFast(t, 1<<20)
	st := openStore(t, t.TempDir(), StoreOptions{})
	tt := &TwoTier{Fast: fast, Store: st}

	noErr(t, fast.Put(10, sized(t, 4, 10)))
	noErr(t, st.Write(2, sized(t, 4, 2)))

	res, s, err := tt.Restore(context.Background(), 15)
	noErr(t, err)
	check(t, res.UsedFast && res.Hit && res.Step == 10 && w0(t, s) == 10, "fast restore %+v", res)

	res, s, err = tt.Restore(context.Background(), 5) // nothing ≤ 5 in memory
	noErr(t, err)
	check(t, !res.UsedFast && res.Hit && res.Epoch == 2 && w0(t, s) == 2, "slow restore %+v", res)
	check(t, res.Latency > 0, "latency not measured")

	check(t, metric(t, tt, leyline.MetricTolariaRollbackFastHitsTotal) == 1, "hits")
	check(t, metric(t, tt, leyline.MetricTolariaRollbackFastMissesTotal) == 1, "misses")
	check(t, metric(t, tt, leyline.MetricTolariaRollbackFailuresTotal) == 0, "failures")
}

func TestTwoTierFailures(t *testing.T) {
	// No tier at all.
	tt := &TwoTier{}
	res, _, err := tt.Restore(context.Background(), 1)
	check(t, errors.Is(err, ErrNoSnapshot) && !res.Hit, "no tiers: %+v, %v", res, err)

	// A corrupt checkpoint is a failure, not a deadline.
	st, ckpt, _ := storeWith(t)
	data, err := os.ReadFile(ckpt)
	noErr(t, err)
	noErr(t, os.WriteFile(ckpt, flip(data, len(data)-1), 0o644))
	tt = &TwoTier{Fast: newFast(t, 1<<20), Store: st}
	res, s, err := tt.Restore(context.Background(), 1)
	corruptErr(t, err, ckpt)
	check(t, !res.Hit && !res.UsedFast && s.Tensors == nil, "corrupt restore %+v", res)
	check(t, metric(t, tt, leyline.MetricTolariaRollbackFailuresTotal) == 1, "failures not counted")
	check(t, metric(t, tt, leyline.MetricTolariaRollbackDeadlineExceededTotal) == 0, "corruption counted as a deadline")
	check(t, metric(t, tt, leyline.MetricTolariaRollbackFastMissesTotal) == 1, "fast miss not counted")
}

// blockingRead returns a ReadFile that blocks on checkpoint reads until
// release is closed, announcing each on entered.
func blockingRead(entered chan<- string, release <-chan struct{}) func(string) ([]byte, error) {
	return func(path string) ([]byte, error) {
		if strings.HasSuffix(path, ckptSuffix) {
			entered <- path
			<-release
		}
		return os.ReadFile(path)
	}
}

func TestTwoTierDeadline(t *testing.T) {
	entered, release := make(chan string, 4), make(chan struct{})
	defer close(release)
	dir := t.TempDir()
	st := openStore(t, dir, StoreOptions{ReadFile: blockingRead(entered, release)})
	noErr(t, st.Write(1, sized(t, 4, 1)))
	tt := &TwoTier{Fast: newFast(t, 1<<20), Store: st, Deadline: 10 * time.Millisecond}

	res, s, err := tt.Restore(context.Background(), 100)
	check(t, errors.Is(err, ErrDeadlineExceeded), "hung read gave %v", err)
	check(t, !res.Hit && !res.UsedFast && s.Tensors == nil, "result %+v", res)
	check(t, res.Latency >= 10*time.Millisecond, "returned after %v, before the deadline", res.Latency)
	check(t, <-entered != "", "the checkpoint read never started")
	check(t, metric(t, tt, leyline.MetricTolariaRollbackDeadlineExceededTotal) == 1, "deadline not counted")
	check(t, metric(t, tt, leyline.MetricTolariaRollbackFailuresTotal) == 1, "failure not counted")
	check(t, metric(t, tt, leyline.MetricTolariaRollbackRestoreLatencyMs) >= 10, "latency metric %v", metric(t, tt, leyline.MetricTolariaRollbackRestoreLatencyMs))

	// The caller's context ending first is not a deadline.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, _, err = tt.Restore(ctx, 100)
	check(t, errors.Is(err, context.Canceled) && !errors.Is(err, ErrDeadlineExceeded), "cancelled restore gave %v", err)
	check(t, metric(t, tt, leyline.MetricTolariaRollbackDeadlineExceededTotal) == 1, "cancellation counted as a deadline")
	check(t, metric(t, tt, leyline.MetricTolariaRollbackFailuresTotal) == 2, "cancellation not counted as a failure")
}

func TestTwoTierSlowReadWithinDeadline(t *testing.T) {
	entered, release := make(chan string, 1), make(chan struct{})
	st := openStore(t, t.TempDir(), StoreOptions{ReadFile: blockingRead(entered, release)})
	noErr(t, st.Write(4, sized(t, 4, 4)))
	tt := &TwoTier{Store: st, Deadline: time.Minute}
	go func() {
		<-entered // the read is in flight: let it finish
		close(release)
	}()
	res, s, err := tt.Restore(context.Background(), 0)
	noErr(t, err)
	check(t, res.Hit && res.Epoch == 4 && w0(t, s) == 4, "result %+v", res)
}

func TestTwoTierMetricNames(t *testing.T) {
	tt := &TwoTier{Fast: newFast(t, 1<<20)}
	noErr(t, tt.Fast.Put(1, sized(t, 4, 1)))
	var got []string
	for _, m := range tt.Metrics() {
		got = append(got, m.Name)
	}
	want := []string{
		"tolaria.rollback.fast_size_bytes", "tolaria.rollback.snapshots_total", "tolaria.rollback.failures_total",
		"tolaria.rollback.fast_hits_total", "tolaria.rollback.fast_misses_total", "tolaria.rollback.restore_latency_ms",
		"tolaria.rollback.deadline_exceeded_total",
	}
	check(t, strings.Join(got, ",") == strings.Join(want, ","), "metric names %v", got)
	size, err := sized(t, 4, 1).Size()
	noErr(t, err)
	check(t, metric(t, tt, leyline.MetricTolariaRollbackFastSizeBytes) == float64(size), "size metric")
	check(t, metric(t, tt, leyline.MetricTolariaRollbackSnapshotsTotal) == 1, "snapshots metric")
	check(t, (&TwoTier{}).Metrics()[0].Value == 0, "metrics without a fast tier")
}

// TestRestoreModelAndSGD rolls a real model and SGD-with-momentum back
// through each tier: parameters, momentum, learning rate and step count
// come back bitwise, and training from the restored state repeats the
// original trajectory exactly.
func TestRestoreModelAndSGD(t *testing.T) {
	dev := testdevice.Device(t)
	m := nn.MustMLP(tensor.NewRNG(1), nn.MLPOptions{Sizes: []int{4, 8, 3}})
	noErr(t, nn.To(m, dev))
	opt, err := optim.NewSGD(m.Parameters(), optim.SGDOptions{LR: 0.05, Momentum: 0.9})
	noErr(t, err)
	x := testdevice.To(t, tensor.Normal(tensor.NewRNG(2), tensor.F32, 0, 1, 5, 4))
	step := func() {
		opt.ZeroGrad()
		y := m.Forward(autograd.NewVar(x))
		autograd.Backward(autograd.MeanAll(autograd.Mul(y, y)))
		opt.Step()
	}
	for i := 0; i < 3; i++ {
		step()
	}

	snap := State{Meta: Meta{Epoch: 1, GlobalStep: 3}}
	snap.SetModule(m)
	snap.SetOptimizer(opt)
	wantModel, wantOpt := nn.StateDict(m), opt.StateDict()
	check(t, wantOpt["momentum_buffer.f32"] != nil, "SGD state has no momentum: %v", names(wantOpt))

	fast := newFast(t, 1<<20)
	noErr(t, fast.Put(3, snap))
	st := openStore(t, t.TempDir(), StoreOptions{})
	noErr(t, st.Write(1, snap))

	step()
	wantNext := nn.StateDict(m)

	for _, tier := range []string{"fast", "slow"} {
		t.Run(tier, func(t *testing.T) {
			opt.SetLR(0.5) // training moves on and diverges
			for i := 0; i < 4; i++ {
				step()
			}
			check(t, sameTensors(nn.StateDict(m), wantModel) != "", "mutation did not change the model")

			tt := &TwoTier{Store: st}
			if tier == "fast" {
				tt.Fast = fast
			}
			res, s, err := tt.Restore(context.Background(), 7)
			noErr(t, err)
			check(t, res.UsedFast == (tier == "fast") && res.Hit, "result %+v", res)
			noErr(t, s.ApplyModule(m))
			noErr(t, s.ApplyOptimizer(opt))
			check(t, s.Meta.GlobalStep == 3 && s.Meta.Epoch == 1, "meta %+v", s.Meta)

			check(t, sameTensors(nn.StateDict(m), wantModel) == "", "parameters: %s", sameTensors(nn.StateDict(m), wantModel))
			check(t, sameTensors(opt.StateDict(), wantOpt) == "", "optimizer: %s", sameTensors(opt.StateDict(), wantOpt))
			check(t, opt.LR() == 0.05 && opt.StepCount() == 3, "lr %v step %d", opt.LR(), opt.StepCount())

			step()
			check(t, sameTensors(nn.StateDict(m), wantNext) == "", "the step after the restore differs: %s", sameTensors(nn.StateDict(m), wantNext))
		})
	}

	// A state of another architecture is refused and changes nothing.
	other := nn.MustMLP(tensor.NewRNG(3), nn.MLPOptions{Sizes: []int{4, 3}})
	noErr(t, nn.To(other, dev))
	before := nn.StateDict(other)
	var sde *nn.StateDictError
	check(t, errors.As(snap.ApplyModule(other), &sde), "a mismatched state was applied")
	check(t, sameTensors(nn.StateDict(other), before) == "", "a refused restore changed the model")
}

// TestLatestRacesWrite: a checkpoint read stuck on the disk does not
// hold up Write, and when that Write prunes the file being read, Latest
// follows the WAL to the new checkpoint instead of reporting corruption.
func TestLatestRacesWrite(t *testing.T) {
	entered, release := make(chan string, 4), make(chan struct{})
	st := openStore(t, t.TempDir(), StoreOptions{Keep: 1, ReadFile: blockingRead(entered, release)})
	noErr(t, st.Write(1, sized(t, 4, 1)))

	type loaded struct {
		s     State
		epoch int
		err   error
	}
	done := make(chan loaded, 1)
	go func() {
		s, e, err := st.Latest()
		done <- loaded{s, e, err}
	}()
	check(t, strings.HasSuffix(<-entered, "ckpt-epoch-1.safetensors"), "Latest read another file first")
	noErr(t, st.Write(2, sized(t, 4, 2))) // deletes epoch 1 while it is being read
	close(release)
	r := <-done
	noErr(t, r.err)
	check(t, r.epoch == 2 && w0(t, r.s) == 2, "Latest returned epoch %d", r.epoch)
}
