package blueprint

import (
	"testing"

	"github.com/esper-go/esper/autograd"
	"github.com/esper-go/esper/internal/testdevice"
	"github.com/esper-go/esper/tensor"
)

// TestZeroStartedSeedsStillLearn checks that every seed that starts as
// the identity (conv_small always; depthwise, conv_light and conv_heavy
// with ZeroFinal, as MULTIPLY seeds are built) gets a non-zero gradient
// at germination and leaves the identity after one SGD step. The
// reference zeroes the convolution before GN and ReLU instead, where
// GN(0) = 0 and ReLU'(0) = 0 block every gradient of the branch, so such
// a seed would stay the identity however long it trained.
func TestZeroStartedSeedsStillLearn(t *testing.T) {
	tests := []struct {
		name      string
		zeroFinal bool
	}{
		{"conv_small", false},
		{"depthwise", true},
		{"conv_light", true},
		{"conv_heavy", true},
		{"bottleneck", false},
		{"bottleneck", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := build(t, TopologyCNN, tt.name, Options{Channels: 8, RNG: testRNG(), ZeroFinal: tt.zeroFinal, DType: tensor.F64})
			x := tensor.Normal(tensor.NewRNG(5), tensor.F64, 0, 1, 2, 8, 6, 6)
			if !equalValues(t, forward(t, m, x), x) {
				t.Fatal("seed is not the identity at germination")
			}
			target := tensor.Normal(tensor.NewRNG(6), tensor.F64, 0, 1, 2, 8, 6, 6)
			out := m.Forward(autograd.Const(testdevice.To(t, x)))
			loss := autograd.SumAll(autograd.Square(autograd.Sub(out, autograd.Const(testdevice.To(t, target)))))
			autograd.Backward(loss)
			total := 0.0
			for _, p := range m.Parameters() {
				if p.Grad != nil {
					total += maxAbs(t, p.Grad)
					// One SGD step, on the parameters' device.
					autograd.NoGrad(func() {
						p.Value = autograd.Sub(autograd.Const(p.Value), autograd.MulScalar(autograd.Const(p.Grad), 0.01)).Value
					})
				}
			}
			if total == 0 {
				t.Fatal("every parameter gradient is zero: the seed can never leave the identity")
			}
			if equalValues(t, forward(t, m, x), x) {
				t.Error("still the identity after one SGD step")
			}
		})
	}
}
