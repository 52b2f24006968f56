package kasmina

import (
	"errors"
	"math"
	"slices"
	"testing"

	"github.com/esper-go/esper/autograd"
	"github.com/esper-go/esper/internal/testdevice"
	"github.com/esper-go/esper/leyline"
	"github.com/esper-go/esper/nn"
	"github.com/esper-go/esper/tensor"
)

func noErr(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatalf("unexpected error: %v", err)
	}
}

func wantErr(t *testing.T, err error, target error) {
	t.Helper()
	if err == nil {
		t.Fatalf("expected an error")
	}
	if target != nil && !errors.Is(err, target) {
		t.Fatalf("error %v does not wrap %v", err, target)
	}
}

func check(t *testing.T, ok bool, format string, args ...any) {
	t.Helper()
	if !ok {
		t.Fatalf(format, args...)
	}
}

// bitwiseEqual reports whether a and b (of any device) have the same
// shape, dtype and bits, reading them through the test device's
// explicit copies.
func bitwiseEqual(t *testing.T, a, b *tensor.Tensor) bool {
	t.Helper()
	if !tensor.SameShape(a.Shape(), b.Shape()) || a.DType() != b.DType() {
		return false
	}
	x, y := testdevice.F64(t, a), testdevice.F64(t, b)
	for i := range x {
		if math.Float64bits(x[i]) != math.Float64bits(y[i]) {
			return false
		}
	}
	return true
}

// maxAbsDiff is the largest |a − b| over the elements (of any device).
func maxAbsDiff(t *testing.T, a, b *tensor.Tensor) float64 {
	t.Helper()
	x, y := testdevice.F64(t, a), testdevice.F64(t, b)
	d := 0.0
	for i := range x {
		d = math.Max(d, math.Abs(x[i]-y[i]))
	}
	return d
}

// allZero reports whether every element of x (of any device) is zero.
func allZero(t *testing.T, x *tensor.Tensor) bool {
	t.Helper()
	for _, v := range testdevice.F64(t, x) {
		if v != 0 {
			return false
		}
	}
	return true
}

// toDevice moves m to the test device (nn.To).
func toDevice(t *testing.T, m nn.Module) {
	t.Helper()
	noErr(t, nn.To(m, testdevice.Device(t)))
}

// smallCNN is a 2-block host over 1×8×8 inputs with 4/8 channels, on the
// test device.
func smallCNN(t *testing.T, seed uint64, dt tensor.DType) *CNNHost {
	t.Helper()
	h, err := NewCNNHost(CNNHostOptions{InChannels: 1, Classes: 3, Blocks: 2, BaseChannels: 4, RNG: tensor.NewRNG(seed), DType: dt})
	noErr(t, err)
	toDevice(t, h)
	return h
}

// input is a uniform random activation in [−1, 1) on the test device.
func input(t *testing.T, seed uint64, dt tensor.DType, shape ...int) *autograd.Var {
	t.Helper()
	return autograd.Const(testdevice.To(t, tensor.Uniform(tensor.NewRNG(seed), dt, -1, 1, shape...)))
}

// onDevice is x on the test device, as a constant.
func onDevice(t *testing.T, x *tensor.Tensor) *autograd.Var {
	t.Helper()
	return autograd.Const(testdevice.To(t, x))
}

// recorder is an EventSink that keeps every event.
type recorder struct{ events []leyline.TelemetryEvent }

func (r *recorder) Emit(e leyline.TelemetryEvent) { r.events = append(r.events, e) }

func (r *recorder) types() []leyline.EventType {
	var out []leyline.EventType
	for _, e := range r.events {
		out = append(out, e.Type)
	}
	return out
}

func (r *recorder) count(t leyline.EventType) int {
	n := 0
	for _, e := range r.events {
		if e.Type == t {
			n++
		}
	}
	return n
}

// readyForBlending makes the permissive (and strict) G2 pass.
func readyForBlending(st *SeedState) {
	st.Metrics.EpochsInCurrentStage = MinBlendingEpochs
	st.Telemetry.HealthMeasured = true
	st.Telemetry.GradientHealth = 1
	r := 1.0
	st.Metrics.SeedGradientNormRatio = &r
	st.Metrics.CurrentValAccuracy = st.Metrics.AccuracyAtStageStart + 1
}

// advanceTo drives a germinated seed forward to stage, making each gate
// pass.
func advanceTo(t *testing.T, s *Slot, stage leyline.SeedStage) {
	t.Helper()
	for s.Stage() != stage {
		st := s.State()
		switch st.Stage {
		case leyline.StageTraining:
			readyForBlending(st)
		case leyline.StageBlending:
			for !st.AlphaController.AtTarget() {
				s.StepEpoch()
			}
			st.Metrics.EpochsInCurrentStage = MinBlendingEpochs
		case leyline.StageHolding:
			c := 2.0
			st.Metrics.CounterfactualContribution = &c
		}
		res, err := s.AdvanceStage(0)
		noErr(t, err)
		check(t, res.Passed, "advance from %v failed: %s", st.Stage, res.Message)
	}
}

func containsStr(xs []string, x string) bool { return slices.Contains(xs, x) }
