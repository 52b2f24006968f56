package blueprint

import (
	"testing"

	"github.com/esper-go/esper/autograd"
	"github.com/esper-go/esper/tensor"
)

// TestZeroedConvBeforeReLUGetsNoGradient pins a property of the G2 table
// that Kasmina must know about: where the zeroed layer feeds GN then ReLU
// (conv_small as built; depthwise, conv_light and conv_heavy with
// ZeroFinal), GN of an all-zero input is its bias 0, ReLU'(0) = 0, and no
// parameter of the residual branch ever receives a gradient, so the seed
// stays the identity however long it trains. bottleneck (GN without a
// ReLU after it) and the mlp seeds do get gradients. This follows the
// reference as written; changing it is a design decision, not a fix here.
func TestZeroedConvBeforeReLUGetsNoGradient(t *testing.T) {
	tests := []struct {
		name      string
		zeroFinal bool
		dead      bool
	}{
		{"conv_small", false, true},
		{"depthwise", true, true},
		{"conv_light", true, true},
		{"conv_heavy", true, true},
		{"bottleneck", false, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := MustBuild(TopologyCNN, tt.name, Options{Channels: 8, RNG: testRNG(), ZeroFinal: tt.zeroFinal, DType: tensor.F64})
			x := autograd.Const(tensor.Normal(tensor.NewRNG(5), tensor.F64, 0, 1, 2, 8, 6, 6))
			autograd.Backward(autograd.SumAll(autograd.Square(m.Forward(x))))
			total := 0.0
			for _, p := range m.Parameters() {
				if p.Grad != nil {
					total += maxAbs(p.Grad)
				}
			}
			if dead := total == 0; dead != tt.dead {
				t.Errorf("all parameter gradients zero: %v, want %v (sum of max |grad| %g)", dead, tt.dead, total)
			}
		})
	}
}
