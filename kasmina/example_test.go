package kasmina_test

import (
	"fmt"

	"github.com/esper-go/esper/autograd"
	"github.com/esper-go/esper/internal/testdevice"
	"github.com/esper-go/esper/kasmina"
	"github.com/esper-go/esper/leyline"
	"github.com/esper-go/esper/nn"
	"github.com/esper-go/esper/tensor"
)

// A seed's life on a small CNN host: germinate, train in isolation, blend
// in over three epochs, hold, and fossilize once it measurably helps. The
// host may live on any device; its seeds are created there.
func Example() {
	dev := testdevice.Must() // tensor.CPU, tensor.Sim(0), a CUDA device, …
	host := kasmina.MustCNNHost(kasmina.CNNHostOptions{InChannels: 1, Classes: 10, Blocks: 2, BaseChannels: 4})
	if err := nn.To(host, dev); err != nil {
		panic(err)
	}
	model, err := kasmina.NewMorphogeneticModel(host, kasmina.ModelOptions{Slots: []string{"r0c1"}})
	if err != nil {
		panic(err)
	}
	if err := model.GerminateSeed("r0c1", kasmina.GerminateOptions{Blueprint: "conv_light", BlendAlgorithmID: kasmina.BlendLinear, Tempo: 3}); err != nil {
		panic(err)
	}
	slot, _ := model.Slot("r0c1")
	batch, err := tensor.Uniform(tensor.NewRNG(1), tensor.F32, -1, 1, 2, 1, 28, 28).ToDevice(dev)
	if err != nil {
		panic(err)
	}
	x := autograd.Const(batch)

	res, _ := slot.AdvanceStage(0) // G1 → TRAINING
	fmt.Println(res.Gate, res.Passed, slot.Stage())
	_ = model.Forward(x) // the output is exactly the host's; the seed learns

	// The trainer measures the seed for ten epochs (here: pretend).
	st := slot.State()
	for epoch := 0; epoch < kasmina.MinBlendingEpochs; epoch++ {
		slot.RecordAccuracy(50 + float64(epoch))
	}
	st.Telemetry = kasmina.SeedTelemetry{HealthMeasured: true, GradientHealth: 0.95}
	res, _ = slot.AdvanceStage(0) // G2 (permissive) → BLENDING
	fmt.Println(res.Gate, res.Passed, slot.Stage())

	for epoch := 0; epoch < 3; epoch++ {
		model.StepEpoch()
		fmt.Printf("alpha %.3f\n", slot.Alpha())
	}
	res, _ = slot.AdvanceStage(0) // G3 → HOLDING
	fmt.Println(res.Gate, res.Passed, slot.Stage())

	st.Metrics.RecordCounterfactual(2.5) // validation with the seed off: −2.5 points
	res, _ = slot.AdvanceStage(leyline.StageFossilized)
	fmt.Println(res.Gate, res.Passed, slot.Stage(), model.FossilizedSeedCount())
	// Output:
	// G1 true TRAINING
	// G2 true BLENDING
	// alpha 0.333
	// alpha 0.667
	// alpha 1.000
	// G3 true HOLDING
	// G5 true FOSSILIZED 1
}

// trainingSeed is the telemetry examples' set-up: a small CNN host on the
// test device (the CPU, or sim under ESPER_TEST_DEVICE) with a conv_light
// seed TRAINING in slot r0c1 (it learns on the host's errors), and a
// batch of two images on that device.
func trainingSeed() (tensor.Device, *kasmina.MorphogeneticModel, *kasmina.Slot, *tensor.Tensor) {
	dev := testdevice.Must()
	host := kasmina.MustCNNHost(kasmina.CNNHostOptions{InChannels: 1, Classes: 10, Blocks: 2, BaseChannels: 4})
	if err := nn.To(host, dev); err != nil {
		panic(err)
	}
	model, err := kasmina.NewMorphogeneticModel(host, kasmina.ModelOptions{Slots: []string{"r0c1"}})
	if err != nil {
		panic(err)
	}
	if err := model.GerminateSeed("r0c1", kasmina.GerminateOptions{Blueprint: "conv_light", Tempo: 3}); err != nil {
		panic(err)
	}
	slot, _ := model.Slot("r0c1")
	if _, err := slot.AdvanceStage(0); err != nil {
		panic(err)
	}
	batch, err := tensor.Uniform(tensor.NewRNG(1), tensor.F32, -1, 1, 2, 1, 28, 28).ToDevice(dev)
	if err != nil {
		panic(err)
	}
	return dev, model, slot, batch
}

// After a backward pass, every seed's gradient telemetry (health, the
// seed-to-host gradient ratio, the norm's average) and the norms of a
// caller's own tensors come from one read: on a device, one host sync for
// all of them.
func ExampleMorphogeneticModel_GradientTelemetry() {
	_, model, slot, batch := trainingSeed()
	autograd.Backward(autograd.SumAll(autograd.Square(model.Forward(autograd.Const(batch)))))

	first := model.HostParameters()[0] // also wanted: a host layer's gradient norm
	norms, err := model.GradientTelemetry([]*tensor.Tensor{first.Grad, nil})
	if err != nil {
		panic(err)
	}
	t := slot.State().Telemetry
	fmt.Println("seed health measured:", t.HealthMeasured, "norm > 0:", t.GradientNorm > 0)
	fmt.Println("extra norms:", norms[0] > 0, norms[1])
	// Output:
	// seed health measured: true norm > 0: true
	// extra norms: true -1
}

// A training loop that wants no host sync at its telemetry step launches
// the telemetry there and reads the pending norms later, with whatever
// else it reads at the end of its epoch (tensor.ToHostMany: one host sync
// for all), then applies them.
func ExampleMorphogeneticModel_LaunchGradientTelemetry() {
	dev, model, slot, batch := trainingSeed()
	logits := model.Forward(autograd.Const(batch))
	autograd.Backward(autograd.SumAll(autograd.Square(logits)))

	syncs := tensor.HostSyncs(dev)
	pending, err := model.LaunchGradientTelemetry(nil) // at the step: nothing read
	if err != nil {
		panic(err)
	}
	fmt.Println("host syncs at the step:", tensor.HostSyncs(dev)-syncs)

	// At the end of the epoch: the logits and the norms in one read.
	hosts, err := tensor.ToHostMany([]*tensor.Tensor{logits.Value, pending.Pending()})
	if err != nil {
		panic(err)
	}
	if _, err := pending.Apply(hosts[1]); err != nil {
		panic(err)
	}
	fmt.Println("seed health measured:", slot.State().Telemetry.HealthMeasured, "logits:", hosts[0].Shape())
	fmt.Println("at most one host sync in all:", tensor.HostSyncs(dev)-syncs <= 1) // none on the CPU
	// Output:
	// host syncs at the step: 0
	// seed health measured: true logits: [2 10]
	// at most one host sync in all: true
}

// A linear classifier as a host: its one slot sits at the input, and its
// layer is its head, so the model's features are the input itself.
func ExampleNewLinearHost() {
	lin, err := nn.NewLinear(tensor.NewRNG(1), nn.LinearOptions{In: 3, Out: 2})
	if err != nil {
		panic(err)
	}
	host, err := kasmina.NewLinearHost(lin)
	if err != nil {
		panic(err)
	}
	m, err := kasmina.NewMorphogeneticModel(host, kasmina.ModelOptions{Slots: []string{kasmina.LinearHostSlot}})
	if err != nil {
		panic(err)
	}
	x := autograd.Const(tensor.Ones(tensor.F32, 5, 3))
	feats, head, err := m.ForwardFeatures(x)
	if err != nil {
		panic(err)
	}
	fmt.Println(m.SlotIDs(), feats == x, head == lin, m.Forward(x).Shape())
	// Output:
	// [r0c0] true true [5 2]
}
