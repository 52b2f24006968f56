package bench_test

import (
	"fmt"

	"github.com/esper-go/esper/bench"
)

// ExampleRunW6 times the engine's GEMM in rounds and runs something
// after each round, here only counting; esper bench runs the PyTorch
// peer there, so that both sides see the same phases of a shared
// machine. The pooled figures cover every round.
func ExampleRunW6() {
	after := 0
	r, err := bench.RunW6(bench.W6Options{
		Size: 64, Reps: 4, Warmup: 1, Rounds: 3,
		AfterRound: func(round int) error {
			after++ // e.g. bench.RunPeer(...) with the same size and reps
			return nil
		},
	})
	if err != nil {
		panic(err)
	}
	fmt.Println("rounds:", len(r.EsperRounds), "run after each:", after)
	fmt.Println("products pooled:", r.Esper.Latency.N, "gonum's:", r.Gonum.Latency.N)
	fmt.Println("products right:", r.Esper.MaxRelErr < 1e-5 && r.Gonum.MaxRelErr < 1e-5)
	// Output:
	// rounds: 3 run after each: 3
	// products pooled: 12 gonum's: 4
	// products right: true
}
