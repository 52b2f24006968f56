package leyline

import (
	"encoding/json"
	"fmt"
	"math"
	"reflect"
	"sort"
	"strconv"
	"time"
)

// SeedTelemetryFeatureDim is the length of SeedTelemetry.ToFeatures: the
// stage one-hot (10) and 16 scalars (G2 schema v1).
const SeedTelemetryFeatureDim = NumStages + 16

// Scales of the legacy seed features (G2 leyline/telemetry.py).
const (
	seedFeatGradNormMax   = 10.0
	seedFeatEpochsMax     = 50
	seedFeatAccDeltaScale = 10.0
)

// SeedTelemetry is a seed's local picture for a controller (G2
// SeedTelemetry, the legacy 26-feature form). Gradient measurements that
// may be missing are pointers; nil encodes as 0.
type SeedTelemetry struct {
	SeedID      string
	BlueprintID string
	LayerID     string

	GradientNorm   *float64
	GradientHealth *float64
	HasVanishing   bool
	HasExploding   bool

	// Accuracy is on the 0–100 scale; AccuracyDelta > 0 is improvement.
	Accuracy      float64
	AccuracyDelta float64
	EpochsInStage int

	Stage SeedStage
	Alpha float64

	AlphaTarget     float64
	AlphaMode       AlphaMode
	AlphaStepsTotal int
	AlphaStepsDone  int
	TimeToTarget    int
	AlphaVelocity   float64
	AlphaAlgorithm  AlphaAlgorithm

	Epoch     int
	MaxEpochs int

	CapturedAt time.Time

	BlendTempoEpochs int
	BlendingVelocity float64
	// AlphaCurve is an AlphaCurveAction name ("LINEAR", "SIGMOID_SHARP").
	AlphaCurve string
}

// ToFeatures returns the 26 legacy features: stage one-hot (10),
// min(grad_norm, 10)/10, health, vanishing, exploding,
// min(epochs_in_stage, 50)/50, accuracy/100, clamp(accuracy_delta/10, ±1),
// alpha, epoch/max_epochs, alpha_target, alpha_mode/2, then steps total,
// steps done and time to target over max_epochs (clamped), clamp(alpha
// velocity, ±1) and (alpha_algorithm−1)/2. Unmeasured gradient values
// encode as 0; a non-finite gradient norm as 0; a non-finite health, an
// invalid stage, mode or algorithm is an error.
func (t SeedTelemetry) ToFeatures() ([SeedTelemetryFeatureDim]float32, error) {
	var f [SeedTelemetryFeatureDim]float32
	oneHot, err := StageOneHot(t.Stage)
	if err != nil {
		return f, fmt.Errorf("SeedTelemetry.ToFeatures: %w", err)
	}
	if !t.AlphaMode.Valid() || !t.AlphaAlgorithm.Valid() {
		return f, fmt.Errorf("leyline: SeedTelemetry.ToFeatures: invalid alpha mode %d or algorithm %d", int(t.AlphaMode), int(t.AlphaAlgorithm))
	}
	copy(f[:NumStages], oneHot[:])
	den := float64(max(t.MaxEpochs, 1))
	steps := func(v int) float32 { return float32(math.Min(float64(v), den) / den) }
	x := f[NumStages:]
	if g := t.GradientNorm; g != nil && finite(*g) {
		x[0] = float32(math.Min(math.Max(*g, 0), seedFeatGradNormMax) / seedFeatGradNormMax)
	}
	if h := t.GradientHealth; h != nil {
		if !finite(*h) {
			return f, fmt.Errorf("leyline: SeedTelemetry.ToFeatures: gradient health is %g", *h)
		}
		x[1] = float32(*h)
	}
	x[2] = boolFeature(t.HasVanishing)
	x[3] = boolFeature(t.HasExploding)
	x[4] = float32(float64(min(t.EpochsInStage, seedFeatEpochsMax)) / seedFeatEpochsMax)
	x[5] = float32(t.Accuracy / 100)
	x[6] = float32(clamp(t.AccuracyDelta/seedFeatAccDeltaScale, -1, 1))
	x[7] = float32(t.Alpha)
	x[8] = float32(float64(t.Epoch) / den)
	x[9] = float32(t.AlphaTarget)
	x[10] = float32(float64(t.AlphaMode) / 2)
	x[11] = steps(t.AlphaStepsTotal)
	x[12] = steps(t.AlphaStepsDone)
	x[13] = steps(t.TimeToTarget)
	x[14] = float32(clamp(t.AlphaVelocity, -1, 1))
	x[15] = float32(float64(t.AlphaAlgorithm-BlendAdd) / 2)
	return f, nil
}

// seedTelemetryKeys are the keys SeedTelemetryFromMap requires.
var seedTelemetryKeys = []string{
	"seed_id", "blueprint_id", "layer_id", "gradient_norm", "gradient_health",
	"has_vanishing", "has_exploding", "accuracy", "accuracy_delta", "epochs_in_stage",
	"stage", "alpha", "alpha_target", "alpha_mode", "alpha_steps_total", "alpha_steps_done",
	"time_to_target", "alpha_velocity", "alpha_algorithm", "epoch", "max_epochs",
	"captured_at", "blend_tempo_epochs", "blending_velocity", "alpha_curve",
}

// ToMap returns the telemetry as a plain map with snake_case keys, the
// inverse of SeedTelemetryFromMap (captured_at as RFC 3339 with
// nanoseconds; nil gradient values as nil).
func (t SeedTelemetry) ToMap() map[string]any {
	ptr := func(p *float64) any {
		if p == nil {
			return nil
		}
		return *p
	}
	return map[string]any{
		"schema_version": StageSchemaVersion,
		"seed_id":        t.SeedID, "blueprint_id": t.BlueprintID, "layer_id": t.LayerID,
		"gradient_norm": ptr(t.GradientNorm), "gradient_health": ptr(t.GradientHealth),
		"has_vanishing": t.HasVanishing, "has_exploding": t.HasExploding,
		"accuracy": t.Accuracy, "accuracy_delta": t.AccuracyDelta, "epochs_in_stage": t.EpochsInStage,
		"stage": int(t.Stage), "alpha": t.Alpha, "alpha_target": t.AlphaTarget,
		"alpha_mode": int(t.AlphaMode), "alpha_steps_total": t.AlphaStepsTotal,
		"alpha_steps_done": t.AlphaStepsDone, "time_to_target": t.TimeToTarget,
		"alpha_velocity": t.AlphaVelocity, "alpha_algorithm": int(t.AlphaAlgorithm),
		"epoch": t.Epoch, "max_epochs": t.MaxEpochs,
		"captured_at":        t.CapturedAt.UTC().Format(time.RFC3339Nano),
		"blend_tempo_epochs": t.BlendTempoEpochs, "blending_velocity": t.BlendingVelocity,
		"alpha_curve": t.AlphaCurve,
	}
}

// SeedTelemetryFromMap validates and builds a SeedTelemetry from a map
// with the keys of ToMap (a decoded checkpoint or message). Every key is
// required (gradient_norm and gradient_health may be nil); unknown keys
// are rejected. Integer fields must hold Go integers or integral
// json.Number values (decode JSON with UseNumber): a bool, a float or a
// string is rejected, as are stage 5 and other invalid stages, invalid
// alpha_mode and alpha_algorithm values, a missing or unknown alpha_curve,
// and a schema_version other than StageSchemaVersion.
func SeedTelemetryFromMap(m map[string]any) (SeedTelemetry, error) {
	var t SeedTelemetry
	fail := func(format string, a ...any) (SeedTelemetry, error) {
		return SeedTelemetry{}, fmt.Errorf("leyline: SeedTelemetry: "+format, a...)
	}
	for _, k := range seedTelemetryKeys {
		if _, ok := m[k]; !ok {
			return fail("%w: %q", ErrMissingField, k)
		}
	}
	known := map[string]bool{"schema_version": true}
	for _, k := range seedTelemetryKeys {
		known[k] = true
	}
	var unknown []string
	for k := range m {
		if !known[k] {
			unknown = append(unknown, k)
		}
	}
	if len(unknown) > 0 {
		sort.Strings(unknown)
		return fail("unknown keys %q", unknown)
	}
	if v, ok := m["schema_version"]; ok && v != nil {
		sv, err := mapInt(v)
		if err != nil || sv != StageSchemaVersion {
			return fail("schema_version %v does not match %d", v, StageSchemaVersion)
		}
	}

	var err error
	str := func(k string) string {
		if err != nil {
			return ""
		}
		s, ok := m[k].(string)
		if !ok {
			err = fmt.Errorf("leyline: SeedTelemetry.%s must be a string, got %T", k, m[k])
		}
		return s
	}
	boolean := func(k string) bool {
		if err != nil {
			return false
		}
		b, ok := m[k].(bool)
		if !ok {
			err = fmt.Errorf("leyline: SeedTelemetry.%s must be a bool, got %T", k, m[k])
		}
		return b
	}
	integer := func(k string) int {
		if err != nil {
			return 0
		}
		v, e := mapInt(m[k])
		if e != nil {
			err = fmt.Errorf("leyline: SeedTelemetry.%s: %w", k, e)
		}
		return v
	}
	float := func(k string) float64 {
		if err != nil {
			return 0
		}
		v, e := mapFloat(m[k])
		if e != nil {
			err = fmt.Errorf("leyline: SeedTelemetry.%s: %w", k, e)
		}
		return v
	}
	optFloat := func(k string) *float64 {
		if m[k] == nil {
			return nil
		}
		v := float(k)
		return &v
	}

	t.SeedID, t.BlueprintID, t.LayerID = str("seed_id"), str("blueprint_id"), str("layer_id")
	t.GradientNorm, t.GradientHealth = optFloat("gradient_norm"), optFloat("gradient_health")
	t.HasVanishing, t.HasExploding = boolean("has_vanishing"), boolean("has_exploding")
	t.Accuracy, t.AccuracyDelta = float("accuracy"), float("accuracy_delta")
	t.EpochsInStage = integer("epochs_in_stage")
	stage := integer("stage")
	t.Alpha, t.AlphaTarget = float("alpha"), float("alpha_target")
	mode := integer("alpha_mode")
	t.AlphaStepsTotal, t.AlphaStepsDone = integer("alpha_steps_total"), integer("alpha_steps_done")
	t.TimeToTarget = integer("time_to_target")
	t.AlphaVelocity = float("alpha_velocity")
	algo := integer("alpha_algorithm")
	t.Epoch, t.MaxEpochs = integer("epoch"), integer("max_epochs")
	captured := str("captured_at")
	t.BlendTempoEpochs = integer("blend_tempo_epochs")
	t.BlendingVelocity = float("blending_velocity")
	t.AlphaCurve = str("alpha_curve")
	if err != nil {
		return SeedTelemetry{}, err
	}

	if t.Stage, err = ValidateStage(stage, "SeedTelemetry.stage"); err != nil {
		return SeedTelemetry{}, err
	}
	if t.AlphaMode = AlphaMode(mode); !t.AlphaMode.Valid() {
		return fail("alpha_mode %d is not an AlphaMode (0 HOLD, 1 UP, 2 DOWN)", mode)
	}
	if t.AlphaAlgorithm = AlphaAlgorithm(algo); !t.AlphaAlgorithm.Valid() {
		return fail("alpha_algorithm %d is not an AlphaAlgorithm (1 ADD, 2 MULTIPLY, 3 GATE)", algo)
	}
	validCurve := false
	for _, n := range AlphaCurveActionNames {
		validCurve = validCurve || n == t.AlphaCurve
	}
	if !validCurve {
		return fail("alpha_curve %q is not one of %v", t.AlphaCurve, AlphaCurveActionNames)
	}
	if t.CapturedAt, err = time.Parse(time.RFC3339Nano, captured); err != nil {
		return fail("captured_at: %w", err)
	}
	t.CapturedAt = t.CapturedAt.UTC()
	return t, nil
}

// mapInt accepts Go integer kinds and integral json.Number values.
func mapInt(v any) (int, error) {
	switch x := v.(type) {
	case json.Number:
		i, err := strconv.ParseInt(string(x), 10, 0)
		if err != nil {
			return 0, fmt.Errorf("must be an integer, got %q", string(x))
		}
		return int(i), nil
	case bool, nil:
		return 0, fmt.Errorf("must be an integer, got %T %v", v, v)
	}
	rv := reflect.ValueOf(v)
	switch rv.Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return int(rv.Int()), nil
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		if rv.Uint() > math.MaxInt {
			return 0, fmt.Errorf("integer %d overflows int", rv.Uint())
		}
		return int(rv.Uint()), nil
	}
	return 0, fmt.Errorf("must be an integer, got %T %v", v, v)
}

// mapFloat accepts Go numbers and json.Number values (not bools).
func mapFloat(v any) (float64, error) {
	switch x := v.(type) {
	case json.Number:
		return strconv.ParseFloat(string(x), 64)
	case float64:
		return x, nil
	case float32:
		return float64(x), nil
	case bool, nil:
		return 0, fmt.Errorf("must be a number, got %T %v", v, v)
	}
	i, err := mapInt(v)
	if err != nil {
		return 0, fmt.Errorf("must be a number, got %T %v", v, v)
	}
	return float64(i), nil
}
