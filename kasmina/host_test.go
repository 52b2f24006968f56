package kasmina

import (
	"fmt"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/esper-go/esper/autograd"
	"github.com/esper-go/esper/internal/testdevice"
	"github.com/esper-go/esper/leyline"
	"github.com/esper-go/esper/tensor"
)

func TestCNNHostSpecs(t *testing.T) {
	h, err := NewCNNHost(CNNHostOptions{BaseChannels: 4})
	noErr(t, err)
	specs := h.InjectionSpecs()
	check(t, len(specs) == 6, "3 blocks → %d specs, want 6", len(specs))
	var ids []string
	for _, s := range specs {
		noErr(t, s.Validate())
		ids = append(ids, s.SlotID)
	}
	check(t, slices.Equal(ids, []string{"r0c0", "r0c1", "r0c2", "r1c0", "r1c1", "r1c2"}), "action order %v", ids)
	check(t, slices.Equal(h.TimelineOrder(), []string{"r0c0", "r1c0", "r0c1", "r1c1", "r0c2", "r1c2"}), "timeline %v", h.TimelineOrder())
	ch := h.SegmentChannels()
	for i, want := range []int{4, 8, 16} {
		check(t, ch[leyline.FormatSlotID(0, i)] == want && ch[leyline.FormatSlotID(1, i)] == want, "channels of block %d: %v", i, ch)
	}
	for _, s := range specs {
		wantSurface, wantOrder := leyline.SurfacePrePool, s.Col
		if s.Row == 1 {
			wantSurface, wantOrder = leyline.SurfacePostPool, 3+s.Col
		}
		check(t, s.Surface == wantSurface && s.Order == wantOrder, "spec %+v", s)
	}
	if _, err := leyline.SlotConfigFromSpecs(specs); err != nil {
		t.Fatalf("specs do not make a slot config: %v", err)
	}
	bl := h.Blocks()
	check(t, len(bl) == 3 && bl[2].Channels == 16 && bl[2].Depth == 2 && slices.Equal(bl[1].Slots, []string{"r0c1", "r1c1"}), "blocks %+v", bl)
	check(t, h.Topology() == TopologyCNN, "topology")

	h5, err := NewCNNHost(CNNHostOptions{Blocks: 5, BaseChannels: 2})
	noErr(t, err)
	check(t, len(h5.InjectionSpecs()) == 10, "5 blocks → %d specs", len(h5.InjectionSpecs()))

	hp, err := NewCNNHost(CNNHostOptions{Blocks: 3, BaseChannels: 2, PoolLayers: 1})
	noErr(t, err)
	check(t, len(hp.InjectionSpecs()) == 4, "1 pool layer → %d specs", len(hp.InjectionSpecs()))
	hn, err := NewCNNHost(CNNHostOptions{Blocks: 2, BaseChannels: 2, PoolLayers: -1})
	noErr(t, err)
	check(t, len(hn.InjectionSpecs()) == 2, "no pooling → %d specs", len(hn.InjectionSpecs()))
}

func TestCNNHostRejectsBadOptions(t *testing.T) {
	for _, o := range []CNNHostOptions{{Blocks: 1}, {Blocks: -2}, {BaseChannels: -1}, {PoolLayers: -3}} {
		if _, err := NewCNNHost(o); err == nil {
			t.Errorf("NewCNNHost(%+v) accepted", o)
		}
	}
	if _, err := NewMLPHost(MLPHostOptions{}); err == nil {
		t.Error("NewMLPHost without InFeatures accepted")
	}
}

// checkSplitForward checks ForwardToSegment + ForwardFromSegment ==
// Forward bitwise for every slot and every pair of slots.
func checkSplitForward(t *testing.T, h Host, x *autograd.Var) {
	t.Helper()
	full := h.Forward(x)
	order := h.TimelineOrder()
	for i, slot := range order {
		mid, err := h.ForwardToSegment(slot, x, "")
		noErr(t, err)
		out, err := h.ForwardFromSegment(slot, mid)
		noErr(t, err)
		check(t, bitwiseEqual(t, out.Value, full.Value), "split at %s differs from the full forward", slot)
		for _, next := range order[i+1:] {
			mid2, err := h.ForwardToSegment(next, mid, slot)
			noErr(t, err)
			out, err := h.ForwardFromSegment(next, mid2)
			noErr(t, err)
			check(t, bitwiseEqual(t, out.Value, full.Value), "route %s → %s differs", slot, next)
		}
	}
}

func TestCNNHostSplitForwardEqualsForward(t *testing.T) {
	cases := []struct {
		opts  CNNHostOptions
		shape []int
	}{
		{CNNHostOptions{InChannels: 1, BaseChannels: 4}, []int{2, 1, 28, 28}},
		{CNNHostOptions{BaseChannels: 4}, []int{2, 3, 32, 32}},
		{CNNHostOptions{InChannels: 1, BaseChannels: 5, Blocks: 2}, []int{2, 1, 9, 9}},   // prime width, odd size
		{CNNHostOptions{InChannels: 1, BaseChannels: 7, Blocks: 3}, []int{2, 1, 2, 2}},   // 2×2 input: the later pools are skipped
		{CNNHostOptions{InChannels: 1, BaseChannels: 3, Blocks: 2}, []int{2, 1, 1, 1}},   // 1×1 input
		{CNNHostOptions{BaseChannels: 2, Blocks: 2, KernelSize: 1}, []int{2, 3, 64, 64}}, // 64×64, kernel 1
		{CNNHostOptions{BaseChannels: 2, Blocks: 2, PoolLayers: 1}, []int{2, 3, 8, 8}},
	}
	for i, c := range cases {
		t.Run(fmt.Sprint(i), func(t *testing.T) {
			c.opts.RNG = tensor.NewRNG(uint64(i))
			h, err := NewCNNHost(c.opts)
			noErr(t, err)
			toDevice(t, h)
			x := input(t, uint64(10+i), tensor.F32, c.shape...)
			out := h.Forward(x)
			check(t, slices.Equal(out.Shape(), []int{c.shape[0], h.Options().Classes}), "output shape %v", out.Shape())
			checkSplitForward(t, h, x)
			h.SetTraining(false)
			checkSplitForward(t, h, x)
		})
	}
}

func TestCNNHostLargeInput(t *testing.T) {
	if testing.Short() {
		t.Skip("256×256 input")
	}
	h, err := NewCNNHost(CNNHostOptions{BaseChannels: 2, Blocks: 2, Classes: 2})
	noErr(t, err)
	toDevice(t, h)
	out := h.Forward(input(t, 1, tensor.F32, 2, 3, 256, 256))
	check(t, slices.Equal(out.Shape(), []int{2, 2}), "shape %v", out.Shape())
}

func TestHostRoutingErrors(t *testing.T) {
	h := smallCNN(t, 1, tensor.F32)
	x := input(t, 1, tensor.F32, 2, 1, 8, 8)
	mid, err := h.ForwardToSegment("r0c1", x, "")
	noErr(t, err)
	_, err = h.ForwardToSegment("r0c0", mid, "r0c1") // backwards
	wantErr(t, err, ErrRouting)
	_, err = h.ForwardToSegment("r0c1", mid, "r0c1") // same segment
	wantErr(t, err, ErrRouting)
	_, err = h.ForwardToSegment("r9c9", x, "")
	wantErr(t, err, ErrRouting)
	_, err = h.ForwardFromSegment("r5c0", mid)
	wantErr(t, err, ErrRouting)
	// A wrongly shaped input is an error, not a panic.
	_, err = h.ForwardToSegment("r0c0", input(t, 1, tensor.F32, 2, 3, 8, 8), "")
	check(t, err != nil, "3-channel input to a 1-channel host accepted")
}

func TestMLPHost(t *testing.T) {
	h, err := NewMLPHost(MLPHostOptions{InFeatures: 16, Hidden: 6, Blocks: 3, Classes: 4})
	noErr(t, err)
	toDevice(t, h)
	check(t, h.Topology() == TopologyMLP, "topology")
	check(t, slices.Equal(h.TimelineOrder(), []string{"r0c0", "r0c1", "r0c2"}), "timeline %v", h.TimelineOrder())
	for _, s := range h.InjectionSpecs() {
		noErr(t, s.Validate())
		check(t, s.Channels == 6, "channels %d", s.Channels)
	}
	check(t, len(h.Blocks()) == 3, "blocks")
	x := input(t, 2, tensor.F32, 3, 1, 4, 4) // flattened to 16 features
	out := h.Forward(x)
	check(t, slices.Equal(out.Shape(), []int{3, 4}), "shape %v", out.Shape())
	checkSplitForward(t, h, x)
	checkSplitForward(t, h, input(t, 3, tensor.F32, 3, 16))
	_, err = h.ForwardToSegment("r0c0", x, "r0c2")
	wantErr(t, err, ErrRouting)
}

// TestCNNHostFusedPoolMatchesSegments: the whole forward, which runs each
// block with its pool fused into the batch norm (nn.ConvBNReluMaxPool),
// gives bitwise the logits and parameter gradients of the forward cut at
// every slot (each block and pool a step of its own), in training mode
// with gradients, and in inference.
func TestCNNHostFusedPoolMatchesSegments(t *testing.T) {
	x := input(t, 5, tensor.F32, 3, 1, 12, 12)
	run := func(whole bool) (logits []float32, grads [][]float32) {
		h := smallCNN(t, 9, tensor.F32)
		var out *autograd.Var
		if whole {
			var err error
			out, err = h.ForwardWhole(x)
			noErr(t, err)
		} else {
			v, prev := x, ""
			for _, cut := range h.TimelineOrder() {
				var err error
				v, err = h.ForwardToSegment(cut, v, prev)
				noErr(t, err)
				prev = cut
			}
			var err error
			out, err = h.ForwardFromSegment(prev, v)
			noErr(t, err)
		}
		autograd.Backward(autograd.SumAll(out))
		for _, p := range h.Parameters() {
			grads = append(grads, testdevice.F32(t, p.Grad))
		}
		return testdevice.F32(t, out.Value), grads
	}
	wl, wg := run(false)
	gl, gg := run(true)
	require.Equal(t, wl, gl, "logits")
	require.Equal(t, wg, gg, "parameter gradients")

	var seg, whole *autograd.Var
	h := smallCNN(t, 9, tensor.F32)
	h.SetTraining(false)
	autograd.InferenceMode(func() {
		var err error
		whole, err = h.ForwardWhole(x)
		noErr(t, err)
		v, prev := x, ""
		for _, cut := range h.TimelineOrder() {
			v, err = h.ForwardToSegment(cut, v, prev)
			noErr(t, err)
			prev = cut
		}
		seg, err = h.ForwardFromSegment(prev, v)
		noErr(t, err)
	})
	require.Equal(t, testdevice.F32(t, seg.Value), testdevice.F32(t, whole.Value), "inference logits")
}

// TestPrePoolSlots: a CNN host's pre-pool slots are one per block, in
// action order.
func TestPrePoolSlots(t *testing.T) {
	h, err := NewCNNHost(CNNHostOptions{InChannels: 1, Classes: 3, Blocks: 3, BaseChannels: 2, RNG: tensor.NewRNG(1)})
	if err != nil {
		t.Fatal(err)
	}
	if got := PrePoolSlots(h); fmt.Sprint(got) != "[r0c0 r0c1 r0c2]" {
		t.Fatalf("PrePoolSlots = %v", got)
	}
}
