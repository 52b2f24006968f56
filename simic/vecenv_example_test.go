package simic_test

import (
	"fmt"

	"github.com/esper-go/esper/internal/testdevice"
	"github.com/esper-go/esper/leyline"
	"github.com/esper-go/esper/simic"
)

// Esper environments are SplitSteppers: VecEnv.Step runs each one's step
// up to its epoch's read, reads all of them together (one host sync per
// device), then finishes each. Here three environments wait at every
// lock-step step, and their epochs cost one batched read.
func ExampleVecEnv_Step_batchedReads() {
	dev := testdevice.Must()
	data, err := simic.NewSyntheticData(simic.SyntheticDataOptions{Train: 64, Val: 32, Batch: 32, Seed: 1, Device: dev})
	if err != nil {
		panic(err)
	}
	defer data.Close()
	var envs []*simic.EsperEnv
	vec, err := simic.NewVecEnv(3, func(i int) (simic.Env[simic.TamiyoObs], error) {
		e, err := simic.NewEsperEnv(simic.EsperEnvOptions{Data: data, Index: i, Seed: 2, MaxEpochs: 4, BaseChannels: 2, Device: dev})
		envs = append(envs, e)
		return e, err
	})
	if err != nil {
		panic(err)
	}
	defer func() {
		for _, e := range envs {
			e.Close()
		}
	}()
	_, split := any(envs[0]).(simic.SplitStepper[simic.TamiyoObs])
	_, splitResets := any(envs[0]).(simic.SplitResetter[simic.TamiyoObs])
	fmt.Println("split steps:", split, "split resets:", splitResets)

	wait := make([][]int, 3)
	for i := range wait {
		wait[i] = make([]int, leyline.NumActionHeads)
		wait[i][leyline.HeadOp] = int(leyline.OpWait)
	}
	for k := 0; k < 4; k++ {
		before := vec.ReadSyncs()
		step, err := vec.Step(wait)
		if err != nil {
			panic(err)
		}
		// One read for the three epochs on sim or a GPU (at the fourth
		// step, the first epochs of the episodes that step starts); none
		// on the CPU, which never waits.
		fmt.Println("step", k, "rewards", len(step.Rewards), "episodes ended", len(step.Episodes), "at most one read:", vec.ReadSyncs()-before <= 1)
	}
	// Output:
	// split steps: true split resets: true
	// step 0 rewards 3 episodes ended 0 at most one read: true
	// step 1 rewards 3 episodes ended 0 at most one read: true
	// step 2 rewards 3 episodes ended 0 at most one read: true
	// step 3 rewards 3 episodes ended 3 at most one read: true
}
