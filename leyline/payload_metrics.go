package leyline

import "fmt"

// Metric is one named measurement, such as
// {Name: "tolaria.training.latency_ms", Value: 12.5, Unit: "ms"}.
type Metric struct {
	Name       string            `json:"name" esper:"required"`
	Value      float64           `json:"value" esper:"required"`
	Unit       string            `json:"unit"`
	Attributes map[string]string `json:"attributes"`
}

// MetricsPayload is the data of a METRICS event: a batch of metrics from
// one source ("tolaria", "tamiyo", "kasmina"), the Go form of the first
// generation's telemetry packet.
type MetricsPayload struct {
	Source  string   `json:"source" esper:"required"`
	Metrics []Metric `json:"metrics"`
}

// Validate checks that the source is set and every metric has a name.
func (p *MetricsPayload) Validate() error {
	if p.Source == "" {
		return errMissing("Metrics", "source")
	}
	for i, m := range p.Metrics {
		if m.Name == "" {
			return errMissing("Metrics", fmt.Sprintf("metrics[%d].name", i))
		}
	}
	return nil
}
