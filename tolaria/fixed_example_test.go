package tolaria_test

import (
	"context"
	"fmt"

	"github.com/esper-go/esper/kasmina"
	"github.com/esper-go/esper/nn"
	"github.com/esper-go/esper/tensor"
	"github.com/esper-go/esper/tolaria"
)

// A small dataset kept on the model's device and cut once into fixed
// batches: with Capture, the trainer replays each whole epoch — every
// step and every validation batch — as one graph.
func ExampleNewFixed() {
	dev := exampleDevice()
	rng := tensor.NewRNG(3)
	x := tensor.Normal(rng, tensor.F32, 0, 1, 64, 1, 8, 8)
	y := tensor.RandInt(rng, 2, 64)
	xs, ys := x.F32(), y.I64()
	for n := range 64 { // class 1 images are brighter
		for p := 0; p < 64; p++ {
			xs[n*64+p] += float32(ys[n])
		}
	}
	// The data moves to the device once; the batches are views of it.
	x, err := x.ToDevice(dev)
	if err == nil {
		y, err = y.ToDevice(dev)
	}
	if err != nil {
		panic(err)
	}
	train, err := tolaria.NewFixed(x, y, tolaria.FixedOptions{Size: 16})
	if err != nil {
		panic(err)
	}
	host := kasmina.MustCNNHost(kasmina.CNNHostOptions{InChannels: 1, Classes: 2, Blocks: 2, BaseChannels: 4, RNG: tensor.NewRNG(1)})
	model, err := kasmina.NewMorphogeneticModel(host, kasmina.ModelOptions{Slots: []string{"r0c0"}})
	if err != nil {
		panic(err)
	}
	if err := nn.To(model, dev); err != nil {
		panic(err)
	}
	tr, err := tolaria.NewTrainer(tolaria.TrainerOptions{
		Model: model, Train: train, Val: train, Epochs: 6, HostLR: 0.05, Capture: true,
		GradientTelemetryStride: -1, // no host work between the steps
	})
	if err != nil {
		panic(err)
	}
	sum, err := tr.Fit(context.Background())
	if err != nil {
		panic(err)
	}
	last := sum.Final()
	fmt.Println("batches per epoch:", train.Len())
	fmt.Println("last epoch replayed as one graph:", last.EpochCaptured)
	fmt.Println("validation accuracy above 90%:", last.ValAccuracy > 90)
	// Output:
	// batches per epoch: 4
	// last epoch replayed as one graph: true
	// validation accuracy above 90%: true
}
