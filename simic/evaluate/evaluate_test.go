package evaluate

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/esper-go/esper/leyline"
	"github.com/esper-go/esper/tamiyo"
)

// TestPairedHandComputed checks the paired statistics on differences
// whose bootstrap distribution is known by hand.
func TestPairedHandComputed(t *testing.T) {
	// Differences {0, 2}: a resample's mean is 0, 1 or 2 with
	// probabilities 1/4, 1/2, 1/4, so the 2.5th percentile is 0 and the
	// 97.5th is 2; one win, one tie, mean 1.
	st := Paired([]float64{80, 72}, []float64{80, 70}, 20000, 7)
	assert.Equal(t, 2, st.N)
	assert.Equal(t, 1.0, st.MeanDiff)
	assert.Equal(t, 0.0, st.Lo)
	assert.Equal(t, 2.0, st.Hi)
	assert.Equal(t, [3]int{1, 1, 0}, [3]int{st.Wins, st.Ties, st.Losses})

	// A constant difference has a point interval.
	st = Paired([]float64{3, 4, 5}, []float64{1.5, 2.5, 3.5}, 1000, 1)
	assert.InDelta(t, 1.5, st.MeanDiff, 1e-12)
	assert.InDelta(t, 1.5, st.Lo, 1e-12)
	assert.InDelta(t, 1.5, st.Hi, 1e-12)
	assert.Equal(t, 3, st.Wins)

	// Pairing is by index: {+2, −2, 0} has mean 0 and one of each.
	st = Paired([]float64{80, 70, 75}, []float64{78, 72, 75}, 1000, 1)
	assert.Equal(t, 0.0, st.MeanDiff)
	assert.Equal(t, [3]int{1, 1, 1}, [3]int{st.Wins, st.Ties, st.Losses})
	assert.Less(t, st.Lo, 0.0)
	assert.Greater(t, st.Hi, 0.0)

	// The same seed gives the same interval.
	a := Paired([]float64{1, 5, 2, 8}, []float64{0, 1, 3, 2}, 500, 9)
	b := Paired([]float64{1, 5, 2, 8}, []float64{0, 1, 3, 2}, 500, 9)
	assert.Equal(t, a, b)
	assert.LessOrEqual(t, a.Lo, a.MeanDiff)
	assert.GreaterOrEqual(t, a.Hi, a.MeanDiff)
}

func TestPercentile(t *testing.T) {
	assert.Equal(t, 2.5, percentile([]float64{0, 10}, 0.25))
	assert.Equal(t, 10.0, percentile([]float64{0, 10}, 1))
	assert.Equal(t, 4.0, percentile([]float64{4}, 0.975))
	assert.Equal(t, 2.0, percentile([]float64{1, 2, 3}, 0.5))
}

func TestParseSeeds(t *testing.T) {
	s, err := ParseSeeds("101-103,7, 9-9")
	require.NoError(t, err)
	assert.Equal(t, []uint64{101, 102, 103, 7, 9}, s)
	for _, bad := range []string{"", " , ", "120-101", "1-x", "a", "1,1", "3-5,4", "1-20000", "-3"} {
		_, err := ParseSeeds(bad)
		assert.Error(t, err, bad)
	}
}

func TestParseControllers(t *testing.T) {
	cs, err := ParseControllers("heuristic,gnn:p.safetensors,none,gnn-sample:p.safetensors")
	require.NoError(t, err)
	assert.Equal(t, []Controller{
		{Name: "heuristic", Kind: "heuristic"},
		{Name: "gnn:p.safetensors", Kind: "gnn", Policy: "p.safetensors"},
		{Name: "none", Kind: "none"},
		{Name: "gnn-sample:p.safetensors", Kind: "gnn", Policy: "p.safetensors", Sample: true},
	}, cs)
	cs, err = ParseControllers("gnn")
	require.NoError(t, err)
	assert.Equal(t, []Controller{{Name: "gnn", Kind: "gnn"}}, cs, "a bare gnn is the shipped policy")
	for _, bad := range []string{"", "gnn:", "rules", "heuristic:x", "none,none", "gnn,gnn"} {
		_, err := ParseControllers(bad)
		assert.Error(t, err, bad)
	}
}

// tiny is a run short enough for a test.
func tiny() RunConfig {
	r := DefaultRun()
	r.TrainSize, r.TestSize, r.Epochs = 512, 100, 12
	return r
}

// TestCheckRefusesBadPolicies: a missing policy file and a policy saved
// for another slot count are refused before any training.
func TestCheckRefusesBadPolicies(t *testing.T) {
	o := Options{Controllers: []Controller{{Name: "gnn:missing", Kind: "gnn", Policy: filepath.Join(t.TempDir(), "missing.safetensors")}},
		Seeds: []uint64{1}, Run: tiny()}
	err := o.Check()
	require.Error(t, err)
	assert.Contains(t, err.Error(), "missing.safetensors")

	p, err := tamiyo.NewPolicy(tamiyo.PolicyOptions{Hidden: 8, GATHidden: 8, GATHeads: 1, HeadHidden: 8})
	require.NoError(t, err)
	slots, err := leyline.NewSlotConfig("r0c0", "r0c1", "r0c2")
	require.NoError(t, err)
	path := filepath.Join(t.TempDir(), "three.safetensors")
	require.NoError(t, tamiyo.SavePolicy(path, p, slots))
	o.Controllers = []Controller{{Name: "gnn:three", Kind: "gnn", Policy: path}}
	err = o.Check()
	require.Error(t, err, "a 3-slot policy on a 2-slot host")
	assert.Contains(t, err.Error(), "gnn:three")

	o.Seeds = nil
	assert.Error(t, o.Check())
	o.Seeds, o.Run.Task = []uint64{1}, "cifar"
	assert.Error(t, o.Check())
}

// TestRunPairsSeeds trains two controllers on two seeds for a few epochs
// and checks the report's bookkeeping: every run present, the host
// alone adds nothing, the pair's differences are those of the runs, and
// a seed's host-alone run does not depend on what ran beside it.
func TestRunPairsSeeds(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: trains four small runs")
	}
	var calls int
	o := Options{
		Controllers: []Controller{{Name: "heuristic", Kind: "heuristic"}, {Name: "none", Kind: "none"}},
		Seeds:       []uint64{5, 6}, Run: tiny(), BootstrapSamples: 200,
		Progress: func(done, total int, r Result) { calls++; assert.Equal(t, 4, total) },
	}
	rep, err := Run(context.Background(), o)
	require.NoError(t, err)
	assert.Equal(t, 4, calls)
	require.Len(t, rep.Results, 4)
	for i, r := range rep.Results {
		assert.Equal(t, o.Seeds[i/2], r.Seed)
		assert.Equal(t, o.Controllers[i%2].Name, r.Controller)
		assert.Greater(t, r.HostParams, 0)
		assert.Equal(t, r.Params-r.HostParams, r.Added)
	}
	assert.Equal(t, 0, rep.Results[1].Added, "the host alone adds nothing")
	assert.Equal(t, 0, rep.Results[1].Germinated)
	assert.GreaterOrEqual(t, rep.Results[0].Germinated, 1, "the heuristic germinates within 12 epochs")
	assert.Greater(t, rep.Results[0].Added, 0)
	require.NotNil(t, rep.Summaries[0].GainPerKParam)
	assert.Nil(t, rep.Summaries[1].GainPerKParam)
	require.Len(t, rep.Pairs, 1)
	p := rep.Pairs[0]
	want := (rep.Results[0].Accuracy - rep.Results[1].Accuracy + rep.Results[2].Accuracy - rep.Results[3].Accuracy) / 2
	assert.InDelta(t, want, p.MeanDiff, 1e-9)
	assert.Equal(t, 2, p.Wins+p.Ties+p.Losses)

	alone, err := RunOne(context.Background(), o.Run, o.Controllers[1], 6)
	require.NoError(t, err)
	assert.Equal(t, rep.Results[3].Accuracy, alone.Accuracy, "a run is a function of its seed")
	assert.Equal(t, rep.Results[3].Loss, alone.Loss)

	var buf bytes.Buffer
	require.NoError(t, rep.WriteTable(&buf))
	assert.Contains(t, buf.String(), "heuristic − none")
	path := filepath.Join(t.TempDir(), "eval.json")
	require.NoError(t, rep.WriteJSON(path))
	raw, err := os.ReadFile(path)
	require.NoError(t, err)
	var back map[string]any
	require.NoError(t, json.Unmarshal(raw, &back))
	assert.Equal(t, []any{5.0, 6.0}, back["seeds"])
	assert.Len(t, back["results"], 4)
}
