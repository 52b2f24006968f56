package simic

import (
	"fmt"
	"math"
	"strings"

	"github.com/esper-go/esper/leyline"
)

// EventSink receives telemetry events (a nissa.Hub).
type EventSink interface {
	Emit(leyline.TelemetryEvent)
}

// headAbbrev shortens the head names for the progress line.
var headAbbrev = [leyline.NumActionHeads]string{"slot", "bp", "style", "tempo", "αtgt", "αspd", "αcrv", "op"}

// Line renders the round as esper ppo's progress line: return, episodes,
// per-head entropy, KL, explained variance, throughput, rollbacks and,
// on a device, the host syncs per env-epoch (rounds is the run's length).
func (r PPORound) Line(rounds int) string {
	var ent []string
	for h, v := range r.Entropy {
		ent = append(ent, fmt.Sprintf("%s %.2f", headAbbrev[h], v))
	}
	line := fmt.Sprintf("round %3d/%d  return %+8.3f (%d eps)  entropy [%s]  KL %.2e  EV %+.3f  %.1f env-epochs/s  rollbacks %d",
		r.Round, rounds, r.Return, r.Episodes, strings.Join(ent, " "), r.KL, r.ExplainedVariance, r.EnvEpochsPerSec, r.Rollbacks)
	if r.HostSyncsPerEnvEpoch > 0 {
		line += fmt.Sprintf("  %.2f host syncs/env-epoch", r.HostSyncsPerEnvEpoch)
	}
	return line
}

// Emit sends the round's figures to sink as a METRICS event
// (simic.ppo.*, simic.env_epochs_per_second, simic.rollbacks and, on a
// device, simic.host_syncs_per_env_epoch; message "simic.ppo.round N").
func (r PPORound) Emit(sink EventSink) {
	m := []leyline.Metric{
		{Name: "simic.ppo.return_mean", Value: r.Return},
		{Name: "simic.ppo.approx_kl", Value: r.KL},
		{Name: "simic.ppo.explained_variance", Value: r.ExplainedVariance},
		{Name: "simic.ppo.policy_loss", Value: r.PolicyLoss},
		{Name: "simic.ppo.value_loss", Value: r.ValueLoss},
		{Name: "simic.env_epochs_per_second", Value: r.EnvEpochsPerSec},
		{Name: "simic.rollbacks", Value: float64(r.Rollbacks), Unit: "count"},
	}
	if r.HostSyncsPerEnvEpoch > 0 {
		m = append(m, leyline.Metric{Name: "simic.host_syncs_per_env_epoch", Value: r.HostSyncsPerEnvEpoch})
	}
	for h, v := range r.Entropy {
		m = append(m, leyline.Metric{Name: "simic.ppo.entropy." + leyline.HeadNames[h], Value: v})
	}
	ev := leyline.NewEvent(leyline.EventMetrics, &leyline.MetricsPayload{Source: "simic", Metrics: m})
	ev.Message = fmt.Sprintf("simic.ppo.round %d", r.Round)
	sink.Emit(ev)
}

// Diagnosis renders a round's diagnosis (esper ppo --diagnose): the
// episodes' outcomes, each operation's share, applied rate, reward,
// advantage and return, the reward terms per episode, and, with u, the
// update's clip fractions, KL, gradient norm and value figures.
func (s EsperRoundStats) Diagnosis(u *UpdateStats) string {
	var b strings.Builder
	fmt.Fprintf(&b, "    eps %d  final acc %.2f%%  added %.0f  germ/blend/foss/prune %.2f/%.2f/%.2f/%.2f\n", s.Episodes, s.FinalAccuracy, s.AddedParams,
		s.Germinated, s.Blended, s.Fossilized, s.Pruned)
	b.WriteString("    op share/applied/reward/adv/return:")
	for op := range s.OpShare {
		if s.OpShare[op] == 0 {
			continue
		}
		fmt.Fprintf(&b, " %s %.2f/%.2f/%+.2f/%+.2f/%+.1f", leyline.LifecycleOp(op), s.OpShare[op], s.OpApplied[op], s.OpReward[op], s.OpAdvantage[op], s.OpReturn[op])
	}
	b.WriteString("\n    terms/episode:")
	for i, v := range s.Terms.Values() {
		if v != 0 {
			fmt.Fprintf(&b, " %s %+.2f", TermNames[i], v)
		}
	}
	if u != nil {
		b.WriteString("\n    update: clip")
		for h, v := range u.ClipFraction {
			if u.NotLearnable == nil || !u.NotLearnable[h] {
				fmt.Fprintf(&b, " %s %.2f", headAbbrev[h], v)
			}
		}
		fmt.Fprintf(&b, "  maxKL %.2e early %v  gradnorm %.2f  adv std %.3f  return mean %+.3f  value std %.3f  ent coef %.3f  steps %d",
			u.MaxKL, u.EarlyStopped, u.GradNorm, u.AdvStd, u.ReturnMean, u.ValueStd, u.EntropyCoef, u.Steps)
	}
	return b.String()
}

// EmitDiagnosis sends the round's diagnosis to sink as a METRICS event
// (simic.esper.*, and with u simic.ppo.clip_fraction.*, max_kl,
// grad_norm, entropy_coef; message "simic.esper.round N").
func (s EsperRoundStats) EmitDiagnosis(sink EventSink, round int, u *UpdateStats) {
	m := []leyline.Metric{
		{Name: "simic.esper.final_accuracy", Value: s.FinalAccuracy, Unit: "%"},
		{Name: "simic.esper.added_params", Value: s.AddedParams, Unit: "count"},
		{Name: "simic.esper.germinated", Value: s.Germinated, Unit: "count"},
		{Name: "simic.esper.blended", Value: s.Blended, Unit: "count"},
		{Name: "simic.esper.fossilized", Value: s.Fossilized, Unit: "count"},
		{Name: "simic.esper.pruned", Value: s.Pruned, Unit: "count"},
	}
	fin := func(name string, v float64) {
		if !math.IsNaN(v) && !math.IsInf(v, 0) {
			m = append(m, leyline.Metric{Name: name, Value: v})
		}
	}
	for op := range s.OpShare {
		name := strings.ToLower(leyline.LifecycleOp(op).String())
		fin("simic.esper.op_share."+name, s.OpShare[op])
		fin("simic.esper.op_reward."+name, s.OpReward[op])
		fin("simic.esper.op_advantage."+name, s.OpAdvantage[op])
		fin("simic.esper.op_return."+name, s.OpReturn[op])
	}
	for i, v := range s.Terms.Values() {
		fin("simic.esper.reward."+TermNames[i], v)
	}
	if u != nil {
		for h, v := range u.ClipFraction {
			if u.NotLearnable == nil || !u.NotLearnable[h] {
				fin("simic.ppo.clip_fraction."+leyline.HeadNames[h], v)
			}
		}
		fin("simic.ppo.max_kl", u.MaxKL)
		fin("simic.ppo.grad_norm", u.GradNorm)
		fin("simic.ppo.entropy_coef", u.EntropyCoef)
	}
	ev := leyline.NewEvent(leyline.EventMetrics, &leyline.MetricsPayload{Source: "simic", Metrics: m})
	ev.Message = fmt.Sprintf("simic.esper.round %d", round)
	sink.Emit(ev)
}
