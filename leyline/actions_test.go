package leyline

import (
	"math"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/x448/float16"
)

func TestHeadNamesFixedOrder(t *testing.T) {
	assert.Equal(t, 8, NumActionHeads)
	assert.Equal(t, [8]string{"slot", "blueprint", "style", "tempo", "alpha_target", "alpha_speed", "alpha_curve", "op"}, HeadNames)
	for i, n := range HeadNames {
		assert.Equal(t, i, HeadIndex(n))
	}
	assert.Equal(t, -1, HeadIndex("blend"))
	assert.Equal(t, "op", HeadNames[HeadOp])
	assert.Equal(t, "alpha_curve", HeadNames[HeadAlphaCurve])
}

func TestOptionTables(t *testing.T) {
	assert.Equal(t, [3]int{3, 5, 8}, TempoToEpochs)
	assert.Equal(t, 3, TempoFast.Epochs())
	assert.Equal(t, 5, TempoStandard.Epochs())
	assert.Equal(t, 8, TempoSlow.Epochs())
	assert.Equal(t, 0, TempoAction(3).Epochs())

	assert.Equal(t, []float64{0.5, 0.7, 1.0}, AlphaTargetValues[:])
	assert.Equal(t, 1.0, AlphaTargetFull.Value())
	assert.True(t, math.IsNaN(AlphaTargetAction(9).Value()))
	assert.Equal(t, []int{0, 3, 5, 8}, AlphaSpeedTicks[:])
	assert.Equal(t, 5, AlphaSpeedMedium.Ticks())

	curves := []struct {
		a     AlphaCurveAction
		curve AlphaCurve
		steep float64
	}{
		{AlphaCurveActLinear, CurveLinear, 12},
		{AlphaCurveActCosine, CurveCosine, 12},
		{AlphaCurveActSigmoidGentle, CurveSigmoid, 6},
		{AlphaCurveActSigmoid, CurveSigmoid, 12},
		{AlphaCurveActSigmoidSharp, CurveSigmoid, 24},
	}
	for _, c := range curves {
		assert.Equal(t, c.curve, c.a.Curve(), "%v", c.a)
		assert.Equal(t, c.steep, c.a.Steepness(), "%v", c.a)
	}

	styles := []struct {
		s     GerminationStyle
		blend string
		algo  AlphaAlgorithm
	}{
		{StyleLinearAdd, "linear", BlendAdd},
		{StyleLinearMultiply, "linear", BlendMultiply},
		{StyleSigmoidAdd, "sigmoid", BlendAdd},
		{StyleGatedGate, "gated", BlendGate},
	}
	for _, c := range styles {
		assert.Equal(t, c.blend, c.s.BlendID())
		assert.Equal(t, c.algo, c.s.Algorithm())
	}

	assert.Equal(t, [6]string{"WAIT", "GERMINATE", "SET_ALPHA_TARGET", "PRUNE", "FOSSILIZE", "ADVANCE"}, OpNames)
	for i, n := range OpNames {
		assert.Equal(t, n, LifecycleOp(i).String())
		op, err := ParseLifecycleOp(n)
		require.NoError(t, err)
		assert.Equal(t, LifecycleOp(i), op)
	}
	_, err := ParseLifecycleOp("wait")
	assert.Error(t, err)
}

func TestBlueprintTables(t *testing.T) {
	assert.Equal(t, 13, NumBlueprints)
	assert.Equal(t, 13, BlueprintNullIndex)
	want := map[BlueprintAction]string{
		BlueprintNoop: "noop", BlueprintConvLight: "conv_light", BlueprintAttention: "attention",
		BlueprintNorm: "norm", BlueprintDepthwise: "depthwise", BlueprintBottleneck: "bottleneck",
		BlueprintConvSmall: "conv_small", BlueprintConvHeavy: "conv_heavy", BlueprintLora: "lora",
		BlueprintLoraLarge: "lora_large", BlueprintMLPSmall: "mlp_small", BlueprintMLP: "mlp",
		BlueprintFlexAttention: "flex_attention",
	}
	for b, id := range want {
		assert.Equal(t, id, b.ID())
		assert.Equal(t, id, BlueprintIDs[b])
		assert.Equal(t, int(b), BlueprintIndex(id))
	}
	assert.Equal(t, -1, BlueprintIndex("unknown"))
	assert.Equal(t, -1, BlueprintIndex("NOOP"))
	assert.Equal(t, "", BlueprintAction(13).ID())
}

func TestTopologyBlueprints(t *testing.T) {
	cnn, err := TopologyBlueprints("cnn")
	require.NoError(t, err)
	assert.Equal(t, []BlueprintAction{0, 1, 2, 3, 4, 5, 6, 7}, cnn)
	mlp, err := TopologyBlueprints("mlp")
	require.NoError(t, err)
	var ids []string
	for _, b := range mlp {
		ids = append(ids, b.ID())
	}
	assert.Equal(t, []string{"noop", "norm", "lora", "lora_large", "mlp_small", "mlp"}, ids)
	tr, err := TopologyBlueprints("transformer")
	require.NoError(t, err)
	assert.ElementsMatch(t, []BlueprintAction{BlueprintNoop, BlueprintNorm, BlueprintAttention, BlueprintLora,
		BlueprintLoraLarge, BlueprintMLPSmall, BlueprintMLP, BlueprintFlexAttention}, tr)
	for _, bad := range []string{"CNN", " cnn", "cnn ", "", "resnet"} {
		_, err := TopologyBlueprints(bad)
		assert.Error(t, err, "%q", bad)
	}
	assert.True(t, BlueprintAllowed("cnn", BlueprintConvHeavy))
	assert.False(t, BlueprintAllowed("mlp", BlueprintConvHeavy))
	assert.False(t, BlueprintAllowed("Cnn", BlueprintNoop))
}

func TestFactoredActionRoundTrip(t *testing.T) {
	for _, numSlots := range []int{1, 3, 25} {
		sizes := HeadSizes(numSlots)
		assert.Equal(t, numSlots, sizes[HeadSlot])
		// Every corner of every head.
		for h := range NumActionHeads {
			for _, v := range []int{0, sizes[h] - 1} {
				var idx [NumActionHeads]int
				idx[h] = v
				a, err := FactoredActionFromIndices(idx, numSlots)
				require.NoError(t, err)
				assert.Equal(t, idx, a.ToIndices())
				assert.NoError(t, a.Validate(numSlots))
			}
		}
	}
	a := FactoredAction{Slot: 2, Blueprint: BlueprintNorm, Style: StyleGatedGate, Tempo: TempoSlow,
		AlphaTarget: AlphaTargetSeventy, AlphaSpeed: AlphaSpeedFast, AlphaCurve: AlphaCurveActSigmoidSharp, Op: OpGerminate}
	assert.Equal(t, [8]int{2, 3, 3, 2, 1, 1, 4, 1}, a.ToIndices())
	back, err := FactoredActionFromIndices(a.ToIndices(), 3)
	require.NoError(t, err)
	assert.Equal(t, a, back)
}

func TestFactoredActionRangeErrors(t *testing.T) {
	sizes := HeadSizes(3)
	for h := range NumActionHeads {
		for _, v := range []int{-1, sizes[h]} {
			var idx [NumActionHeads]int
			idx[h] = v
			_, err := FactoredActionFromIndices(idx, 3)
			require.Error(t, err)
			assert.Contains(t, err.Error(), HeadNames[h])
		}
	}
	assert.Error(t, FactoredAction{Slot: 3}.Validate(3))
}

func TestHeadMaxEntropies(t *testing.T) {
	e := HeadMaxEntropies(3)
	assert.InDelta(t, math.Log(3), e[HeadSlot], 1e-12)
	assert.InDelta(t, math.Log(13), e[HeadBlueprint], 1e-12)
	assert.InDelta(t, math.Log(4), e[HeadStyle], 1e-12)
	assert.InDelta(t, math.Log(3), e[HeadTempo], 1e-12)
	assert.InDelta(t, math.Log(3), e[HeadAlphaTarget], 1e-12)
	assert.InDelta(t, math.Log(4), e[HeadAlphaSpeed], 1e-12)
	assert.InDelta(t, math.Log(5), e[HeadAlphaCurve], 1e-12)
	assert.InDelta(t, math.Log(6), e[HeadOp], 1e-12)
	assert.Equal(t, 0.0, HeadMaxEntropies(1)[HeadSlot])
	assert.InDelta(t, math.Log(25), HeadMaxEntropies(25)[HeadSlot], 1e-12)
}

// softmax16 computes softmax in float16 arithmetic (each operation rounded
// to half precision), as a half-precision kernel would.
func softmax16(x []float32) []float32 {
	h := make([]float16.Float16, len(x))
	mx := float16.Fromfloat32(float32(math.Inf(-1)))
	for i, v := range x {
		h[i] = float16.Fromfloat32(v)
		if h[i].Float32() > mx.Float32() {
			mx = h[i]
		}
	}
	sum := float16.Fromfloat32(0)
	e := make([]float16.Float16, len(x))
	for i := range h {
		d := float16.Fromfloat32(h[i].Float32() - mx.Float32())
		e[i] = float16.Fromfloat32(float32(math.Exp(float64(d.Float32()))))
		sum = float16.Fromfloat32(sum.Float32() + e[i].Float32())
	}
	out := make([]float32, len(x))
	for i := range e {
		out[i] = float16.Fromfloat32(e[i].Float32() / sum.Float32()).Float32()
	}
	return out
}

func TestMaskedLogitValueFiniteInFP16(t *testing.T) {
	assert.Less(t, MaskedLogitValue, float32(-1000))
	h := float16.Fromfloat32(MaskedLogitValue)
	assert.False(t, h.IsInf(0))
	assert.False(t, h.IsNaN())
	assert.Equal(t, MaskedLogitValue, h.Float32(), "-1e4 is exact in float16")
	// The lowest float16 value would overflow: lowest − max logit = −Inf.
	lowest := float16.Fromfloat32(-65504)
	assert.True(t, float16.Fromfloat32(lowest.Float32()-100).IsInf(-1))

	p := softmax16([]float32{2.5, MaskedLogitValue, -1, MaskedLogitValue})
	var sum float32
	for _, v := range p {
		assert.False(t, math.IsNaN(float64(v)) || math.IsInf(float64(v), 0))
		sum += v
	}
	assert.Equal(t, float32(0), p[1])
	assert.Equal(t, float32(0), p[3])
	assert.InDelta(t, 1, sum, 2e-3)
	assert.Greater(t, p[0], p[2])
}
