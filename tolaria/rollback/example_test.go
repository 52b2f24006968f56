package rollback_test

import (
	"context"
	"fmt"
	"os"

	"github.com/esper-go/esper/nn"
	"github.com/esper-go/esper/optim"
	"github.com/esper-go/esper/tensor"
	"github.com/esper-go/esper/tolaria/rollback"
)

// A trainer snapshots the model and optimizer into the fast tier every
// step and checkpoints every epoch; after a failure it restores the
// nearest snapshot, or the last checkpoint when memory has none.
func ExampleTwoTier() {
	dir, err := os.MkdirTemp("", "rollback-example")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(dir)

	model := nn.MustMLP(tensor.NewRNG(1), nn.MLPOptions{Sizes: []int{2, 3}})
	opt, err := optim.NewSGD(model.Parameters(), optim.SGDOptions{LR: 0.1, Momentum: 0.9})
	if err != nil {
		panic(err)
	}
	fast, err := rollback.NewFastCache(rollback.FastOptions{CapMB: 1})
	if err != nil {
		panic(err)
	}
	store, err := rollback.Open(dir, rollback.StoreOptions{Keep: 2})
	if err != nil {
		panic(err)
	}
	tt := &rollback.TwoTier{Fast: fast, Store: store}

	snap := rollback.State{Meta: rollback.Meta{Epoch: 0, GlobalStep: 40}}
	snap.SetModule(model)
	snap.SetOptimizer(opt)
	if err := fast.Put(40, snap); err != nil {
		panic(err)
	}
	if err := store.Write(0, snap); err != nil {
		panic(err)
	}

	for _, failedAt := range []int64{57, 12} {
		res, s, err := tt.Restore(context.Background(), failedAt)
		if err != nil {
			panic(err)
		}
		if err := s.ApplyModule(model); err != nil {
			panic(err)
		}
		if err := s.ApplyOptimizer(opt); err != nil {
			panic(err)
		}
		fmt.Printf("failure at step %d: fast=%v hit=%v, back to step %d\n", failedAt, res.UsedFast, res.Hit, s.Meta.GlobalStep)
	}
	for _, m := range tt.Metrics()[3:5] {
		fmt.Printf("%s %v\n", m.Name, m.Value)
	}
	// Output:
	// failure at step 57: fast=true hit=true, back to step 40
	// failure at step 12: fast=false hit=true, back to step 40
	// tolaria.rollback.fast_hits_total 1
	// tolaria.rollback.fast_misses_total 1
}
