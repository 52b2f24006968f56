package tolaria_test

import (
	"context"
	"fmt"
	"math"

	"github.com/esper-go/esper/internal/testdevice"
	"github.com/esper-go/esper/kasmina"
	"github.com/esper-go/esper/leyline"
	"github.com/esper-go/esper/nn"
	"github.com/esper-go/esper/tensor"
	"github.com/esper-go/esper/tolaria"
)

// exampleDevice is the device the examples run on (testdevice.Must: a
// bad ESPER_TEST_DEVICE panics, failing the example).
func exampleDevice() tensor.Device { return testdevice.Must() }

// germinateController always asks for a conv_light seed in slot r0c0.
type germinateController struct{}

func (germinateController) EvaluateEpoch(context.Context, leyline.EpochState) (leyline.Decision, error) {
	return leyline.Decision{Op: leyline.OpGerminate, SlotID: "r0c0", Blueprint: leyline.BlueprintConvLight}, nil
}

// A controller's decision runs under a deadline and is carried out on
// the model; when the loss turns NaN the governor rolls the model back,
// pruning the seed that was still being trained.
func Example() {
	host := kasmina.MustCNNHost(kasmina.CNNHostOptions{InChannels: 1, Blocks: 2, BaseChannels: 4})
	model, _ := kasmina.NewMorphogeneticModel(host, kasmina.ModelOptions{Slots: []string{"r0c0"}})
	dev := exampleDevice() // tensor.CPU, or a device: the seeds follow the model
	if err := nn.To(model, dev); err != nil {
		panic(err)
	}
	gov, _ := tolaria.NewGovernor(model, tolaria.GovernorOptions{})
	deadlines, _ := tolaria.NewDeadlines(tolaria.DeadlineOptions{})

	dec, out := deadlines.Decide(context.Background(), germinateController{}, leyline.EpochState{})
	res, _ := tolaria.ApplyDecision(model, dec, tolaria.ApplyOptions{})
	fmt.Println(out.Status, dec.Op, res.Status)

	if panicked, reason := gov.CheckVitalSigns(math.NaN()); panicked {
		rep, _ := gov.ExecuteRollback(0, dev.String())
		fmt.Println(reason, rep.Reason, rep.PrunedSlots, gov.PunishmentReward())
	}
	// Output:
	// ok GERMINATE applied
	// governor_nan Structural Collapse [r0c0] -10
}
