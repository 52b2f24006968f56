package simic

import "fmt"

// GAE defaults (esper-reference.md §5.1; G2 DEFAULT_GAMMA, DEFAULT_GAE_LAMBDA).
const (
	DefaultGamma     = 0.995
	DefaultGAELambda = 0.98
)

// GAEStep is one step of a trajectory for GAE, values in return units.
type GAEStep struct {
	Reward float64
	// Value is V(s_t).
	Value float64
	// Done marks a terminal step (no bootstrap after it).
	Done bool
	// Truncated marks a cut episode: Bootstrap is V(s_{t+1}).
	Truncated bool
	// Bootstrap is used only when Truncated.
	Bootstrap float64
}

func checkGAEParams(gamma, lambda float64) error {
	if !(gamma > 0 && gamma <= 1) {
		return fmt.Errorf("simic: gamma %v must lie in (0, 1]", gamma)
	}
	if !(lambda >= 0 && lambda <= 1) {
		return fmt.Errorf("simic: GAE lambda %v must lie in [0, 1]", lambda)
	}
	return nil
}

// GAE computes generalised advantage estimates over one environment's
// steps, last to first (esper-reference.md §5.3):
//
//	next     = Bootstrap if Truncated[t], else Value[t+1] (0 after the last step)
//	nonterm  = 0 if Done[t] else 1 (a truncation is non-terminal)
//	δ[t]     = r[t] + γ·next·nonterm − V[t]
//	A[t]     = δ[t] + γλ·nonterm·A[t+1]
//
// A truncated step also cuts the λ-chain (A[t+1] belongs to the next
// episode there), which is what multiplying by nonterm alone does not do;
// a truncated step therefore uses A[t] = δ[t]. Returns are A + V. adv,
// ret and td (each len(steps), or nil to allocate) receive the results;
// adv is also returned.
func GAE(steps []GAEStep, gamma, lambda float64, adv, ret, td []float64) ([]float64, error) {
	if err := checkGAEParams(gamma, lambda); err != nil {
		return nil, err
	}
	n := len(steps)
	for _, s := range []*[]float64{&adv, &ret, &td} {
		if *s == nil {
			*s = make([]float64, n)
		} else if len(*s) != n {
			return nil, fmt.Errorf("simic: GAE: output of length %d for %d steps", len(*s), n)
		}
	}
	for t, s := range steps {
		if !finite(s.Reward) || !finite(s.Value) || (s.Truncated && !finite(s.Bootstrap)) {
			return nil, fmt.Errorf("simic: GAE: step %d has a non-finite reward, value or bootstrap (%v, %v, %v)", t, s.Reward, s.Value, s.Bootstrap)
		}
	}
	next, nextAdv := 0.0, 0.0
	for t := n - 1; t >= 0; t-- {
		s := steps[t]
		nv, na := next, nextAdv
		if s.Truncated {
			nv, na = s.Bootstrap, 0
		}
		nonterm := 1.0
		if s.Done {
			nonterm = 0
		}
		delta := s.Reward + gamma*nv*nonterm - s.Value
		a := delta + gamma*lambda*nonterm*na
		td[t], adv[t], ret[t] = delta, a, a+s.Value
		next, nextAdv = s.Value, a
	}
	return adv, nil
}
