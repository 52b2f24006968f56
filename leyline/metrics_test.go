package leyline

import (
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestMetricNames(t *testing.T) {
	assert.Equal(t, "tolaria.training.latency_ms", MetricTolariaTrainingLatencyMs)
	assert.Equal(t, "tolaria.train.compile_enabled", MetricTolariaTrainCompileEnabled)
	assert.Equal(t, "tolaria.compile_fallback", MetricTolariaCompileFallback)
	assert.Equal(t, "tolaria.train.graph_enabled", MetricTolariaTrainGraphEnabled)
	assert.Equal(t, "tolaria.graph_fallback", MetricTolariaGraphFallback)
	assert.Equal(t, "tamiyo.gnn.compile_enabled", MetricTamiyoGNNCompileEnabled)
	assert.Equal(t, "tamiyo.gnn.compile_fallback_total", MetricTamiyoGNNCompileFallbackTotal)
	assert.Equal(t, "kasmina.isolation.violations", MetricKasminaIsolationViolations)
	re := regexp.MustCompile(`^(tolaria|tamiyo|kasmina)(\.[a-z0-9_]+)+$`)
	seen := map[string]bool{}
	for _, n := range MetricNames() {
		assert.Regexp(t, re, n)
		assert.False(t, seen[n], "duplicate %s", n)
		seen[n] = true
	}
}

// TestCounterMetrics: every metric named like a running count ("_total"
// or ".total") is classified on purpose: a counter, or one of the few
// that are not running counts.
func TestCounterMetrics(t *testing.T) {
	notCounters := map[string]bool{
		MetricTolariaGradAggMicrobatchesTotal: true, // one epoch's steps
		MetricTamiyoFieldReportsPendingTotal:  true, // a queue length
	}
	for _, n := range MetricNames() {
		total := strings.HasSuffix(n, "_total") || strings.HasSuffix(n, ".total")
		switch {
		case notCounters[n]:
			assert.False(t, IsCounterMetric(n), n)
		case total:
			assert.True(t, IsCounterMetric(n), "%s: a counter, or listed as not one", n)
		default:
			assert.False(t, IsCounterMetric(n), n)
		}
	}
	assert.False(t, IsCounterMetric("simic.rollbacks"), "unknown names are gauges")
}

func TestConstants(t *testing.T) {
	assert.Equal(t, 5, MinPruneAge)
	assert.Equal(t, 10, FullEvaluationAge)
	assert.Equal(t, 5, MinHoldingEpochs)
	assert.Equal(t, 5, EmbargoEpochsAfterPrune)
	assert.Equal(t, 0.995, DefaultGamma)
	assert.Equal(t, 0.30, EntropyFloorPerHead[HeadOp])
	assert.Equal(t, 0.15, EntropyFloorPerHead[HeadSlot])
	assert.Equal(t, 0.10, EntropyFloorPerHead[HeadAlphaCurve])
	assert.Equal(t, 0.05, EntropyCollapseThresholdPerHead[HeadBlueprint])
	assert.Equal(t, 0.3, EntropyFloorPenaltyCoef[HeadTempo])
}
