package blueprint

import (
	"testing"

	"github.com/esper-go/esper/autograd"
	"github.com/esper-go/esper/tensor"
)

// TestGradCheck compares every blueprint's analytic gradients (input and
// all parameters) with central differences in F64.
//
// The zero-initialised layers are perturbed first: with up, fc2 or conv
// at zero most gradients are exactly zero and the check would prove
// little. The inputs are random normals, so no ReLU input sits within the
// finite-difference step (1e-6) of its kink.
//
// The default tolerance (1e-6) applies: the worst errors measured are
// below 1e-8 (GroupNorm over 25 elements, the sigmoid gate and the
// 1/√var of the norms included), so it leaves a hundredfold margin.
//
// It runs on the CPU on purpose: GradCheck perturbs its F64 leaves
// element by element on the host.
func TestGradCheck(t *testing.T) {
	forEachBlueprint(t, func(t *testing.T, spec Spec) {
		rng := tensor.NewRNG(11)
		c := 4
		shape := []int{2, c, 5, 5}
		if spec.Topology == TopologyMLP {
			c = 6
			shape = []int{3, c}
		}
		m := MustBuild(spec.Topology, spec.Name, Options{Channels: c, RNG: rng, DType: tensor.F64})
		for _, p := range m.Parameters() {
			noise := tensor.Normal(rng, tensor.F64, 0, 0.5, p.Shape()...).F64()
			v := p.Value.F64()
			for i := range v {
				v[i] += noise[i]
			}
		}
		x := autograd.Param(tensor.Normal(rng, tensor.F64, 0, 1, shape...))
		x.Name = "input"
		vars := append([]*autograd.Var{x}, m.Parameters()...)
		err := autograd.GradCheckVars(func() *autograd.Var { return m.Forward(x) }, vars, autograd.GradCheckOptions{})
		if err != nil {
			t.Error(err)
		}
	})
}
