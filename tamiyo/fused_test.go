package tamiyo

import (
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/esper-go/esper/autograd"
	"github.com/esper-go/esper/internal/testdevice"
	"github.com/esper-go/esper/leyline"
	"github.com/esper-go/esper/optim"
	"github.com/esper-go/esper/tensor"
)

// TestInferenceFusedMatchesTraining: in inference mode the message
// passing takes the fused aggregations (kernels.GraphAggregator: one
// launch per GAT relation and per SAGE mean), with gradients the unfused
// ops; both give the same logits and values to float32 rounding, on the
// test device, at the default widths (4 heads of 128).
func TestInferenceFusedMatchesTraining(t *testing.T) {
	o := PolicyOptions{Seed: 11, NoDropout: true}
	p := mustPolicy(t, o)
	var inputs []GraphInput
	for i, n := range []int{3, 1, 5, 2} {
		inputs = append(inputs, testInput(t, n, i))
	}
	g, err := BuildGraphBatch(inputs)
	require.NoError(t, err)
	train, err := p.Run(g) // gradients recorded: the unfused ops
	require.NoError(t, err)
	require.True(t, train.Value.RequiresGrad())
	var inf *PolicyOutput
	autograd.InferenceMode(func() { inf, err = p.Run(g) })
	require.NoError(t, err)
	require.False(t, inf.Value.RequiresGrad())
	pairs := [][2]*autograd.Var{{inf.Value, train.Value}}
	for h := 0; h < leyline.NumActionHeads; h++ {
		pairs = append(pairs, [2]*autograd.Var{inf.Logits[h], train.Logits[h]})
	}
	for i, pr := range pairs {
		got, want := hostFloats(t, pr[0].Value), hostFloats(t, pr[1].Value)
		require.Len(t, got, len(want))
		for k := range got {
			require.InDelta(t, want[k], got[k], 2e-5*math.Max(1, math.Abs(want[k])), "output %d element %d", i, k)
		}
	}
	// The fused path is taken: the captured forward is 236 launches on
	// this batch (625 with the unfused ops, which take 17 more per GAT
	// relation with edges and 1 more per SAGE relation).
	in, err := NewInference(p, InferenceOptions{})
	require.NoError(t, err)
	for i := 0; i < 3; i++ {
		_, err := in.Forward(g)
		require.NoError(t, err)
	}
	t.Logf("captured inference forward: %d launches", in.GraphNodes())
	require.Less(t, in.GraphNodes(), 300, "fused message passing (the unfused forward takes over 600 launches)")
}

// TestInferenceFollowsRepointedParameters: an optimizer's arena moves
// the parameters into buffers of its own after the forward was captured;
// the next forward recaptures and reads them there (with the values
// changed since), instead of replaying over the old tensors.
func TestInferenceFollowsRepointedParameters(t *testing.T) {
	p := mustPolicy(t, smallOptions(tensor.F32))
	g, err := BuildGraphBatch([]GraphInput{testInput(t, 3, 0), testInput(t, 2, 1)})
	require.NoError(t, err)
	in, err := NewInference(p, InferenceOptions{OnFallback: func(err error) { t.Errorf("capture fell back: %v", err) }})
	require.NoError(t, err)
	for i := 0; i < 3; i++ {
		_, err := in.Forward(g)
		require.NoError(t, err)
	}
	before := in.Stats().Captures
	_, err = optim.NewSGD(p.Parameters(), optim.SGDOptions{LR: 0.1}) // repoints Value and Grad
	require.NoError(t, err)
	w := p.heads[leyline.HeadOp].fc2.Bias // the op logits' bias, now a view of the arena
	require.NoError(t, tensor.CopyFromHost(w.Value, tensor.Full(tensor.F32, 0.5, w.Value.Shape()...)))
	eager, err := NewInference(p, InferenceOptions{NoCapture: true})
	require.NoError(t, err)
	want, err := eager.Forward(g)
	require.NoError(t, err)
	for i := 0; i < 3; i++ { // a warm-up under the new version, a capture, a replay
		got, err := in.Forward(g)
		require.NoError(t, err)
		require.Equal(t, want, got, "call %d after the move", i)
	}
	require.Greater(t, in.Stats().Captures, before, "recaptured over the moved parameters")
}

// TestInferenceLastPhases: before a forward there are no phases; after
// one, eager and captured, each phase is positive and the three fit in
// the forward's own time.
func TestInferenceLastPhases(t *testing.T) {
	p := mustPolicy(t, smallOptions(tensor.F32))
	g, err := BuildGraphBatch([]GraphInput{testInput(t, 3, 0), testInput(t, 2, 1)})
	require.NoError(t, err)
	for _, o := range []InferenceOptions{{NoCapture: true}, {}} {
		in, err := NewInference(p, o)
		require.NoError(t, err)
		require.Zero(t, in.LastPhases())
		for i := 0; i < 3; i++ { // warm-up, capture, replay
			t0 := time.Now()
			_, err := in.Forward(g)
			took := time.Since(t0)
			require.NoError(t, err)
			ph := in.LastPhases()
			require.Positive(t, ph.Upload)
			require.Positive(t, ph.Run)
			require.Positive(t, ph.Read)
			require.LessOrEqual(t, ph.Upload+ph.Run+ph.Read, took)
		}
	}
}

// TestInferenceClose: Close drops the captured forward's graph, keeping
// the counters; the next forwards capture again and give the same
// logits. Without capture Close does nothing.
func TestInferenceClose(t *testing.T) {
	dev := testdevice.Device(t)
	p, err := NewPolicy(PolicyOptions{Seed: 4, NoDropout: true, Device: dev})
	require.NoError(t, err)
	g := benchGraph(t, 4)
	in, err := NewInference(p, InferenceOptions{})
	require.NoError(t, err)
	var want *Logits
	for range 3 {
		want, err = in.Forward(g)
		require.NoError(t, err)
	}
	require.Positive(t, in.GraphNodes())
	st := in.Stats()
	require.NoError(t, in.Close())
	require.Zero(t, in.GraphNodes())
	require.Zero(t, in.Stats().CachedGraphs)
	require.Equal(t, st.Captures, in.Stats().Captures, "the counters stay")
	for range 2 { // a warm-up, a capture
		got, err := in.Forward(g)
		require.NoError(t, err)
		require.Equal(t, want, got)
	}
	require.Equal(t, st.Captures+1, in.Stats().Captures)
	require.Positive(t, in.GraphNodes())

	eager, err := NewInference(p, InferenceOptions{NoCapture: true})
	require.NoError(t, err)
	require.NoError(t, eager.Close())
}
