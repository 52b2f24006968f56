package simic

import (
	"fmt"
	"math"
	"math/rand/v2"

	"github.com/esper-go/esper/autograd"
	"github.com/esper-go/esper/leyline"
	"github.com/esper-go/esper/nn"
	"github.com/esper-go/esper/tensor"
)

// DefaultMLPHidden are MLPPolicy's default hidden widths.
var DefaultMLPHidden = []int{64, 64}

// MLPPolicyOptions configure NewMLPPolicy.
type MLPPolicyOptions struct {
	// ObsDim is the observation length (required, > 0).
	ObsDim int
	// Spec is the action spec (required).
	Spec EnvSpec
	// Hidden are the hidden widths of both the actor and the critic; nil
	// means DefaultMLPHidden.
	Hidden []int
	// Seed seeds the initial weights.
	Seed uint64
	// ActorOutScale multiplies the actor's output weights after the
	// default initialisation so the first policy is near-uniform; 0 means
	// 0.01.
	ActorOutScale float64
	// Device is where the policy computes (the CPU by default): it is
	// initialised on the host, exactly as for the CPU, then moved there.
	// Act and Values read their results back in one copy per call; the
	// observations, masks and actions go there in copies.
	Device tensor.Device
}

// MLPPolicy is a feed-forward actor-critic over vector observations: an
// actor tanh-MLP whose output is split into one logit row per head, and a
// separate critic tanh-MLP with one output. Masked options get logit
// −1e4. It has no probability floors (those belong to Tamiyo's policy).
type MLPPolicy struct {
	nn.Composite
	actor, critic *nn.Sequential
	spec          EnvSpec
	obsDim        int
}

// NewMLPPolicy builds the policy.
func NewMLPPolicy(o MLPPolicyOptions) (*MLPPolicy, error) {
	if o.ObsDim <= 0 {
		return nil, fmt.Errorf("simic: MLPPolicy: ObsDim %d must be positive", o.ObsDim)
	}
	if err := o.Spec.Validate(); err != nil {
		return nil, fmt.Errorf("simic: MLPPolicy: %w", err)
	}
	if o.Hidden == nil {
		o.Hidden = DefaultMLPHidden
	}
	if o.ActorOutScale == 0 {
		o.ActorOutScale = 0.01
	}
	if !(o.ActorOutScale > 0) || math.IsInf(o.ActorOutScale, 0) {
		return nil, fmt.Errorf("simic: MLPPolicy: ActorOutScale %v must be positive", o.ActorOutScale)
	}
	out := 0
	for _, n := range o.Spec.HeadSizes {
		out += n
	}
	rng := tensor.NewRNG(o.Seed)
	tanh := func() nn.Module { return &nn.Tanh{} }
	sizes := append(append([]int{o.ObsDim}, o.Hidden...), out)
	actor, err := nn.NewMLP(rng, nn.MLPOptions{Sizes: sizes, Activation: tanh})
	if err != nil {
		return nil, fmt.Errorf("simic: MLPPolicy actor: %w", err)
	}
	sizes[len(sizes)-1] = 1
	critic, err := nn.NewMLP(rng, nn.MLPOptions{Sizes: sizes, Activation: tanh})
	if err != nil {
		return nil, fmt.Errorf("simic: MLPPolicy critic: %w", err)
	}
	// The output layer is scaled on the host, where nn.NewMLP builds
	// every parameter, before the policy moves to its device.
	ps := actor.Parameters()
	for _, p := range ps[len(ps)-2:] { // output weight and bias
		if !p.Value.Device().IsCPU() {
			return nil, fmt.Errorf("simic: MLPPolicy: the actor was built on %v, not the host", p.Value.Device())
		}
		w := p.Value.F32()
		for i := range w {
			w[i] *= float32(o.ActorOutScale)
		}
	}
	p := &MLPPolicy{actor: actor, critic: critic, spec: o.Spec, obsDim: o.ObsDim}
	p.Register("actor", actor)
	p.Register("critic", critic)
	if !o.Device.IsCPU() {
		if err := nn.To(p, o.Device); err != nil {
			return nil, fmt.Errorf("simic: MLPPolicy: %w", err)
		}
	}
	return p, nil
}

// Device is where the policy computes: its parameters' device.
func (p *MLPPolicy) Device() tensor.Device { return p.Parameters()[0].Value.Device() }

// Forward is not used: the policy has two outputs (see Evaluate).
func (p *MLPPolicy) Forward(*autograd.Var) *autograd.Var {
	panic("simic: MLPPolicy has no single output; use Act or Evaluate")
}

// input stacks obs into a [B, ObsDim] constant on the policy's device
// (one copy).
func (p *MLPPolicy) input(obs [][]float32) (*autograd.Var, error) {
	flat := make([]float32, 0, len(obs)*p.obsDim)
	for i, o := range obs {
		if len(o) != p.obsDim {
			return nil, fmt.Errorf("simic: MLPPolicy: observation %d has %d features, want %d", i, len(o), p.obsDim)
		}
		flat = append(flat, o...)
	}
	x, err := toDevice(tensor.FromSlice(flat, len(obs), p.obsDim), p.Device())
	if err != nil {
		return nil, err
	}
	return autograd.Const(x), nil
}

func (p *MLPPolicy) checkMasks(n int, masks []Masks) error {
	if masks == nil {
		return nil
	}
	if len(masks) != n {
		return fmt.Errorf("simic: MLPPolicy: %d masks for %d observations", len(masks), n)
	}
	for b, m := range masks {
		if err := m.check(p.spec); err != nil {
			return fmt.Errorf("simic: MLPPolicy: observation %d: %w", b, err)
		}
	}
	return nil
}

func maskAt(masks []Masks, b int) Masks {
	if masks == nil {
		return nil
	}
	return masks[b]
}

// Act implements Policy.
func (p *MLPPolicy) Act(obs [][]float32, masks []Masks, rng *rand.Rand, deterministic bool) (*ActOutput, error) {
	if len(obs) == 0 {
		return nil, fmt.Errorf("simic: MLPPolicy.Act: no observations")
	}
	if !deterministic && rng == nil {
		return nil, fmt.Errorf("simic: MLPPolicy.Act: sampling needs a *rand.Rand")
	}
	if err := p.checkMasks(len(obs), masks); err != nil {
		return nil, err
	}
	x, err := p.input(obs)
	if err != nil {
		return nil, err
	}
	// The logits and the value of each observation, [B, width+1], read
	// back in one copy.
	var both *tensor.Tensor
	autograd.InferenceMode(func() {
		both = autograd.Concat([]*autograd.Var{p.actor.Forward(x), p.critic.Forward(x)}, 1).Value
	})
	rows, err := hostFloat64s(both)
	if err != nil {
		return nil, err
	}
	width := len(rows)/len(obs) - 1
	out := &ActOutput{Actions: make([][]int, len(obs)), LogProbs: make([][]float64, len(obs)), Values: make([]float64, len(obs))}
	for b := range obs {
		m := maskAt(masks, b)
		out.Actions[b] = make([]int, len(p.spec.HeadSizes))
		out.LogProbs[b] = make([]float64, len(p.spec.HeadSizes))
		off := b * (width + 1)
		logits := rows[off : off+width]
		out.Values[b] = rows[off+width]
		off = 0
		for h, n := range p.spec.HeadSizes {
			row := logits[off : off+n]
			off += n
			for _, v := range row {
				if !finite(v) {
					return nil, fmt.Errorf("simic: MLPPolicy.Act: observation %d head %s: non-finite logits", b, p.spec.HeadName(h))
				}
			}
			lp := maskedLogSoftmax(row, m, h)
			a := 0
			if deterministic {
				for i := range lp {
					if lp[i] > lp[a] {
						a = i
					}
				}
			} else {
				u := rng.Float64()
				a = -1
				last := 0
				for i := range lp {
					if !m.valid(h, i) {
						continue
					}
					last = i
					u -= math.Exp(lp[i])
					if u < 0 {
						a = i
						break
					}
				}
				if a < 0 { // rounding left u ≥ 0: take the last valid option
					a = last
				}
			}
			out.Actions[b][h] = a
			out.LogProbs[b][h] = lp[a]
		}
	}
	return out, nil
}

// maskedLogSoftmax is the host log-softmax of one head's logits with
// masked options at leyline.MaskedLogitValue.
func maskedLogSoftmax(row []float64, m Masks, h int) []float64 {
	z := make([]float64, len(row))
	mx := math.Inf(-1)
	for i, v := range row {
		if !m.valid(h, i) {
			v = float64(leyline.MaskedLogitValue)
		}
		z[i] = v
		mx = math.Max(mx, v)
	}
	s := 0.0
	for _, v := range z {
		s += math.Exp(v - mx)
	}
	lse := mx + math.Log(s)
	for i := range z {
		z[i] -= lse
	}
	return z
}

// Evaluate implements Policy.
func (p *MLPPolicy) Evaluate(obs [][]float32, masks []Masks, actions [][]int) (*Evaluation, error) {
	bsz := len(obs)
	if bsz == 0 {
		return nil, fmt.Errorf("simic: MLPPolicy.Evaluate: no observations")
	}
	if len(actions) != bsz {
		return nil, fmt.Errorf("simic: MLPPolicy.Evaluate: %d actions for %d observations", len(actions), bsz)
	}
	if err := p.checkMasks(bsz, masks); err != nil {
		return nil, err
	}
	for b, a := range actions {
		if len(a) != len(p.spec.HeadSizes) {
			return nil, fmt.Errorf("simic: MLPPolicy.Evaluate: action %d has %d heads, want %d", b, len(a), len(p.spec.HeadSizes))
		}
		for h, v := range a {
			if v < 0 || v >= p.spec.HeadSizes[h] || !maskAt(masks, b).valid(h, v) {
				return nil, fmt.Errorf("simic: MLPPolicy.Evaluate: action %d: %w: head %s option %d", b, ErrNoValidAction, p.spec.HeadName(h), v)
			}
		}
	}
	x, err := p.input(obs)
	if err != nil {
		return nil, err
	}
	logits := p.actor.Forward(x)
	ev := &Evaluation{Value: autograd.Reshape(p.critic.Forward(x), bsz)}
	off := 0
	for h, n := range p.spec.HeadSizes {
		lg := autograd.Narrow(logits, 1, off, n)
		off += n
		lp, ent, err := headLogProbEntropy(lg, masks, actions, h)
		if err != nil {
			return nil, err
		}
		ev.LogProbs = append(ev.LogProbs, lp)
		ev.Entropies = append(ev.Entropies, ent)
	}
	return ev, nil
}

// headLogProbEntropy computes, differentiably, the log-probability of
// each row's action on head h and the head's entropy normalised by
// ln(valid options) (0 with a single valid option). The masks, actions
// and constants are built on the host and copied to lg's device.
func headLogProbEntropy(lg *autograd.Var, masks []Masks, actions [][]int, h int) (logp, ent *autograd.Var, err error) {
	bsz, n := lg.Shape()[0], lg.Shape()[1]
	dt := lg.DType()
	maskFlat := make([]bool, bsz*n)
	invLn := make([]float64, bsz)
	idx := make([]int64, bsz)
	for b := 0; b < bsz; b++ {
		m := maskAt(masks, b)
		for i := 0; i < n; i++ {
			maskFlat[b*n+i] = m.valid(h, i)
		}
		if nv := m.numValid(h, n); nv > 1 {
			invLn[b] = 1 / math.Log(float64(nv))
		}
		idx[b] = int64(actions[b][h])
	}
	dev := lg.Value.Device()
	var ts [5]*tensor.Tensor
	for i, t := range []*tensor.Tensor{tensor.FromSlice(maskFlat, bsz, n), tensor.Full(dt, float64(leyline.MaskedLogitValue), bsz, n),
		tensor.FromSlice(idx, bsz, 1), tensor.Zeros(dt, bsz, n), tensor.FromFloat64s(dt, invLn, bsz)} {
		if ts[i], err = toDevice(t, dev); err != nil {
			return nil, nil, err
		}
	}
	maskT, neg, idxT, zeros, inv := ts[0], ts[1], ts[2], ts[3], ts[4]
	masked := autograd.Where(maskT, lg, autograd.Const(neg))
	lsm := autograd.LogSoftmax(masked, 1)
	logp = autograd.Reshape(autograd.Gather(lsm, 1, idxT), bsz)
	plogp := autograd.Where(maskT, autograd.Mul(autograd.Exp(lsm), lsm), autograd.Const(zeros))
	raw := autograd.Neg(autograd.Sum(plogp, []int{1}, false))
	ent = autograd.Mul(raw, autograd.Const(inv))
	return logp, ent, nil
}

// Values implements Policy.
func (p *MLPPolicy) Values(obs [][]float32) ([]float64, error) {
	if len(obs) == 0 {
		return nil, nil
	}
	x, err := p.input(obs)
	if err != nil {
		return nil, err
	}
	var v *tensor.Tensor
	autograd.InferenceMode(func() { v = p.critic.Forward(x).Value })
	return hostFloat64s(v) // one read
}
