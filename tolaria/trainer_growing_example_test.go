package tolaria_test

import (
	"context"
	"fmt"

	"github.com/esper-go/esper/data"
	"github.com/esper-go/esper/kasmina"
	"github.com/esper-go/esper/leyline"
	"github.com/esper-go/esper/nn"
	"github.com/esper-go/esper/tamiyo"
	"github.com/esper-go/esper/tensor"
	"github.com/esper-go/esper/tolaria"
)

// must stops the program on an error.
func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

// A model that grows, embedded in a Go program: the synthetic task
// through prefetching loaders, a CNN host with a seed slot after each
// block, and the heuristic controller, which germinates a seed once the
// host stalls and walks it through its stages. The host has 1×1
// convolutions, which cannot see the gratings the classes are made of
// (the impaired host of `make demo`), so it stalls at once.
func ExampleTrainer_growing() {
	train, val, err := data.Synthetic(data.SyntheticOptions{Train: 512, Test: 256, Seed: 1})
	if err != nil {
		panic(err)
	}
	trainLoader := must(data.NewLoader(train, data.LoaderOptions{BatchSize: 64, Shuffle: true, DropLast: true}))
	defer trainLoader.Close()
	valLoader := must(data.NewLoader(val, data.LoaderOptions{BatchSize: 256}))
	defer valLoader.Close()

	host := must(kasmina.NewCNNHost(kasmina.CNNHostOptions{InChannels: 1, Classes: train.Classes(), Blocks: 2,
		BaseChannels: 4, KernelSize: 1, RNG: tensor.NewRNG(1)}))
	model := must(kasmina.NewMorphogeneticModel(host, kasmina.ModelOptions{Slots: []string{"r0c0", "r0c1"}}))
	// On a device the trainer copies the loaders' batches to it.
	if err := nn.To(model, exampleDevice()); err != nil {
		panic(err)
	}
	trainer := must(tolaria.NewTrainer(tolaria.TrainerOptions{
		Model: model, Train: trainLoader, Val: valLoader, Epochs: 10, HostLR: 0.05,
		Controller: must(tamiyo.NewHeuristic(tamiyo.HeuristicOptions{})),
	}))
	summary := must(trainer.Fit(context.Background()))

	fmt.Println("epochs:", len(summary.Epochs))
	for _, r := range summary.Epochs {
		if d := r.Decision; d.Op != leyline.OpWait {
			fmt.Println("first action:", d.Op, d.SlotID, d.Blueprint.ID())
			break
		}
	}
	fmt.Println("seeds germinated:", summary.Germinated)
	// Output:
	// epochs: 10
	// first action: GERMINATE r0c0 conv_light
	// seeds germinated: 1
}
