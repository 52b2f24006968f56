package tamiyo

import (
	"bytes"
	"context"
	"math"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/esper-go/esper/autograd"
	"github.com/esper-go/esper/internal/testdevice"
	"github.com/esper-go/esper/kernels"
	"github.com/esper-go/esper/leyline"
	"github.com/esper-go/esper/nn"
	"github.com/esper-go/esper/tensor"
)

// The policy on the strict simulated device (tensor.Sim) beside a CPU
// twin, whatever ESPER_TEST_DEVICE says: its tensors refuse host reads,
// so these tests prove that Act, Evaluate, inference and checkpoints
// cross to the host only by explicit copies, and that the device
// computes bitwise what the CPU computes.

// devicePair returns two copies of one policy (same options, so the same
// initial weights and dropout seeds): one on the CPU and one moved to
// dev with nn.To (the dropout states follow at the first call), with a
// batch of four environments (3, 1, 5 and 2 slots) and their masks.
func devicePair(t *testing.T, dev tensor.Device) (cpu, onDev *Policy, g *Graph, masks []leyline.ActionMasks) {
	t.Helper()
	cpu = newPolicy(t, smallOptions(tensor.F32))
	onDev = newPolicy(t, smallOptions(tensor.F32))
	require.NoError(t, nn.To(onDev, dev))
	require.Equal(t, dev, onDev.Device())
	var inputs []GraphInput
	for i, n := range []int{3, 1, 5, 2} {
		inputs = append(inputs, testInput(t, n, i))
		masks = append(masks, testMasks(t, n, nil))
	}
	g, err := BuildGraphBatch(inputs)
	require.NoError(t, err)
	return cpu, onDev, g, masks
}

// hostFloats copies a tensor of any device to the host (counting a host
// sync for a device's) and returns its values.
func hostFloats(t *testing.T, x *tensor.Tensor) []float64 {
	t.Helper()
	h, err := x.ToDevice(tensor.CPU)
	require.NoError(t, err)
	return h.Float64s()
}

// TestActOnSimBitwiseCPU: Act on sim chooses the same actions with
// bitwise the same log-probabilities, entropies, values and op logits as
// on the CPU, sampling from a seeded Rand and deterministically, and
// costs exactly one host sync (the logits and values read back together).
func TestActOnSimBitwiseCPU(t *testing.T) {
	dev := tensor.Sim(0)
	cpu, sim, g, masks := devicePair(t, dev)
	cpu.SetTraining(false)
	sim.SetTraining(false)
	for _, det := range []bool{false, true} {
		rc, rs := tensor.NewRNG(7), tensor.NewRNG(7)
		for i := 0; i < 3; i++ {
			want, err := cpu.Act(g, masks, ActOptions{Rand: rc, Deterministic: det})
			require.NoError(t, err)
			before := tensor.HostSyncs(dev)
			got, err := sim.Act(g, masks, ActOptions{Rand: rs, Deterministic: det})
			require.NoError(t, err)
			assert.Equal(t, uint64(1), tensor.HostSyncs(dev)-before, "host syncs per Act")
			require.Equal(t, want, got, "deterministic %v, call %d", det, i)
		}
	}
	// In training mode (dropout on) the masks are drawn on the device
	// from the same states.
	cpu.SetTraining(true)
	sim.SetTraining(true)
	want, err := cpu.Act(g, masks, ActOptions{Rand: tensor.NewRNG(8)})
	require.NoError(t, err)
	got, err := sim.Act(g, masks, ActOptions{Rand: tensor.NewRNG(8)})
	require.NoError(t, err)
	require.Equal(t, want, got)
}

// TestInferenceOnSimBitwiseCPU: captured and eager inference of a policy
// on sim give the CPU's logits and values bitwise, one host sync per
// forward; an eager forward joins the node types' encoders, each GAT
// layer's types and the heads (four joins).
func TestInferenceOnSimBitwiseCPU(t *testing.T) {
	dev := tensor.Sim(1)
	cpu, sim, g, _ := devicePair(t, dev)
	want, err := NewInference(cpu, InferenceOptions{NoCapture: true})
	require.NoError(t, err)
	joins := kernels.For(dev).(interface{ Joins() int64 })
	for _, o := range []InferenceOptions{{NoCapture: true}, {OnFallback: func(err error) { t.Errorf("capture fell back: %v", err) }}} {
		in, err := NewInference(sim, o)
		require.NoError(t, err)
		for i := 0; i < 3; i++ {
			w, err := want.Forward(g)
			require.NoError(t, err)
			before, joined := tensor.HostSyncs(dev), joins.Joins()
			got, err := in.Forward(g)
			require.NoError(t, err)
			assert.Equal(t, uint64(1), tensor.HostSyncs(dev)-before, "host syncs per forward (capture %v)", in.Captures())
			if !in.Captures() {
				// The encoders, each GAT layer's node types, and the
				// heads, in one join each (one launch each on CUDA).
				assert.Equal(t, int64(4), joins.Joins()-joined, "joins per eager forward")
			}
			require.Equal(t, w, got, "capture %v, call %d", in.Captures(), i)
		}
		if in.Captures() {
			assert.Positive(t, in.Stats().Replays)
		}
	}
}

// TestEvaluateOnSimBitwiseCPU: Evaluate on sim, in training mode with
// dropout and the default floors, returns device Vars holding bitwise
// the CPU's log-probabilities, entropies and values, with one host sync
// (the floored heads' masked logits, read together); a PPO-style loss's
// Backward gives bitwise the CPU's parameter gradients.
func TestEvaluateOnSimBitwiseCPU(t *testing.T) {
	dev := tensor.Sim(0)
	cpu, sim, g, masks := devicePair(t, dev)
	cpu.SetTraining(false)
	r, err := cpu.Act(g, masks, ActOptions{Rand: tensor.NewRNG(4)})
	require.NoError(t, err)
	cpu.SetTraining(true)
	sim.SetTraining(true)

	run := func(p *Policy) (*Evaluation, *autograd.Var) {
		ev, err := p.Evaluate(g, masks, r.Actions, EvaluateOptions{})
		require.NoError(t, err)
		loss := autograd.SumAll(autograd.MulScalar(ev.Value, 0.5))
		for h := range ev.LogProbs {
			loss = autograd.Add(loss, autograd.SumAll(ev.LogProbs[h]))
			loss = autograd.Add(loss, autograd.SumAll(autograd.MulScalar(ev.Entropies[h], -0.01)))
		}
		autograd.Backward(loss)
		return ev, loss
	}
	want, wantLoss := run(cpu)
	before := tensor.HostSyncs(dev)
	got, gotLoss := run(sim)
	assert.Equal(t, uint64(1), tensor.HostSyncs(dev)-before, "host syncs per Evaluate and Backward")

	require.Equal(t, dev, got.Value.Value.Device())
	assert.Equal(t, want.Value.Value.Float64s(), hostFloats(t, got.Value.Value), "values")
	for h := range want.LogProbs {
		require.Equal(t, dev, got.LogProbs[h].Value.Device())
		assert.Equal(t, want.LogProbs[h].Value.Float64s(), hostFloats(t, got.LogProbs[h].Value), "log-probs of %s", leyline.HeadNames[h])
		assert.Equal(t, want.Entropies[h].Value.Float64s(), hostFloats(t, got.Entropies[h].Value), "entropies of %s", leyline.HeadNames[h])
	}
	assert.Equal(t, wantLoss.Value.Float64s(), hostFloats(t, gotLoss.Value), "loss")
	wp, sp := cpu.NamedParameters(), sim.NamedParameters()
	require.Equal(t, len(wp), len(sp))
	withGrad := 0
	for i := range wp {
		if wp[i].Var.Grad == nil { // a relation without edges in this batch
			require.Nil(t, sp[i].Var.Grad, sp[i].Name)
			continue
		}
		withGrad++
		require.NotNil(t, sp[i].Var.Grad, sp[i].Name)
		require.Equal(t, dev, sp[i].Var.Grad.Device(), sp[i].Name)
		w, s := wp[i].Var.Grad.Float64s(), hostFloats(t, sp[i].Var.Grad)
		for j := range w {
			if math.Float64bits(w[j]) != math.Float64bits(s[j]) {
				t.Fatalf("%s: gradient element %d is %v on sim, %v on the CPU", wp[i].Name, j, s[j], w[j])
			}
		}
	}
	assert.Greater(t, withGrad, len(wp)/2, "parameters with a gradient")
}

// TestPolicySavedFromSimLoadsOnCPU: a policy with trained-looking
// weights saved from sim (in one host sync) is byte for byte the file
// its CPU copy saves and loads on the CPU bitwise, and loads onto sim
// when its options name the device.
func TestPolicySavedFromSimLoadsOnCPU(t *testing.T) {
	dev := tensor.Sim(2)
	p := newPolicy(t, smallOptions(tensor.F32))
	rng := tensor.NewRNG(12)
	for _, v := range p.Parameters() { // weights that are not the seed's
		nn.Uniform(rng, v.Value, -0.3, 0.3)
	}
	want := nn.StateDict(p)
	dir := t.TempDir()
	cpuPath, simPath := filepath.Join(dir, "cpu.safetensors"), filepath.Join(dir, "sim.safetensors")
	require.NoError(t, SavePolicy(cpuPath, p, leyline.DefaultSlotConfig()))
	require.NoError(t, nn.To(p, dev))
	before := tensor.HostSyncs(dev)
	require.NoError(t, SavePolicy(simPath, p, leyline.DefaultSlotConfig()))
	assert.Equal(t, uint64(1), tensor.HostSyncs(dev)-before, "host syncs per save")
	cpuFile, err := os.ReadFile(cpuPath)
	require.NoError(t, err)
	simFile, err := os.ReadFile(simPath)
	require.NoError(t, err)
	assert.True(t, bytes.Equal(cpuFile, simFile), "the file does not depend on the device it was saved from")

	q, err := LoadPolicy(simPath, smallOptions(tensor.F32), leyline.DefaultSlotConfig())
	require.NoError(t, err)
	require.Equal(t, tensor.CPU, q.Device())
	got := nn.StateDict(q)
	require.Equal(t, len(want), len(got))
	for name, w := range want {
		require.Equal(t, w.Float64s(), got[name].Float64s(), name)
	}

	// Straight onto the device.
	o := smallOptions(tensor.F32)
	o.Device = dev
	d, err := LoadPolicy(simPath, o, leyline.DefaultSlotConfig())
	require.NoError(t, err)
	require.Equal(t, dev, d.Device())
	assert.Equal(t, dev, d.Options().Device)
	for name, v := range nn.StateDict(d) {
		require.Equal(t, dev, v.Device(), name)
		require.Equal(t, want[name].Float64s(), hostFloats(t, v), name)
	}
}

// TestNewPolicyOnDevice: PolicyOptions.Device builds the policy there
// with the CPU's initial weights; Policy.To moves it back.
func TestNewPolicyOnDevice(t *testing.T) {
	dev := tensor.Sim(0)
	o := smallOptions(tensor.F32)
	cpu := newPolicy(t, o)
	o.Device = dev
	p := newPolicy(t, o)
	require.Equal(t, dev, p.Device())
	want := nn.StateDict(cpu)
	for name, v := range nn.StateDict(p) {
		require.Equal(t, want[name].Float64s(), hostFloats(t, v), name)
	}
	require.NoError(t, p.To(tensor.CPU))
	assert.Equal(t, tensor.CPU, p.Device())
	g := mustGraph(t, testInput(t, 3, 1))
	a, err := nn.Eval(cpu).Run(g)
	require.NoError(t, err)
	b, err := nn.Eval(p).Run(g)
	require.NoError(t, err)
	assert.Equal(t, a.Value.Value.F32(), b.Value.Value.F32())
}

// TestServiceOnSim: the inference service follows its policy's device:
// with the policy on sim it makes the CPU's decisions (captured), one
// host sync per decision.
func TestServiceOnSim(t *testing.T) {
	dev := tensor.Sim(3)
	cpu, sim, _, _ := devicePair(t, dev)
	sc := newTestService(t, ServiceOptions{Policy: cpu, Seed: 5})
	ss := newTestService(t, ServiceOptions{Policy: sim, Seed: 5})
	for rep := 0; rep < 2; rep++ {
		for i, st := range serviceStates() {
			want, err := sc.EvaluateEpoch(context.Background(), st)
			require.NoError(t, err)
			before := tensor.HostSyncs(dev)
			got, err := ss.EvaluateEpoch(context.Background(), st)
			require.NoError(t, err)
			assert.Equal(t, uint64(1), tensor.HostSyncs(dev)-before, "host syncs per decision")
			require.Equal(t, want, got, "round %d state %d", rep, i)
		}
	}
	assert.Positive(t, ss.Stats().Capture.Replays)
	assert.Zero(t, ss.Stats().CaptureFallbacks)
}

// TestInferenceReadsNewGraphsInPlace: on sim, graphs of the same sizes
// with other values are uploaded into the buffers of the previous one,
// which the captured graph for them reads in place (no input copies): a
// replay over each new graph gives the CPU's logits and values bitwise,
// and the step holds a graph bound to its inputs.
func TestInferenceReadsNewGraphsInPlace(t *testing.T) {
	want, in, _ := inferencePair(t, tensor.Sim(0))
	for call := 0; call < 8; call++ {
		var inputs []GraphInput
		for i, n := range []int{3, 1, 5, 2} {
			inputs = append(inputs, testInput(t, n, i+call)) // the same sizes, other values
		}
		g, err := BuildGraphBatch(inputs)
		require.NoError(t, err)
		sameForward(t, want, in, g, "call %d", call)
	}
	st := in.Stats()
	assert.Equal(t, 1, st.BoundGraphs, "one graph bound to the reused buffers")
	assert.GreaterOrEqual(t, st.Replays, 5)
}

// inferencePair returns devicePair's policies as Inferences: the CPU's
// eager, dev's captured (a capture that falls back fails t), and dev's
// policy.
func inferencePair(t *testing.T, dev tensor.Device) (want, in *Inference, onDev *Policy) {
	t.Helper()
	cpu, onDev, _, _ := devicePair(t, dev)
	want, err := NewInference(cpu, InferenceOptions{NoCapture: true})
	require.NoError(t, err)
	in, err = NewInference(onDev, InferenceOptions{OnFallback: func(err error) { t.Errorf("capture fell back: %v", err) }})
	require.NoError(t, err)
	return want, in, onDev
}

// sameForward runs g through want (the CPU's Inference) and in, and
// requires the same logits and values.
func sameForward(t *testing.T, want, in *Inference, g *Graph, msgAndArgs ...any) {
	t.Helper()
	w, err := want.Forward(g)
	require.NoError(t, err)
	got, err := in.Forward(g)
	require.NoError(t, err)
	require.Equal(t, w, got, msgAndArgs...)
}

// TestStagingRecutsAReusedBuffer: a kept device buffer staged into
// again with another layout of the same length gets views cut anew,
// with their own shapes and values; staged again as before, it gets
// the very view tensors of that layout's last cut.
func TestStagingRecutsAReusedBuffer(t *testing.T) {
	dev := tensor.Sim(0)
	var reuse stagingBuffers
	stage := func(a, b []float32, sa, sb []int) (*tensor.Tensor, *tensor.Tensor) {
		st := reuse.staging(dev, tensor.F32)
		var ta, tb *tensor.Tensor
		st.float32s(&ta, a, sa...)
		st.float32s(&tb, b, sb...)
		require.NoError(t, st.upload())
		return ta, tb
	}
	host := func(x *tensor.Tensor) []float32 { return testdevice.Host(t, x).F32() }
	a1, b1 := stage([]float32{1, 2, 3, 4, 5, 6}, []float32{7, 8, 9, 10}, []int{2, 3}, []int{4})
	a2, b2 := stage([]float32{1, 2, 3, 4}, []float32{5, 6, 7, 8, 9, 10}, []int{4}, []int{3, 2})
	require.Equal(t, []int{4}, a2.Shape())
	require.Equal(t, []int{3, 2}, b2.Shape())
	require.Equal(t, []float32{5, 6, 7, 8, 9, 10}, host(b2))
	a3, b3 := stage([]float32{0, 0, 0, 0}, []float32{1, 1, 1, 1, 1, 1}, []int{4}, []int{3, 2})
	require.Same(t, a2, a3, "the same layout: the same view tensors")
	require.Same(t, b2, b3)
	require.Equal(t, []float32{1, 1, 1, 1, 1, 1}, host(b3))
	require.NotSame(t, a1, a2)
	require.Equal(t, []int{4}, b1.Shape(), "an earlier cut's tensors keep their shapes")
	require.Len(t, reuse.bufs, 1, "one buffer, reused")
}

// TestStagingComparesIndicesAsTheyCome: index slices equal to the last
// upload's are not copied into the host buffer (the staging compares
// them as they come), and every view gets its values whatever the
// sequence — the same indices, fewer that are a prefix of the last
// ones, more, one slice changed, the first ones again — with the device
// buffer copied only when the values differ from the ones it holds.
func TestStagingComparesIndicesAsTheyCome(t *testing.T) {
	fake := &fakeStagers{}
	useFakeStagers(t, fake, 64<<10)
	dev := tensor.Sim(0)
	var reuse stagingBuffers
	reuse.up = &pinnedUpload{dev: dev}
	a, b, c := []int64{1, 2, 3}, []int64{4, 5}, []int64{6, 7}
	type step struct {
		slices [][]int64
		fresh  bool // a length not staged before: a buffer made from the values
		copied bool // else, the kept buffer's values differ: copied into it
	}
	steps := []step{
		{[][]int64{a, b}, true, false},
		{[][]int64{a, b}, false, false},
		{[][]int64{a, b[:1]}, true, false}, // fewer, a prefix of the last
		{[][]int64{a, b[:1]}, false, false},
		{[][]int64{a, b, c}, true, false}, // more
		{[][]int64{a, {4, 9}, c}, false, true},
		{[][]int64{a, b}, false, false}, // the first buffer, still holding them
		{[][]int64{a, b}, false, false},
	}
	for i, step := range steps {
		st := reuse.staging(dev, tensor.F32)
		ts := make([]*tensor.Tensor, len(step.slices))
		for k, v := range step.slices {
			st.int64s(&ts[k], v, len(v))
		}
		if i > 0 && slices.EqualFunc(step.slices, steps[i-1].slices, slices.Equal) {
			require.Empty(t, st.ints, "step %d: the last upload's indices again, yet copied into the host buffer", i)
		}
		stages := fake.byDType[tensor.I64]
		require.NoError(t, st.upload(), "step %d", i)
		reuse.up.release()
		if copied := fake.byDType[tensor.I64] > stages; !step.fresh {
			require.Equal(t, step.copied, copied, "step %d: the index buffer copied", i)
		}
		for k, v := range step.slices {
			require.Equal(t, v, testdevice.Host(t, ts[k]).I64(), "step %d, slice %d", i, k)
		}
	}
}

// TestInferenceJoinedHeadsOnSim: when every graph of a batch has all its
// slots, the heads' join on sim writes the logits and value side by side
// (the policy's joined output) and Inference reads them from there,
// eager and captured, with bitwise the CPU's logits and values; a batch
// of uneven slot counts has no joined output (its slot logits are
// padded after the heads) and reads bitwise the same as well. With
// gathered inputs declined (sim's SetGatherIn(false), as CUDA's
// ESPER_CUDA_GATHER_IN=off) every forward reads the same bits from a
// graph of three nodes more (the gathers), four for a full batch (and
// the join of the logits).
func TestInferenceJoinedHeadsOnSim(t *testing.T) {
	dev := tensor.Sim(1)
	cpu := newPolicy(t, smallOptions(tensor.F32))
	sim := newPolicy(t, smallOptions(tensor.F32))
	require.NoError(t, nn.To(sim, dev))
	want, err := NewInference(cpu, InferenceOptions{NoCapture: true})
	require.NoError(t, err)
	for _, counts := range [][]int{{3, 3, 3}, {3, 1, 5, 2}} {
		var inputs []GraphInput
		for i, n := range counts {
			inputs = append(inputs, testInput(t, n, i))
		}
		g, err := BuildGraphBatch(inputs)
		require.NoError(t, err)
		gt, err := sim.tensors(g)
		require.NoError(t, err)
		var out *PolicyOutput
		autograd.InferenceMode(func() { out = sim.run(gt) })
		full := counts[1] == 3
		if full {
			require.NotNil(t, out.joined, "%v slots: the heads' join writes the joined output", counts)
			width := 1 // the value
			for _, n := range leyline.HeadSizes(g.MaxSlots()) {
				width += n
			}
			require.Equal(t, []int{len(counts), width}, out.joined.Shape())
		} else {
			require.Nil(t, out.joined, "%v slots: padded slot logits, no joined output", counts)
		}
		nodes := map[bool]int{}
		for _, gatherIn := range []bool{true, false} {
			kernels.For(dev).(interface{ SetGatherIn(bool) }).SetGatherIn(gatherIn)
			for _, o := range []InferenceOptions{{NoCapture: true}, {}} {
				in, err := NewInference(sim, o)
				require.NoError(t, err)
				for i := 0; i < 3; i++ { // eager; warm-up, capture and replay
					w, err := want.Forward(g)
					require.NoError(t, err)
					got, err := in.Forward(g)
					require.NoError(t, err)
					require.Equal(t, w, got, "%v slots, %+v, gathered inputs %v, forward %d", counts, o, gatherIn, i)
				}
				if !o.NoCapture {
					nodes[gatherIn] = in.GraphNodes()
				}
			}
		}
		kernels.For(dev).(interface{ SetGatherIn(bool) }).SetGatherIn(true)
		// Declined, the encoders' input and the heads' two are gathered
		// in launches of their own, and a full batch's logits joined
		// after the heads.
		more := 3
		if full {
			more = 4
		}
		require.Equal(t, nodes[false], nodes[true]+more, "%v slots: graph nodes with gathered inputs off and on", counts)
	}
}
