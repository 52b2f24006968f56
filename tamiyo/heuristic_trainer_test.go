package tamiyo_test

import (
	"context"
	"testing"

	"github.com/esper-go/esper/data"
	"github.com/esper-go/esper/internal/testdevice"
	"github.com/esper-go/esper/kasmina"
	"github.com/esper-go/esper/leyline"
	"github.com/esper-go/esper/nn"
	"github.com/esper-go/esper/optim"
	"github.com/esper-go/esper/tamiyo"
	"github.com/esper-go/esper/tensor"
	"github.com/esper-go/esper/tolaria"
)

// TestNewHeuristicGrowsUnderTrainer: tamiyo.NewHeuristic passed as the
// trainer's controller, on a small version of `make demo` (the impaired
// 1×1 host on the synthetic task, lr 0.05 annealed), germinates a seed
// once the host has stalled. It used to wait for the whole run: the
// trainer passes raw figures, and nothing derived the plateau and
// stabilisation the heuristic reads.
func TestNewHeuristicGrowsUnderTrainer(t *testing.T) {
	const epochs = 10
	train, val, err := data.Synthetic(data.SyntheticOptions{Train: 512, Test: 256, Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	tl, err := data.NewLoader(train, data.LoaderOptions{BatchSize: 64, Shuffle: true, Seed: 1, DropLast: true})
	if err != nil {
		t.Fatal(err)
	}
	defer tl.Close()
	vl, err := data.NewLoader(val, data.LoaderOptions{BatchSize: 256})
	if err != nil {
		t.Fatal(err)
	}
	defer vl.Close()
	host := kasmina.MustCNNHost(kasmina.CNNHostOptions{InChannels: 1, Classes: train.Classes(), Blocks: 2, BaseChannels: 4,
		KernelSize: 1, RNG: tensor.NewRNG(1)})
	model, err := kasmina.NewMorphogeneticModel(host, kasmina.ModelOptions{Slots: []string{"r0c0", "r0c1"}})
	if err != nil {
		t.Fatal(err)
	}
	if err := nn.To(model, testdevice.Device(t)); err != nil { // the trainer runs where its model is
		t.Fatal(err)
	}
	h, err := tamiyo.NewHeuristic(tamiyo.HeuristicOptions{})
	if err != nil {
		t.Fatal(err)
	}
	tr, err := tolaria.NewTrainer(tolaria.TrainerOptions{Model: model, Train: tl, Val: vl, Epochs: epochs,
		HostLR: 0.05, HostSchedule: optim.Cosine{Base: 0.05, TMax: epochs}, Capture: true, Controller: h})
	if err != nil {
		t.Fatal(err)
	}
	sum, err := tr.Fit(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var ops []leyline.LifecycleOp
	for _, r := range sum.Epochs {
		ops = append(ops, r.Decision.Op)
		t.Logf("epoch %d: val acc %.2f%%, %v", r.Epoch+1, r.ValAccuracy, r.Decision)
	}
	if sum.Germinated == 0 || h.GerminationCount() == 0 {
		t.Fatalf("no germination in %d epochs (decisions %v)", epochs, ops)
	}
}
