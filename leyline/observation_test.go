package leyline

import (
	"errors"
	"math"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func fullSlot() *ObsSlotState {
	return &ObsSlotState{
		Stage: StageBlending, BlueprintID: "conv_heavy", Alpha: 0.4,
		CounterfactualContribution: Float64Ptr(25), ContributionVelocity: -3,
		BlendTempoEpochs: 6, AlphaTarget: 0.7, AlphaMode: AlphaUp,
		AlphaStepsTotal: 8, AlphaStepsDone: 30, TimeToTarget: 4, AlphaVelocity: 2,
		AlphaAlgorithm: BlendGate, InteractionSum: 5,
		GradientNorm: Float64Ptr(math.E - 1), GradientHealth: Float64Ptr(0.8),
		HasVanishing: true, PrevGradientHealth: Float64Ptr(0.6),
		EpochsInStage: 5, EpochsSinceCounterfactual: IntPtr(2), EpochsTotal: 40,
	}
}

func obsInput() ObsInput {
	return ObsInput{
		Signals: TrainingSignals{
			Metrics:         TrainingMetrics{Epoch: 5, ValLoss: math.E - 1, ValAccuracy: 61},
			LossHistory:     []float64{9, 8, math.E - 1},
			AccuracyHistory: []float64{1, 2, 3, 4, 5, 50, 61},
		},
		MaxEpochs: 20, LastActionSuccess: true, LastOp: OpPrune,
		Slots:      DefaultSlotConfig(),
		SlotStates: map[string]*ObsSlotState{"r0c1": fullSlot()},
	}
}

func TestObservationSize(t *testing.T) {
	assert.Equal(t, 116, ObservationSize(3))
	assert.Equal(t, 23+31, ObservationSize(1))
	assert.Equal(t, 23+31*25, ObservationSize(25))
	assert.Equal(t, 128, ObservationSize(3)+3*BlueprintEmbeddingDim)
}

func TestSymlog(t *testing.T) {
	assert.Equal(t, 0.0, Symlog(0))
	assert.InDelta(t, math.Log(2), Symlog(1), 1e-15)
	assert.InDelta(t, -math.Log(2), Symlog(-1), 1e-15)
	assert.InDelta(t, math.Log(101), Symlog(100), 1e-12)
}

func TestBuildObservationValues(t *testing.T) {
	o, err := BuildObservation(obsInput())
	require.NoError(t, err)
	require.Len(t, o.Features, 116)
	f := o.Features
	d := 1e-6
	assert.InDelta(t, 0.25, f[0], d)
	assert.InDelta(t, 1.0/7, f[1], d) // symlog(e−1) = 1
	assert.InDelta(t, 0.61, f[2], d)
	// Loss history: 3 values, left-padded with two −1.
	assert.Equal(t, float32(-1), f[3])
	assert.Equal(t, float32(-1), f[4])
	assert.InDelta(t, math.Log(10)/7, f[5], d)
	assert.InDelta(t, 1.0/7, f[7], d)
	// Accuracy history: the last 5 of 7.
	assert.InDelta(t, 0.03, f[8], d)
	assert.InDelta(t, 0.61, f[12], d)
	assert.InDelta(t, 0.0, f[13], d)   // training
	assert.InDelta(t, 1.0/3, f[14], d) // blending
	assert.InDelta(t, 0.0, f[15], d)   // holding+fossilized
	assert.Equal(t, float32(1), f[16]) // success
	assert.Equal(t, []float32{0, 0, 0, 1, 0, 0}, f[17:23])

	// Empty slots: all zeros, blueprint −1.
	assert.Equal(t, make([]float32, 31), f[23:54])
	assert.Equal(t, make([]float32, 31), f[85:116])
	assert.Equal(t, []int{-1, int(BlueprintConvHeavy), -1}, o.BlueprintIndices)

	s := f[54:85]
	assert.Equal(t, float32(1), s[0])
	oh, _ := StageOneHot(StageBlending)
	assert.Equal(t, oh[:], s[1:11])
	want := map[int]float64{
		11: 0.4, 12: 1, 13: -0.3, 14: 0.5, 15: 0.7, 16: 0.5,
		17: 8.0 / 20, 18: 1, 19: 4.0 / 20, 20: 1, 21: 1, 22: 0.5,
		23: 1.0 / 7, 24: 0.8, 25: 1, 26: 0, 27: 0.6, 28: 0.25,
		29: 0.995 * 0.995, 30: 1,
	}
	for i, v := range want {
		assert.InDelta(t, v, s[i], d, "slot feature %d", i)
	}
}

func TestObservationMissingTelemetryNeverHealthy(t *testing.T) {
	in := obsInput()
	st := fullSlot()
	st.GradientNorm, st.GradientHealth, st.PrevGradientHealth = nil, nil, nil
	st.CounterfactualContribution, st.EpochsSinceCounterfactual = nil, nil
	in.SlotStates["r0c1"] = st
	o, err := BuildObservation(in)
	require.NoError(t, err)
	s := o.Features[54:85]
	assert.Equal(t, float32(0), s[12], "missing counterfactual → 0")
	assert.Equal(t, float32(0), s[23], "unmeasured grad norm → 0")
	assert.Equal(t, float32(0), s[24], "unmeasured health → 0, not healthy")
	assert.Equal(t, float32(-1), s[27], "previous health never recorded → −1")
	assert.Equal(t, float32(-1), s[29], "never measured freshness → −1")

	for _, g := range []float64{math.NaN(), math.Inf(1), math.Inf(-1)} {
		st.GradientNorm = Float64Ptr(g)
		o, err = BuildObservation(in)
		require.NoError(t, err)
		assert.Equal(t, float32(0), o.Features[54+23], "non-finite grad norm → 0")
	}
}

func TestObservationErrors(t *testing.T) {
	cases := []struct {
		name, contains string
		edit           func(*ObsInput)
	}{
		{"nan health", "gradient health", func(in *ObsInput) { in.SlotStates["r0c1"].GradientHealth = Float64Ptr(math.NaN()) }},
		{"inf health", "gradient health", func(in *ObsInput) { in.SlotStates["r0c1"].GradientHealth = Float64Ptr(math.Inf(1)) }},
		{"nan previous health", "previous gradient health", func(in *ObsInput) { in.SlotStates["r0c1"].PrevGradientHealth = Float64Ptr(math.NaN()) }},
		{"reserved stage", "reserved", func(in *ObsInput) { in.SlotStates["r0c1"].Stage = 5 }},
		{"unknown blueprint", "blueprint", func(in *ObsInput) { in.SlotStates["r0c1"].BlueprintID = "resnet" }},
		{"unknown slot", "r7c7", func(in *ObsInput) { in.SlotStates["r7c7"] = nil }},
		{"max epochs", "max epochs", func(in *ObsInput) { in.MaxEpochs = 0 }},
		{"last op", "last op", func(in *ObsInput) { in.LastOp = 6 }},
		{"nan val loss", "non-finite", func(in *ObsInput) { in.Signals.Metrics.ValLoss = math.NaN() }},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			in := obsInput()
			in.SlotStates["r0c1"] = fullSlot()
			c.edit(&in)
			_, err := BuildObservation(in)
			require.Error(t, err)
			assert.True(t, errors.Is(err, ErrObservation))
			assert.Contains(t, err.Error(), c.contains)
		})
	}
}

func TestObservationClampsAndPure(t *testing.T) {
	in := obsInput()
	in.Signals.Metrics.Epoch = 500
	a, err := BuildObservation(in)
	require.NoError(t, err)
	assert.Equal(t, float32(1), a.Features[0], "epoch_norm clamps to 1")
	b, err := BuildObservation(in)
	require.NoError(t, err)
	assert.Equal(t, a, b)
	assert.Equal(t, 5, in.SlotStates["r0c1"].EpochsInStage, "input untouched")
}

func TestObservationBatch(t *testing.T) {
	in := obsInput()
	empty := obsInput()
	empty.SlotStates = nil
	feats, bps, err := BuildObservationBatch([]ObsInput{in, empty})
	require.NoError(t, err)
	assert.Len(t, feats, 2*116)
	assert.Equal(t, []int{-1, int(BlueprintConvHeavy), -1, -1, -1, -1}, bps)
	single, _ := BuildObservation(in)
	assert.Equal(t, single.Features, feats[:116])

	other := obsInput()
	cfg, _ := SlotConfigForGrid(1, 2)
	other.Slots = cfg
	other.SlotStates = nil
	_, _, err = BuildObservationBatch([]ObsInput{in, other})
	assert.ErrorContains(t, err, "env 1")
}

// BenchmarkBuildObservationBatch measures feature extraction for a batch
// of environments; the reference budget is < 1 ms per batch.
func BenchmarkBuildObservationBatch(b *testing.B) {
	inputs := make([]ObsInput, 8)
	for i := range inputs {
		in := obsInput()
		in.SlotStates["r0c0"] = fullSlot()
		in.SlotStates["r0c2"] = fullSlot()
		inputs[i] = in
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, _, err := BuildObservationBatch(inputs); err != nil {
			b.Fatal(err)
		}
	}
}
