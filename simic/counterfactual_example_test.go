package simic_test

import (
	"fmt"

	"github.com/esper-go/esper/simic"
)

// A fused-validation caller asks the plan for its alpha masks, evaluates
// them in one batched pass and hands the accuracies back.
func ExampleCounterfactualPlan_Compute() {
	e, err := simic.NewCounterfactualEngine(simic.CounterfactualOptions{Seed: 1})
	if err != nil {
		panic(err)
	}
	plan, err := e.Plan([]string{"r0c0", "r0c1", "r0c2"})
	if err != nil {
		panic(err)
	}
	// Stand-in for one validation pass over every configuration: the host
	// alone scores 60, seeds add 2, 1 and 0.5 points, and the first two
	// together add 1 more.
	acc := make([]float64, len(plan.Configs))
	for k, mask := range plan.Masks() {
		acc[k] = 60
		for i, w := range []float64{2, 1, 0.5} {
			if mask[i] {
				acc[k] += w
			}
		}
		if mask[0] && mask[1] {
			acc[k]++
		}
	}
	res, err := plan.Compute(acc)
	if err != nil {
		panic(err)
	}
	fmt.Println(res.Strategy, len(plan.Configs), "configurations")
	for i, id := range res.SeedIDs {
		fmt.Printf("%s shapley %.2f removal %.2f interaction sum %.2f\n", id, res.Shapley[i].Mean, res.Removal[i], res.InteractionSum[i])
	}
	// Output:
	// full_factorial 8 configurations
	// r0c0 shapley 2.50 removal 3.00 interaction sum 1.00
	// r0c1 shapley 1.50 removal 2.00 interaction sum 1.00
	// r0c2 shapley 0.50 removal 0.50 interaction sum 0.00
}
