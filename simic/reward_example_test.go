package simic_test

import (
	"fmt"

	"github.com/esper-go/esper/leyline"
	"github.com/esper-go/esper/simic"
)

// The SHAPED reward of a WAIT while a measured seed trains: the terms are
// reported separately and add up to the total.
func ExampleRewarder_Compute() {
	r, err := simic.NewRewarder(simic.RewardOptions{}) // SHAPED, reference defaults
	if err != nil {
		panic(err)
	}
	rw, err := r.Compute(simic.RewardInputs{
		Op: leyline.OpWait,
		Seed: &simic.RewardSeed{
			Stage: leyline.StageTraining, EpochsInStage: 3, SeedAgeEpochs: 12,
			Contribution: 4, ContributionMeasured: true,
			TotalImprovement: 3, TotalImprovementMeasured: true,
		},
		ValAcc: 62, AccAtGermination: 60, AccAtGerminationKnown: true,
		Epoch: 20, MaxEpochs: 150, HostParams: 10000, NumActiveSeeds: 1,
	})
	if err != nil {
		panic(err)
	}
	fmt.Printf("attribution %.5f pbrs %.5f total %.5f\n", rw.Terms.Attribution, rw.Terms.PBRS, rw.Total)
	// Output:
	// attribution 2.34667 pbrs 0.08565 total 2.43232
}
