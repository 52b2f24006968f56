package tolaria_test

import (
	"context"
	"fmt"
	"iter"

	"github.com/esper-go/esper/kasmina"
	"github.com/esper-go/esper/nn"
	"github.com/esper-go/esper/tensor"
	"github.com/esper-go/esper/tolaria"
)

// batches serves the same (x, y) batches every epoch; a data.Loader is
// what real runs use.
type batches struct{ x, y []*tensor.Tensor }

func (b batches) Batches(int) iter.Seq2[*tensor.Tensor, *tensor.Tensor] {
	return func(yield func(*tensor.Tensor, *tensor.Tensor) bool) {
		for i := range b.x {
			if !yield(b.x[i], b.y[i]) {
				return
			}
		}
	}
}

// A host with two seed slots trained for a few epochs with the train
// step captured. Without a Controller no seed is germinated; pass a
// tamiyo controller to grow the model.
func ExampleTrainer() {
	rng := tensor.NewRNG(7)
	var data batches
	for i := 0; i < 4; i++ {
		x := tensor.Normal(rng, tensor.F32, 0, 1, 16, 1, 8, 8)
		y := tensor.RandInt(rng, 2, 16)
		// Class 1 images are brighter: an easy task.
		xs, ys := x.F32(), y.I64()
		for n := 0; n < 16; n++ {
			for p := 0; p < 64; p++ {
				xs[n*64+p] += float32(ys[n])
			}
		}
		data.x, data.y = append(data.x, x), append(data.y, y)
	}
	host := kasmina.MustCNNHost(kasmina.CNNHostOptions{InChannels: 1, Classes: 2, Blocks: 2, BaseChannels: 4, RNG: tensor.NewRNG(1)})
	model, err := kasmina.NewMorphogeneticModel(host, kasmina.ModelOptions{Slots: []string{"r0c0", "r0c1"}})
	if err != nil {
		panic(err)
	}
	// The trainer runs on the model's device and copies each batch there.
	if err := nn.To(model, exampleDevice()); err != nil {
		panic(err)
	}
	tr, err := tolaria.NewTrainer(tolaria.TrainerOptions{
		Model: model, Train: data, Val: data, Epochs: 5, HostLR: 0.05, Capture: true,
	})
	if err != nil {
		panic(err)
	}
	sum, err := tr.Fit(context.Background())
	if err != nil {
		panic(err)
	}
	first, last := sum.Epochs[0], sum.Final()
	fmt.Println("epochs:", len(sum.Epochs))
	fmt.Println("loss fell:", last.TrainLoss < first.TrainLoss)
	fmt.Println("captured:", last.Captured)
	fmt.Println("validation accuracy above 90%:", last.ValAccuracy > 90)
	// The launches each replay runs (CUDA graph nodes on a GPU).
	step, val := tr.GraphNodes()
	fmt.Println("step and validation graphs recorded:", step > 0 && val > 0)
	// Output:
	// epochs: 5
	// loss fell: true
	// captured: true
	// validation accuracy above 90%: true
	// step and validation graphs recorded: true
}
