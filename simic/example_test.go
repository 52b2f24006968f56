package simic_test

import (
	"fmt"

	"github.com/esper-go/esper/simic"
)

// GAE over one episode cut by a time limit: the last step bootstraps
// from V(s_T) = 1 instead of treating the end as terminal.
func ExampleGAE() {
	steps := []simic.GAEStep{
		{Reward: 1, Value: 0.5},
		{Reward: 1, Value: 0.5, Truncated: true, Bootstrap: 1},
	}
	ret := make([]float64, len(steps))
	adv, err := simic.GAE(steps, 0.9, 0.5, nil, ret, nil)
	if err != nil {
		panic(err)
	}
	fmt.Printf("advantages %.3f, returns %.3f\n", adv, ret)
	// Output: advantages [1.580 1.400], returns [2.080 1.900]
}

// A CartPole episode under a simple hand-written controller lasts until
// the 500-step time limit.
func ExampleCartPole() {
	env := simic.NewCartPole(1)
	obs, _ := env.Reset()
	total := 0.0
	for {
		a := 0
		if obs[2]+0.5*obs[3] > 0 {
			a = 1
		}
		r, err := env.Step([]int{a})
		if err != nil {
			panic(err)
		}
		total += r.Reward
		obs = r.Obs
		if r.Terminated || r.Truncated {
			fmt.Println("return", total, "truncated", r.Truncated)
			return
		}
	}
	// Output: return 500 truncated true
}
