package kasmina

import (
	"testing"

	"github.com/esper-go/esper/autograd"
	"github.com/esper-go/esper/internal/testdevice"
	"github.com/esper-go/esper/leyline"
	"github.com/esper-go/esper/nn"
	"github.com/esper-go/esper/tensor"
)

// headless is a Host without a LinearHead: a CNNHost seen through the
// Host interface alone.
type headless struct{ Host }

// TestForwardFeatures: ForwardFeatures stops before the host's linear
// head, and the head's Forward of the features is Forward's output bit
// for bit — a CNN host with every slot empty (its whole forward), with a
// seed in a slot, an MLP host — and a host without a LinearHead gives no
// head and Forward's logits.
func TestForwardFeatures(t *testing.T) {
	dev := testdevice.Device(t)
	cnn := MustCNNHost(CNNHostOptions{InChannels: 1, Classes: 3, Blocks: 2, BaseChannels: 4, RNG: tensor.NewRNG(7)})
	mlp := MustMLPHost(MLPHostOptions{InFeatures: 64, Classes: 3, Hidden: 8, Blocks: 2, RNG: tensor.NewRNG(8)})
	x := autograd.Const(testdevice.To(t, tensor.Normal(tensor.NewRNG(9), tensor.F32, 0, 1, 5, 1, 8, 8)))
	for _, c := range []struct {
		name     string
		host     Host
		germ     string
		wantHead bool
	}{
		{"cnn, slots empty", cnn, "", true},
		{"cnn with a seed", cnn, "r0c0", true},
		{"mlp", mlp, "", true},
		{"no LinearHead", headless{cnn}, "", false},
	} {
		noErr(t, nn.To(c.host, dev))
		m, err := NewMorphogeneticModel(c.host, ModelOptions{Slots: c.host.TimelineOrder()[:1]})
		noErr(t, err)
		if c.germ != "" {
			noErr(t, m.GerminateSeed(c.germ, GerminateOptions{Blueprint: leyline.BlueprintConvLight.String()}))
		}
		want := m.Forward(x)
		feats, head, err := m.ForwardFeatures(x)
		noErr(t, err)
		if !c.wantHead {
			check(t, head == nil, "%s: a head from a host without one", c.name)
			check(t, bitwiseEqual(t, feats.Value, want.Value), "%s: not Forward's logits", c.name)
			continue
		}
		check(t, head != nil && head == c.host.(LinearHead).Head(), "%s: not the host's head", c.name)
		check(t, bitwiseEqual(t, head.Forward(feats).Value, want.Value), "%s: head(features) is not Forward's output", c.name)
	}
}
