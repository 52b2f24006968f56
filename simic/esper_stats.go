package simic

import (
	"math"

	"github.com/esper-go/esper/leyline"
	"github.com/esper-go/esper/tolaria"
)

// EsperEpisode summarises one finished episode of an EsperEnv: what the
// policy did, what it was paid for it, term by term, and where the run
// ended. These are the figures that tell a policy that grows a model
// from one that germinates and waits.
type EsperEpisode struct {
	// Env is the environment's index, Episode the episode's number.
	Env, Episode int
	// Steps are the decisions taken; Return the sum of their rewards (the
	// governor's penalty where a step rolled back).
	Steps  int
	Return float64
	// Ops counts the decisions by op as executed (a vetoed one as WAIT),
	// Applied those of them that took effect, OpReward the sum of the
	// immediate rewards of the steps that took each op.
	Ops, Applied [leyline.NumOps]int
	OpReward     [leyline.NumOps]float64
	// Terms sums the reward terms over the episode.
	Terms RewardTerms
	// FinalAccuracy is the last epoch's validation accuracy (percent).
	FinalAccuracy float64
	// AddedParams are the parameters the seeds added to the host by the
	// end (live seeds and fossils).
	AddedParams int
	// Germinated, Fossilized and Pruned count the lifecycle events;
	// Blended counts the seeds that reached BLENDING (alpha above 0).
	Germinated, Fossilized, Pruned, Blended int
	// Rollbacks counts governor rollbacks; Diverged reports an episode
	// the governor ended.
	Rollbacks int
	Diverged  bool
}

// Add returns the term-by-term sum of t and u.
func (t RewardTerms) Add(u RewardTerms) RewardTerms {
	return RewardTerms{
		Attribution: t.Attribution + u.Attribution, RatioPenalty: t.RatioPenalty + u.RatioPenalty,
		BlendingWarning: t.BlendingWarning + u.BlendingWarning, HoldingWarning: t.HoldingWarning + u.HoldingWarning,
		PBRS: t.PBRS + u.PBRS, Synergy: t.Synergy + u.Synergy, Rent: t.Rent + u.Rent, AlphaShock: t.AlphaShock + u.AlphaShock,
		Occupancy: t.Occupancy + u.Occupancy, FossilMaintenance: t.FossilMaintenance + u.FossilMaintenance,
		ActionShaping: t.ActionShaping + u.ActionShaping, ActionPBRS: t.ActionPBRS + u.ActionPBRS,
		InterventionCost: t.InterventionCost + u.InterventionCost, FossilizeBonus: t.FossilizeBonus + u.FossilizeBonus,
		Terminal: t.Terminal + u.Terminal, AutoPrune: t.AutoPrune + u.AutoPrune,
	}
}

// Scale returns every term of t multiplied by f.
func (t RewardTerms) Scale(f float64) RewardTerms {
	return RewardTerms{
		Attribution: t.Attribution * f, RatioPenalty: t.RatioPenalty * f, BlendingWarning: t.BlendingWarning * f,
		HoldingWarning: t.HoldingWarning * f, PBRS: t.PBRS * f, Synergy: t.Synergy * f, Rent: t.Rent * f,
		AlphaShock: t.AlphaShock * f, Occupancy: t.Occupancy * f, FossilMaintenance: t.FossilMaintenance * f,
		ActionShaping: t.ActionShaping * f, ActionPBRS: t.ActionPBRS * f, InterventionCost: t.InterventionCost * f,
		FossilizeBonus: t.FossilizeBonus * f, Terminal: t.Terminal * f, AutoPrune: t.AutoPrune * f,
	}
}

// TermNames are the names of RewardTerms' fields in declaration order,
// as Values lists them.
var TermNames = [...]string{"attribution", "ratio_penalty", "blending_warning", "holding_warning", "pbrs", "synergy", "rent",
	"alpha_shock", "occupancy", "fossil_maintenance", "action_shaping", "action_pbrs", "intervention_cost", "fossilize_bonus",
	"terminal", "auto_prune"}

// Values returns the terms in TermNames' order.
func (t RewardTerms) Values() [len(TermNames)]float64 {
	return [...]float64{t.Attribution, t.RatioPenalty, t.BlendingWarning, t.HoldingWarning, t.PBRS, t.Synergy, t.Rent,
		t.AlphaShock, t.Occupancy, t.FossilMaintenance, t.ActionShaping, t.ActionPBRS, t.InterventionCost, t.FossilizeBonus,
		t.Terminal, t.AutoPrune}
}

// record adds a step to the running episode's summary and, when the
// episode ended, finishes it.
func (e *EsperEnv) record(info EsperStepInfo, reward float64, end bool) {
	ep := &e.ep
	op := info.Decision.Op
	ep.Steps++
	ep.Return += reward
	ep.Rollbacks += info.Rollbacks
	if op.Valid() {
		ep.Ops[op]++
		ep.OpReward[op] += reward
		if info.Applied == tolaria.ApplyApplied {
			ep.Applied[op]++
		}
	}
	ep.Terms = ep.Terms.Add(info.Reward.Terms)
	if !end {
		return
	}
	ep.Diverged = e.diverged
	sum := e.trainer.Summary()
	ep.FinalAccuracy = sum.Final().ValAccuracy
	ep.Germinated, ep.Fossilized, ep.Pruned = sum.Germinated, sum.Fossilized, sum.Pruned
	total := 0
	for _, p := range e.model.Parameters() {
		total += p.Value.Numel()
	}
	ep.AddedParams = total - e.hostParams
	ep.Blended = len(e.blended)
	e.finished = append(e.finished, *ep)
	e.ep = EsperEpisode{Env: e.o.Index, Episode: e.episode}
}

// TakeEpisodes returns the summaries of the episodes that ended since the
// last call, oldest first, and forgets them.
func (e *EsperEnv) TakeEpisodes() []EsperEpisode {
	out := e.finished
	e.finished = nil
	return out
}

// EsperRoundStats are the means of a round's finished episodes and the
// PPO figures per op: the diagnosis of what the policy learns.
type EsperRoundStats struct {
	// Episodes is the number of episodes averaged.
	Episodes int
	// FinalAccuracy, AddedParams, Germinated, Fossilized, Pruned and
	// Blended are means per episode.
	FinalAccuracy, AddedParams, Germinated, Fossilized, Pruned, Blended float64
	// OpShare is each op's share of the round's decisions, OpApplied the
	// share of those that took effect, OpReward the mean immediate reward
	// of a step taking it (NaN for an op never taken).
	OpShare, OpApplied, OpReward [leyline.NumOps]float64
	// OpAdvantage and OpReturn are the mean (normalised) advantage and the
	// mean GAE return of the steps that took each op, from the update's
	// buffer (NaN for an op never taken).
	OpAdvantage, OpReturn [leyline.NumOps]float64
	// Terms are the reward terms' means per episode.
	Terms RewardTerms
}

// NewEsperRoundStats averages episodes (the advantage and return columns
// are left NaN: see EsperPPO.Round).
func NewEsperRoundStats(episodes []EsperEpisode) EsperRoundStats {
	var s EsperRoundStats
	for op := range s.OpShare {
		s.OpReward[op], s.OpApplied[op], s.OpAdvantage[op], s.OpReturn[op] = math.NaN(), math.NaN(), math.NaN(), math.NaN()
	}
	s.Episodes = len(episodes)
	if len(episodes) == 0 {
		return s
	}
	var ops, applied [leyline.NumOps]int
	var opReward [leyline.NumOps]float64
	steps := 0
	for _, ep := range episodes {
		s.FinalAccuracy += ep.FinalAccuracy
		s.AddedParams += float64(ep.AddedParams)
		s.Germinated += float64(ep.Germinated)
		s.Fossilized += float64(ep.Fossilized)
		s.Pruned += float64(ep.Pruned)
		s.Blended += float64(ep.Blended)
		s.Terms = s.Terms.Add(ep.Terms)
		steps += ep.Steps
		for op := range ops {
			ops[op] += ep.Ops[op]
			applied[op] += ep.Applied[op]
			opReward[op] += ep.OpReward[op]
		}
	}
	f := 1 / float64(len(episodes))
	s.FinalAccuracy *= f
	s.AddedParams *= f
	s.Germinated *= f
	s.Fossilized *= f
	s.Pruned *= f
	s.Blended *= f
	s.Terms = s.Terms.Scale(f)
	for op := range ops {
		if steps > 0 {
			s.OpShare[op] = float64(ops[op]) / float64(steps)
		}
		if ops[op] > 0 {
			s.OpApplied[op] = float64(applied[op]) / float64(ops[op])
			s.OpReward[op] = opReward[op] / float64(ops[op])
		}
	}
	return s
}
