package recipe_test

import (
	"context"
	"fmt"

	"github.com/esper-go/esper/data"
	"github.com/esper-go/esper/recipe"
	"github.com/esper-go/esper/tolaria"
)

// A short run of the standard recipe: the synthetic task, the impaired
// 2-block host of the demo, the heuristic controller.
func Example() {
	train, test, err := recipe.LoadTask("synthetic", "", 512, 100, 7)
	if err != nil {
		panic(err)
	}
	model, err := recipe.NewModel(train, recipe.ModelOptions{Blocks: 2, BaseChannels: 4, Kernel: 1, Seed: 7})
	if err != nil {
		panic(err)
	}
	ctl, err := recipe.NewController(model, recipe.ControllerOptions{Kind: "heuristic", Epochs: 3})
	if err != nil {
		panic(err)
	}
	tl, _ := data.NewLoader(train, data.LoaderOptions{BatchSize: 128, Shuffle: true, Seed: 7, DropLast: true})
	vl, _ := data.NewLoader(test, data.LoaderOptions{BatchSize: 100})
	defer tl.Close()
	defer vl.Close()
	tr, err := tolaria.NewTrainer(tolaria.TrainerOptions{Model: model, Train: tl, Val: vl, Epochs: 3, Controller: ctl})
	if err != nil {
		panic(err)
	}
	sum, err := tr.Fit(context.Background())
	if err != nil {
		panic(err)
	}
	fmt.Println("slots:", model.SlotIDs(), "epochs:", len(sum.Epochs))
	// Output: slots: [r0c0 r0c1] epochs: 3
}
