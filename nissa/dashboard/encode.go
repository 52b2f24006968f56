package dashboard

import (
	"encoding/json"
	"strings"

	"github.com/esper-go/esper/leyline"
)

// shownMetrics are the metric names (exact, or prefixes ending in '.')
// the page draws; encodeEvent keeps only these of a METRICS event, so
// that the stream and its history stay small (a training epoch's METRICS
// carries some forty figures, the page uses a handful).
var shownMetrics = []string{
	leyline.MetricTolariaTrainingLoss,
	leyline.MetricTolariaTrainingAccuracy,
	leyline.MetricTolariaValidationLoss,
	leyline.MetricTolariaValidationAccuracy,
	leyline.MetricTolariaTrainingLatencyMs,
	leyline.MetricTolariaSeedsActive,
	leyline.MetricTolariaHostSyncs,
	"tolaria.grad_agg.seed.alpha",
	"simic.",
}

func shownMetric(name string) bool {
	for _, m := range shownMetrics {
		if name == m || (strings.HasSuffix(m, ".") && strings.HasPrefix(name, m)) {
			return true
		}
	}
	return false
}

// encodeEvent is the dashboard streams' encoder: the event's JSON, a
// METRICS event cut to shownMetrics (and left out when none is left).
func encodeEvent(ev leyline.TelemetryEvent) ([]byte, bool, error) {
	if p, ok := ev.Data.(*leyline.MetricsPayload); ok {
		kept := make([]leyline.Metric, 0, len(p.Metrics))
		for _, m := range p.Metrics {
			if shownMetric(m.Name) {
				kept = append(kept, m)
			}
		}
		if len(kept) == 0 {
			return nil, true, nil
		}
		// The event's payload is shared with the other backends: encode
		// a copy.
		cp := *p
		cp.Metrics = kept
		ev.Data = &cp
	}
	b, err := json.Marshal(ev)
	return b, false, err
}
