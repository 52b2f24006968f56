// Package sim is the strict simulated accelerator (devices "sim",
// "sim:1", …): the CPU backend's kernels behind device tensors. Its
// tensors live in host memory, but the host accessors refuse them
// (tensor.KindSim), every device-to-host copy is a counted host sync
// (tensor.HostSyncs), and an op whose tensors are not all on one sim
// device panics naming the devices, as it would on a GPU. Code above the
// kernels that runs its tests on sim therefore runs on CUDA without host
// reads — and computes bitwise what the CPU computes, since the kernels
// are the same.
//
// Importing the package registers the backend for tensor.KindSim.
package sim

//go:generate go run gen.go

import (
	"errors"
	"fmt"
	"sync/atomic"

	"github.com/esper-go/esper/kernels"
	"github.com/esper-go/esper/kernels/cpu"
	"github.com/esper-go/esper/tensor"
)

// Backend is the sim backend. It holds a CPU backend of its own, so that
// a capture on sim records sim's launches only.
type Backend struct {
	cpu  kernels.Backend
	last atomic.Int32 // index of the sim device of the latest op
	seq  atomic.Int32 // block sequences on (BeginSequence)
	// joins counts the joined calls run (GatherSums, GATMeansAct,
	// LinearActLayerNorms, ReluHeads, MatMulsT).
	joins atomic.Int64
	// calls counts the ops checked (Calls).
	calls atomic.Int64
	// launchBound is LaunchBound's answer (SetLaunchBound).
	launchBound atomic.Bool
	// gatherInOff makes the joins decline gathered inputs (SetGatherIn).
	gatherInOff atomic.Bool
}

var def = &Backend{cpu: new(cpu.Backend)}

func init() { kernels.Register(def) }

// Default returns the process-wide sim backend.
func Default() *Backend { return def }

var _ kernels.Backend = (*Backend)(nil)

// Name implements kernels.Backend.
func (b *Backend) Name() string { return "sim" }

// Device implements kernels.Backend: the backend serves every sim device
// (the registry is keyed by kind); this is sim:0.
func (b *Backend) Device() tensor.Device { return tensor.Sim(0) }

// BeginCapture implements kernels.Backend.
func (b *Backend) BeginCapture() error { return b.cpu.BeginCapture() }

// EndCapture implements kernels.Backend.
func (b *Backend) EndCapture() (kernels.Graph, error) { return b.cpu.EndCapture() }

// Capturing implements kernels.Backend.
func (b *Backend) Capturing() bool { return b.cpu.Capturing() }

// Synchronize implements kernels.Backend: the CPU kernels have finished
// when they return, but the host waited for the device all the same, so
// it counts as a host sync of the device that ran the latest op.
func (b *Backend) Synchronize() error {
	tensor.CountHostSync(tensor.Sim(int(b.last.Load())))
	return b.cpu.Synchronize()
}

// BeginSequence implements kernels.BlockSequencer. Sim runs every call
// at once, in order — what CUDA's joined launch computes, bit for bit —
// and only counts the sequences on, so that a sequence ended twice is
// the error it is on a device.
func (b *Backend) BeginSequence() { b.seq.Add(1) }

// EndSequence implements kernels.BlockSequencer: an error outside a
// sequence.
func (b *Backend) EndSequence() error {
	for {
		n := b.seq.Load()
		if n == 0 {
			return errors.New("kernels/sim: EndSequence outside a sequence")
		}
		if b.seq.CompareAndSwap(n, n-1) {
			return nil
		}
	}
}

// Sequences is the number of sequences on (BeginSequence without its
// EndSequence yet): for tests of code that runs them.
func (b *Backend) Sequences() int { return int(b.seq.Load()) }

var _ kernels.GatherSumsJoiner = (*Backend)(nil)

// GatherSums implements kernels.GatherSumsJoiner, a device-only join:
// the calls are checked together, as a device checks them (no call may
// write what another reads), then each runs as its own GatherSum — the
// bits CUDA's joined launch writes — and the join is counted (Joins).
func (b *Backend) GatherSums(calls []kernels.GatherSumCall) {
	var ts []*tensor.Tensor
	for _, c := range calls {
		ts = append(append(append(append(append(append(ts, c.Out, c.Res), c.Xs...), c.Src...), c.RowPtr...), c.Order...), c.Biases...)
	}
	b.join("GatherSums", ts, func() error { _, err := kernels.CheckGatherSums("GatherSums", calls); return err }, func() {
		for _, c := range calls {
			b.GatherSum(c.Out, c.Xs, c.Src, c.RowPtr, c.Order, c.Biases, c.Scale, c.Act, c.Res)
		}
	})
}

var _ kernels.GATMeansJoiner = (*Backend)(nil)

// GATMeansAct implements kernels.GATMeansJoiner, a device-only join: the
// calls and every relation of them are checked together, as a device
// checks them before it launches, then each runs as its own GATMeanAct —
// the bits CUDA's joined launch writes — and the join is counted
// (Joins).
func (b *Backend) GATMeansAct(calls []kernels.GATMeanCall) {
	var ts []*tensor.Tensor
	for _, c := range calls {
		ts = append(ts, c.Out, c.Res)
		for _, l := range [][]*tensor.Tensor{c.Hs, c.Hd, c.Attr, c.We, c.AttSrc, c.AttDst, c.AttEdge, c.Bias, c.Src, c.RowPtr, c.Order} {
			ts = append(ts, l...)
		}
	}
	b.join("GATMeansAct", ts, func() error {
		rels, err := kernels.CheckGATMeans("GATMeansAct", calls)
		// Every relation of every call checked before any runs, as a
		// device checks them before it launches.
		for k, c := range calls {
			for i := 0; err == nil && i < rels[k]; i++ {
				_, err = kernels.CheckGATAggregate(fmt.Sprintf("GATMeansAct: call %d relation %d", k, i), c.Out, c.Hs[i], c.Hd[i], c.Attr[i], c.We[i],
					c.AttSrc[i], c.AttDst[i], c.AttEdge[i], c.Bias[i], c.Src[i], c.RowPtr[i], c.Order[i], c.Heads, c.Slope, 1/float64(rels[k]))
			}
		}
		return err
	}, func() {
		for _, c := range calls {
			b.GATMeanAct(c.Out, c.Hs, c.Hd, c.Attr, c.We, c.AttSrc, c.AttDst, c.AttEdge, c.Bias, c.Src, c.RowPtr, c.Order, c.Heads, c.Slope, c.Act, c.Res)
		}
	})
}

var _ kernels.LinearActLayerNormsJoiner = (*Backend)(nil)

// LinearActLayerNorms implements kernels.LinearActLayerNormsJoiner, a
// device-only join: the calls are checked together, as a device checks
// them, then each runs as its own LinearActLayerNorm — the bits CUDA's
// joined launch writes; a gathered input (In) first gathered into a
// tensor of its own — and the join is counted (Joins). The CPU takes
// every call, so it reports true, unless SetGatherIn turned gathered
// inputs off and a call has In.
func (b *Backend) LinearActLayerNorms(calls []kernels.LinearActLNCall) bool {
	var ts []*tensor.Tensor
	for _, c := range calls {
		if b.gatherInOff.Load() && c.In != nil {
			return false
		}
	}
	for _, c := range calls {
		ts = append(ts, c.Y, c.X, c.W, c.B, c.G, c.S)
		if c.In != nil {
			ts = append(ts, c.In.Tensors()...)
		}
	}
	b.join("LinearActLayerNorms", ts, func() error { _, err := kernels.CheckLinearActLayerNorms("LinearActLayerNorms", calls); return err }, func() {
		for i, c := range calls {
			x := c.X
			if c.In != nil {
				x = kernels.GatherInputOps(b, c.In) // what reading In as it goes stands for
			}
			if !b.LinearActLayerNorm(c.Y, x, c.W, c.B, c.Act, c.G, c.S, c.Eps) {
				panic(fmt.Sprintf("kernels/sim: LinearActLayerNorms: call %d refused by the CPU", i))
			}
		}
	})
	return true
}

var _ kernels.MatMulsJoiner = (*Backend)(nil)

// MatMulsT implements kernels.MatMulsJoiner, a device-only join: the
// products are checked together, as a device checks them, then each runs
// as its own MatMul on sim (kernels.MatMulsTOps: the CPU's sums, where
// CUDA's joined launch sums in its own order), and the join is counted
// (Joins). It takes every call, so it reports true.
func (b *Backend) MatMulsT(calls []kernels.MatMulTCall) bool {
	var ts []*tensor.Tensor
	for _, c := range calls {
		ts = append(ts, c.Dst, c.A, c.B)
	}
	b.join("MatMulsT", ts, func() error { _, err := kernels.CheckMatMulsT("MatMulsT", calls); return err }, func() { kernels.MatMulsTOps(b, calls) })
	return true
}

var _ kernels.ReluHeadser = (*Backend)(nil)

// ReluHeads implements kernels.ReluHeadser, a device-only join: the heads
// are checked together, as a device checks them, then each runs as its
// products on sim (kernels.ReluHeadsOps), and the join is counted
// (Joins). It takes every call, so it reports true, unless SetGatherIn
// turned gathered inputs off and a call has In or Join.
func (b *Backend) ReluHeads(calls []kernels.ReluHeadCall) bool {
	var ts []*tensor.Tensor
	for _, c := range calls {
		if b.gatherInOff.Load() && (c.In != nil || c.Join != nil) {
			return false
		}
	}
	for _, c := range calls {
		ts = append(ts, c.Out, c.X, c.W1, c.B1, c.W2, c.B2, c.Join)
		if c.In != nil {
			ts = append(ts, c.In.Tensors()...)
		}
	}
	b.join("ReluHeads", ts, func() error { _, err := kernels.CheckReluHeads("ReluHeads", calls); return err }, func() { kernels.ReluHeadsOps(b, calls) })
	return true
}

// join runs a device-only join as sim does: every tensor of it (ts) on
// one sim device, the whole join checked (check) before anything runs,
// as a device checks it before it launches — a failure panics, as a
// refused launch does — then run, which runs the calls one by one (the
// bits the device's joined launch writes), and the join counted. A
// capture records the calls as one launch, as the device's graph holds
// one node for them (Graph.Len counts what a device would launch).
func (b *Backend) join(op string, ts []*tensor.Tensor, check func() error, run func()) {
	b.check(op, nil, [][]*tensor.Tensor{ts})
	if err := check(); err != nil {
		panic(fmt.Sprintf("kernels/sim: %v", err))
	}
	b.cpu.(*cpu.Backend).Group(run)
	b.joins.Add(1)
}

// Joins counts the joined calls (GatherSums, GATMeansAct,
// LinearActLayerNorms, ReluHeads, MatMulsT) run so far: for tests of
// code that joins them.
func (b *Backend) Joins() int64 { return b.joins.Load() }

// Calls is the number of ops run on sim so far, eagerly or while a
// capture records them (each joined call counting each of its calls;
// a query such as GATMeanGradFits is no op; nothing is counted when a
// captured graph replays): the launches a
// GPU would be asked for, eagerly, by the same code. Beside a loop's
// wall time on a GPU it prices an op's host cost (esper bench W4 reports
// it per PPO update).
func (b *Backend) Calls() int64 { return b.calls.Load() }

// LaunchBound implements kernels.LaunchBounder: false unless
// SetLaunchBound turned it on.
func (b *Backend) LaunchBound() bool { return b.launchBound.Load() }

// SetLaunchBound makes sim answer LaunchBound as a GPU does (on) or as
// the CPU does (off, the default). On, the code above the kernels takes
// a GPU's paths on sim — the joined products and launches that trade a
// copy of the weights for fewer launches — so that a captured graph's
// length (Graph.Len) counts what a GPU would launch, on a machine
// without one, and Calls the ops asked of it (a join counted once and
// with each of its calls besides). The stacked products sum in another
// order than separate ones, so sim then no longer computes bit for bit
// what the CPU computes: tests
// that compare the two run with it off. Set it before any op runs (a
// captured graph or a cached choice made the other way stays as made);
// the device package sets it from ESPER_SIM_LAUNCH_BOUND when it opens
// a sim device.
func (b *Backend) SetLaunchBound(on bool) { b.launchBound.Store(on) }

// SetGatherIn makes ReluHeads and LinearActLayerNorms take calls with a
// gathered input or a joined output (on, the default) or decline them
// (off), as CUDA does with ESPER_CUDA_GATHER_IN=off: for tests of the
// callers' way without them. It is the process's setting.
func (b *Backend) SetGatherIn(on bool) { b.gatherInOff.Store(!on) }

// SetMatmulPrecision implements kernels.Backend (the CPU computes fp32
// whatever is asked, as documented there).
func (b *Backend) SetMatmulPrecision(p kernels.Precision) { b.cpu.SetMatmulPrecision(p) }

// check panics unless every non-nil tensor of an op is on one sim device:
// a CPU tensor or one of another device in a sim op is the mistake a GPU
// would refuse.
func (b *Backend) check(op string, ts []*tensor.Tensor, lists [][]*tensor.Tensor) {
	b.calls.Add(1)
	var dev tensor.Device
	found := false
	see := func(t *tensor.Tensor) {
		if t == nil {
			return
		}
		d := t.Device()
		switch {
		case d.Kind != tensor.KindSim:
			panic(fmt.Sprintf("kernels/sim: %s: a tensor on %v in an op on the sim device (copy it with ToDevice first)", op, d))
		case !found:
			dev, found = d, true
		case d != dev:
			panic(fmt.Sprintf("kernels/sim: %s: tensors on %v and %v in one op", op, dev, d))
		}
	}
	for _, t := range ts {
		see(t)
	}
	for _, l := range lists {
		for _, t := range l {
			see(t)
		}
	}
	if found {
		b.last.Store(int32(dev.Index))
	}
}

// views returns the backend views of ts.
func views(ts []*tensor.Tensor) []*tensor.Tensor {
	if ts == nil {
		return nil
	}
	out := make([]*tensor.Tensor, len(ts))
	for i, t := range ts {
		if t != nil {
			out[i] = tensor.BackendView(t)
		}
	}
	return out
}
