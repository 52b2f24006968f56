// Package recipe builds the standard Esper run from a few names and
// sizes: a task's datasets (LoadTask), the CNN host with a seed slot
// before each block's pool, on a device (NewModel), and the controller
// that grows it — Tamiyo's heuristic, a learned policy served by
// Tamiyo's inference service, or none (NewController). `esper train` and
// `esper eval` (package simic/evaluate) build their runs with it, so a
// program that embeds Esper gets the same runs:
//
//	train, test, _ := recipe.LoadTask("synthetic", "", 3000, 0, seed)
//	model, _ := recipe.NewModel(train, recipe.ModelOptions{Blocks: 2, BaseChannels: 4, Kernel: 1, Seed: seed})
//	ctl, _ := recipe.NewController(model, recipe.ControllerOptions{Kind: "heuristic"})
//	tr, _ := tolaria.NewTrainer(tolaria.TrainerOptions{Model: model, Controller: ctl, ...})
package recipe

import (
	_ "embed"
	"fmt"

	"github.com/esper-go/esper/data"
	"github.com/esper-go/esper/kasmina"
	"github.com/esper-go/esper/leyline"
	"github.com/esper-go/esper/nn"
	"github.com/esper-go/esper/tamiyo"
	"github.com/esper-go/esper/tensor"
	"github.com/esper-go/esper/tolaria"
)

// Tasks are the task names LoadTask knows.
var Tasks = []string{"synthetic", "fashion-mnist"}

// LoadTask returns the training and test datasets of a task:
// "synthetic" (the embedded task; seed picks the instance, trainSize and
// testSize its sizes, 0 for the defaults) or "fashion-mnist" (the IDX
// files in dataDir; the sizes and seed do not apply).
func LoadTask(task, dataDir string, trainSize, testSize int, seed uint64) (train, test data.Dataset, err error) {
	switch task {
	case "synthetic":
		tr, te, err := data.Synthetic(data.SyntheticOptions{Train: trainSize, Test: testSize, Seed: seed})
		return tr, te, err
	case "fashion-mnist":
		tr, te, err := data.OpenFashionMNIST(dataDir)
		return tr, te, err
	}
	return nil, nil, fmt.Errorf("recipe: unknown task %q (synthetic or fashion-mnist)", task)
}

// ModelOptions configure NewModel.
type ModelOptions struct {
	// Blocks, BaseChannels and Kernel shape the CNN host
	// (kasmina.CNNHostOptions).
	Blocks, BaseChannels, Kernel int
	// Seed initialises the host.
	Seed uint64
	// Sink receives the slots' events; nil means none.
	Sink kasmina.EventSink
	// Device is where the model is placed (the zero value is the CPU).
	Device tensor.Device
}

// NewModel builds the CNN host for train's input shape and class count
// (synthetic's 1 channel and 10 classes when train is nil), with one
// seed slot before each block's pool, as a kasmina.MorphogeneticModel on
// o.Device.
func NewModel(train data.Dataset, o ModelOptions) (*kasmina.MorphogeneticModel, error) {
	in, classes := 1, 10
	if train != nil {
		in, classes = train.Shape()[0], train.Classes()
	}
	host, err := kasmina.NewCNNHost(kasmina.CNNHostOptions{
		InChannels: in, Classes: classes, Blocks: o.Blocks, BaseChannels: o.BaseChannels,
		KernelSize: o.Kernel, RNG: tensor.NewRNG(o.Seed),
	})
	if err != nil {
		return nil, err
	}
	model, err := kasmina.NewMorphogeneticModel(host, kasmina.ModelOptions{Slots: kasmina.PrePoolSlots(host), Sink: o.Sink})
	if err != nil {
		return nil, err
	}
	if err := nn.To(model, o.Device); err != nil {
		return nil, err
	}
	return model, nil
}

// defaultPolicy is the shipped policy: trained by esper ppo on the
// default task's host (the impaired 2-block host of make demo, slots
// r0c0 and r0c1); how, in policies/README.md.
//
//go:embed policies/default.safetensors
var defaultPolicy []byte

// DefaultPolicyName names the shipped policy in messages.
const DefaultPolicyName = "the shipped policy (recipe/policies/default.safetensors)"

// ControllerOptions configure NewController.
type ControllerOptions struct {
	// Kind is "heuristic" (tamiyo.NewHeuristic), "gnn" (the policy in
	// Policy, served by tamiyo.Service) or "none" (no controller: the
	// host trains alone).
	Kind string
	// Policy is a gnn controller's policy checkpoint; empty means the
	// shipped policy (trained for the default task's 2-slot host).
	Policy string
	// Sample samples the policy's actions (seeded by Seed) instead of
	// taking the most likely one.
	Sample bool
	// Seed seeds the policy's sampling; Epochs is the run's length (the
	// policy's observation of time).
	Seed   uint64
	Epochs int
	// Sink receives the service's and the tracker's events; nil means
	// none.
	Sink tamiyo.EventSink
}

// PolicyError is NewController's and PolicyService's error about the
// policy file (unreadable, corrupt, or written for other slots); its
// message is the loader's.
type PolicyError struct{ Err error }

func (e *PolicyError) Error() string { return e.Err.Error() }
func (e *PolicyError) Unwrap() error { return e.Err }

// NewController returns the controller o names for model, wrapped in
// Tamiyo's signal tracker (tamiyo.NewTracked), or nil for "none". A gnn
// controller's policy is loaded for the model's slots and moved to the
// model's device; a policy trained for other slots is a *PolicyError.
func NewController(model *kasmina.MorphogeneticModel, o ControllerOptions) (tolaria.Controller, error) {
	var inner tamiyo.Controller
	switch o.Kind {
	case "none":
		return nil, nil
	case "heuristic":
		h, err := tamiyo.NewHeuristic(tamiyo.HeuristicOptions{Topology: model.Host().Topology()})
		if err != nil {
			return nil, err
		}
		inner = h
	case "gnn":
		svc, err := PolicyService(model, o)
		if err != nil {
			return nil, err
		}
		inner = svc
	default:
		return nil, fmt.Errorf("recipe: unknown controller %q (heuristic, gnn or none)", o.Kind)
	}
	return tamiyo.NewTracked(inner, tamiyo.TrackerOptions{})
}

// PolicyService loads o.Policy (the shipped policy when empty) for the
// model's slots (in the order the
// trainer presents them), places it on the model's device and wraps it
// in Tamiyo's inference service.
func PolicyService(model *kasmina.MorphogeneticModel, o ControllerOptions) (*tamiyo.Service, error) {
	ids := model.SlotIDs()
	leyline.SortSlotIDs(ids)
	slots, err := leyline.NewSlotConfig(ids...)
	if err != nil {
		return nil, err
	}
	var p *tamiyo.Policy
	if o.Policy == "" {
		hdr, err := tamiyo.ReadPolicyHeaderData(defaultPolicy, DefaultPolicyName)
		if err != nil {
			return nil, &PolicyError{err}
		}
		if p, err = tamiyo.LoadPolicyData(defaultPolicy, DefaultPolicyName, hdr.Options, slots); err != nil {
			return nil, &PolicyError{err}
		}
	} else {
		hdr, err := tamiyo.ReadPolicyHeader(o.Policy)
		if err != nil {
			return nil, &PolicyError{err}
		}
		if p, err = tamiyo.LoadPolicy(o.Policy, hdr.Options, slots); err != nil {
			return nil, &PolicyError{err}
		}
	}
	dev, err := nn.Device(model)
	if err != nil {
		return nil, err
	}
	if !dev.IsCPU() {
		if err := p.To(dev); err != nil {
			return nil, err
		}
	}
	return tamiyo.NewService(tamiyo.ServiceOptions{
		Policy: p, Layers: tamiyo.BlockLayers(model.Host().Blocks()),
		Deterministic: !o.Sample, Seed: o.Seed, MaxEpochs: o.Epochs, Sink: o.Sink,
	})
}
