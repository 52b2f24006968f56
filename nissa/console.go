package nissa

import (
	"io"
	"strconv"
	"strings"

	"github.com/esper-go/esper/leyline"
)

// NA is what ConsoleBackend prints for a value that is absent (a nil
// epoch or counterfactual, an empty slot id, an unset env id): absent is
// never shown as zero.
const NA = "n/a"

// ConsoleOptions configures a ConsoleBackend. The zero value gives the
// defaults.
type ConsoleOptions struct {
	// Name is the backend's name; default "console".
	Name string
	// MinSeverity hides events below it (by leyline.Severity.Rank); the
	// zero value is leyline.SeverityInfo, which hides debug events.
	MinSeverity leyline.Severity
}

// ConsoleBackend writes one human-readable summary line per event:
//
//	12:04:05.123 info SEED_GERMINATED epoch=3 seed=n/a slot=r0c0 blueprint=conv_light params=37000 env=n/a
//
// The common fields come first, then a few fields chosen per event type
// (all metrics of a METRICS event), then the message if any.
type ConsoleBackend struct {
	name string
	w    io.Writer
	min  int
	buf  strings.Builder
}

// NewConsoleBackend returns a backend writing to w (os.Stderr, usually).
func NewConsoleBackend(w io.Writer, opts ConsoleOptions) *ConsoleBackend {
	if opts.Name == "" {
		opts.Name = "console"
	}
	return &ConsoleBackend{name: opts.Name, w: w, min: opts.MinSeverity.Rank()}
}

// Name returns the backend's name.
func (c *ConsoleBackend) Name() string { return c.name }

// Start does nothing.
func (c *ConsoleBackend) Start() error { return nil }

// Close does nothing; the writer belongs to the caller.
func (c *ConsoleBackend) Close() error { return nil }

// Emit writes ev's summary line unless its severity is below the filter.
func (c *ConsoleBackend) Emit(ev leyline.TelemetryEvent) error {
	if ev.Severity.Rank() < c.min {
		return nil
	}
	c.buf.Reset()
	writeSummary(&c.buf, ev)
	c.buf.WriteByte('\n')
	_, err := io.WriteString(c.w, c.buf.String())
	return err
}

// Summary returns ev's one-line summary (without newline), as
// ConsoleBackend prints it.
func Summary(ev leyline.TelemetryEvent) string {
	var b strings.Builder
	writeSummary(&b, ev)
	return b.String()
}

func writeSummary(b *strings.Builder, ev leyline.TelemetryEvent) {
	if ev.Timestamp.IsZero() {
		b.WriteString(NA)
	} else {
		b.WriteString(ev.Timestamp.Format("15:04:05.000"))
	}
	b.WriteByte(' ')
	b.WriteString(ev.Severity.String())
	b.WriteByte(' ')
	b.WriteString(ev.Type.String())
	kv(b, "epoch", optInt(ev.Epoch))
	kv(b, "seed", optStr(ev.SeedID))
	kv(b, "slot", optStr(ev.SlotID))
	if ev.EpisodeIdx != nil {
		kv(b, "episode", strconv.Itoa(*ev.EpisodeIdx))
	}
	switch p := ev.Data.(type) {
	case *leyline.SeedGerminatedPayload:
		kv(b, "blueprint", optStr(p.BlueprintID))
		kv(b, "params", strconv.Itoa(p.Params))
		kv(b, "env", envID(p.EnvID))
	case *leyline.SeedStageChangedPayload:
		kv(b, "stage", p.From.String()+"->"+p.To.String())
		kv(b, "alpha", num(p.Alpha))
		kv(b, "acc_delta", num(p.AccuracyDelta))
		kv(b, "env", envID(p.EnvID))
	case *leyline.SeedGateEvaluatedPayload:
		kv(b, "gate", optStr(p.Gate))
		kv(b, "passed", strconv.FormatBool(p.Passed))
		kv(b, "target", p.TargetStage.String())
		if len(p.ChecksFailed) > 0 {
			kv(b, "failed", strings.Join(p.ChecksFailed, ","))
		}
		kv(b, "env", envID(p.EnvID))
	case *leyline.SeedFossilizedPayload:
		kv(b, "blueprint", optStr(p.BlueprintID))
		kv(b, "improvement", num(p.Improvement))
		kv(b, "params_added", strconv.Itoa(p.ParamsAdded))
		kv(b, "counterfactual", optNum(p.Counterfactual))
		kv(b, "env", envID(p.EnvID))
	case *leyline.SeedPrunedPayload:
		kv(b, "reason", optStr(p.Reason))
		kv(b, "blueprint", optStr(p.BlueprintID))
		kv(b, "improvement", num(p.Improvement))
		kv(b, "counterfactual", optNum(p.Counterfactual))
		kv(b, "initiator", optStr(p.Initiator))
		kv(b, "env", envID(p.EnvID))
	case *leyline.MetricsPayload:
		kv(b, "source", optStr(p.Source))
		for _, m := range p.Metrics {
			v := num(m.Value)
			if m.Unit != "" {
				v += m.Unit
			}
			kv(b, m.Name, v)
		}
	}
	if ev.Message != "" {
		b.WriteString(" | ")
		b.WriteString(ev.Message)
	}
}

func kv(b *strings.Builder, k, v string) {
	b.WriteByte(' ')
	b.WriteString(k)
	b.WriteByte('=')
	b.WriteString(v)
}

func optStr(s string) string {
	if s == "" {
		return NA
	}
	return s
}

func optInt(p *int) string {
	if p == nil {
		return NA
	}
	return strconv.Itoa(*p)
}

func optNum(p *float64) string {
	if p == nil {
		return NA
	}
	return num(*p)
}

func num(v float64) string { return strconv.FormatFloat(v, 'g', 6, 64) }

// envID prints the Kasmina sentinel (leyline.EnvIDUnset) as absent.
func envID(id int) string {
	if id == leyline.EnvIDUnset {
		return NA
	}
	return strconv.Itoa(id)
}
