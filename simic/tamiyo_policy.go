package simic

import (
	"errors"
	"fmt"
	"math/rand/v2"

	"github.com/esper-go/esper/autograd"
	"github.com/esper-go/esper/leyline"
	"github.com/esper-go/esper/tamiyo"
)

// TamiyoObs is one Esper environment's observation: its graph (one
// environment, as tamiyo.EncodeState builds it) and its action masks.
type TamiyoObs struct {
	Graph *tamiyo.Graph
	Masks leyline.ActionMasks
}

// TamiyoPolicy adapts Tamiyo's graph policy to Policy: the observations
// of a batch are merged into one batched graph and the network runs once
// for all of them. The leyline masks travel inside the observations, so
// the Masks simic passes are ignored (an Esper environment reports them
// only so that PPO can tell forced steps, see TamiyoMasks).
type TamiyoPolicy struct {
	p      *tamiyo.Policy
	floors *[leyline.NumActionHeads]float32
	inf    *tamiyo.Inference // Capture: Act's captured forward
}

// TamiyoPolicyOptions configure NewTamiyoPolicy.
type TamiyoPolicyOptions struct {
	// Floors are the per-head probability floors used both to act and to
	// evaluate; nil means tamiyo.ProbabilityFloorPerHead.
	Floors *[leyline.NumActionHeads]float32
	// Capture makes Act replay a forward captured per batch shape
	// (tamiyo.Inference: each graph uploaded into the buffers the
	// captured forward reads) instead of dispatching its ops one by one:
	// on a device, a replay and two copies per decision instead of a
	// hundred-odd launches. The actions, log-probabilities and values are
	// those Act computes without it. It needs a policy without dropout:
	// the inference runs in evaluation mode.
	Capture bool
}

var _ Policy[TamiyoObs] = (*TamiyoPolicy)(nil)

// NewTamiyoPolicy wraps p.
func NewTamiyoPolicy(p *tamiyo.Policy, o TamiyoPolicyOptions) (*TamiyoPolicy, error) {
	if p == nil {
		return nil, errors.New("simic: NewTamiyoPolicy: nil policy")
	}
	t := &TamiyoPolicy{p: p, floors: o.Floors}
	if o.Capture {
		if d := p.Options().Dropout; d != 0 {
			return nil, fmt.Errorf("simic: NewTamiyoPolicy: Capture needs a policy without dropout (dropout %v)", d)
		}
		inf, err := tamiyo.NewInference(p, tamiyo.InferenceOptions{})
		if err != nil {
			return nil, fmt.Errorf("simic: NewTamiyoPolicy: %w", err)
		}
		t.inf = inf
	}
	return t, nil
}

// ActStats returns the capture counters of Act's captured forward (the
// zero value without TamiyoPolicyOptions.Capture).
func (t *TamiyoPolicy) ActStats() autograd.CaptureStats {
	if t.inf == nil {
		return autograd.CaptureStats{}
	}
	return t.inf.Stats()
}

// Network returns the wrapped tamiyo.Policy.
func (t *TamiyoPolicy) Network() *tamiyo.Policy { return t.p }

// TamiyoSpec returns the action spec of an Esper environment with
// numSlots slots: leyline's eight heads in HeadNames order.
func TamiyoSpec(numSlots int) EnvSpec {
	sizes := leyline.HeadSizes(numSlots)
	return EnvSpec{HeadSizes: sizes[:], HeadNames: leyline.HeadNames[:]}
}

// TamiyoRelevance is PPOOptions.Relevance for Tamiyo's action space: the
// heads leyline.CausalRelevance names for the op taken.
func TamiyoRelevance(actions []int) []bool {
	op := leyline.LifecycleOp(-1)
	if len(actions) > leyline.HeadOp {
		op = leyline.LifecycleOp(actions[leyline.HeadOp])
	}
	rel := leyline.CausalRelevance(op)
	return rel[:]
}

// TamiyoMasks converts leyline masks to simic Masks (the slot row is the
// union over ops). PPO reads them to recognise forced steps: with
// TamiyoRelevance a step whose op mask allows WAIT alone has a single
// valid option on every relevant head and is down-weighted.
func TamiyoMasks(m leyline.ActionMasks) Masks {
	out := make(Masks, leyline.NumActionHeads)
	for h := range out {
		out[h] = append([]bool(nil), m.Heads[h]...)
	}
	return out
}

func (t *TamiyoPolicy) batch(obs []TamiyoObs) (*tamiyo.Graph, []leyline.ActionMasks, error) {
	if len(obs) == 0 {
		return nil, nil, errors.New("simic: TamiyoPolicy: empty batch")
	}
	gs := make([]*tamiyo.Graph, len(obs))
	masks := make([]leyline.ActionMasks, len(obs))
	for i, o := range obs {
		if o.Graph == nil {
			return nil, nil, fmt.Errorf("simic: TamiyoPolicy: observation %d has no graph", i)
		}
		gs[i], masks[i] = o.Graph, o.Masks
	}
	g, err := tamiyo.BatchGraphs(gs...)
	if err != nil {
		return nil, nil, fmt.Errorf("simic: TamiyoPolicy: %w", err)
	}
	return g, masks, nil
}

// Act samples (or, deterministic, takes the modes of) one action per
// observation with tamiyo.Policy.Act on the batched graph (or its
// captured twin, tamiyo.Inference.Act, with Capture).
func (t *TamiyoPolicy) Act(obs []TamiyoObs, _ []Masks, rng *rand.Rand, deterministic bool) (*ActOutput, error) {
	g, masks, err := t.batch(obs)
	if err != nil {
		return nil, err
	}
	ao := tamiyo.ActOptions{Deterministic: deterministic, Rand: rng, Floors: t.floors}
	var ar *tamiyo.ActResult
	if t.inf != nil {
		ar, err = t.inf.Act(g, masks, ao)
	} else {
		ar, err = t.p.Act(g, masks, ao)
	}
	if err != nil {
		return nil, fmt.Errorf("simic: TamiyoPolicy.Act: %w", err)
	}
	out := &ActOutput{Actions: make([][]int, len(obs)), LogProbs: make([][]float64, len(obs)), Values: make([]float64, len(obs))}
	for b := range obs {
		out.Actions[b] = make([]int, leyline.NumActionHeads)
		out.LogProbs[b] = make([]float64, leyline.NumActionHeads)
		for h := 0; h < leyline.NumActionHeads; h++ {
			out.Actions[b][h] = ar.Actions[b][h]
			out.LogProbs[b][h] = float64(ar.LogProbs[b][h])
		}
		out.Values[b] = float64(ar.Values[b])
	}
	return out, nil
}

// Evaluate recomputes log-probabilities, normalised entropies and values
// with tamiyo.Policy.Evaluate on the batched graph.
func (t *TamiyoPolicy) Evaluate(obs []TamiyoObs, _ []Masks, actions [][]int) (*Evaluation, error) {
	g, masks, err := t.batch(obs)
	if err != nil {
		return nil, err
	}
	if len(actions) != len(obs) {
		return nil, fmt.Errorf("simic: TamiyoPolicy.Evaluate: %d actions for %d observations", len(actions), len(obs))
	}
	acts := make([][leyline.NumActionHeads]int, len(actions))
	for b, a := range actions {
		if len(a) != leyline.NumActionHeads {
			return nil, fmt.Errorf("simic: TamiyoPolicy.Evaluate: action %d has %d heads, want %d", b, len(a), leyline.NumActionHeads)
		}
		copy(acts[b][:], a)
	}
	ev, err := t.p.Evaluate(g, masks, acts, tamiyo.EvaluateOptions{Floors: t.floors})
	if err != nil {
		return nil, fmt.Errorf("simic: TamiyoPolicy.Evaluate: %w", err)
	}
	return &Evaluation{LogProbs: ev.LogProbs[:], Entropies: ev.Entropies[:], Value: ev.Value,
		LogProbsAll: ev.LogProbsAll, EntropiesAll: ev.EntropiesAll}, nil
}

// Values returns V(s) per observation without recording gradients: on a
// device, read back in one copy (one host sync).
func (t *TamiyoPolicy) Values(obs []TamiyoObs) ([]float64, error) {
	g, _, err := t.batch(obs)
	if err != nil {
		return nil, err
	}
	var out *tamiyo.PolicyOutput
	autograd.NoGrad(func() { out, err = t.p.Run(g) })
	if err != nil {
		return nil, fmt.Errorf("simic: TamiyoPolicy.Values: %w", err)
	}
	return hostFloat64s(out.Value.Value)
}

// Parameters are the network's trainable parameters.
func (t *TamiyoPolicy) Parameters() []*autograd.Var { return t.p.Parameters() }
