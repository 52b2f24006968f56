package aggregation

import (
	"errors"
	"math"
	"slices"
	"testing"

	"github.com/esper-go/esper/autograd"
	"github.com/esper-go/esper/leyline"
	"github.com/esper-go/esper/tensor"
)

func TestStageWeightIsTheIntendedRule(t *testing.T) {
	want := map[leyline.SeedStage]float64{
		leyline.StageUnknown: 1, leyline.StageDormant: 1, leyline.StageGerminated: 0.25,
		leyline.StageTraining: 1, leyline.StageBlending: 0.5, leyline.StageHolding: 1,
		leyline.StageFossilized: 1, leyline.StagePruned: 1, leyline.StageEmbargoed: 1,
		leyline.StageResetting: 1,
	}
	for s, w := range want {
		if got := StageWeight(s); got != w {
			t.Errorf("StageWeight(%v) = %v, want %v", s, got, w)
		}
	}
	for _, c := range []struct {
		stage leyline.SeedStage
		alpha float64
		want  float64
	}{
		{leyline.StageTraining, 1, 1},
		{leyline.StageTraining, 0, 0.5},
		{leyline.StageBlending, 0.5, 0.375},
		{leyline.StageGerminated, 0, 0.125},
		{leyline.StageGerminated, -1, 0.1}, // the floor
	} {
		if got := SeedWeight(c.stage, c.alpha); !near(got, c.want, 1e-15) {
			t.Errorf("SeedWeight(%v, %v) = %v, want %v", c.stage, c.alpha, got, c.want)
		}
	}
}

// perSeedFixture: host [2], s1 [2], host [1], s2 [1] → teacher owns
// elements 0,1,4; s1 2,3; s2 5.
func perSeedFixture(t *testing.T) (*Masks, [][]float32) {
	t.Helper()
	ps := []*autograd.Var{
		autograd.Param(tensor.Zeros(tensor.F32, 2)), autograd.Param(tensor.Zeros(tensor.F32, 2)),
		autograd.Param(tensor.Zeros(tensor.F32, 1)), autograd.Param(tensor.Zeros(tensor.F32, 1)),
	}
	m, err := SegmentMasks(ps, []string{"host", "s1", "host", "s2"})
	if err != nil {
		t.Fatal(err)
	}
	micro := [][]float32{{1, 2, 3, 4, 5, 6}, {1, 1, 1, 1, 1, 1}} // Σ = (2,3,4,5,6,7)
	return m, micro
}

var perSeedStates = map[string]SeedInfo{
	"s1": {Stage: leyline.StageTraining, Alpha: 0},
	"s2": {Stage: leyline.StageBlending, Alpha: 0.5},
}

func TestPerSeedWithoutAttributionKeepsTheTeacher(t *testing.T) {
	m, micro := perSeedFixture(t)
	var g SeedGrads
	if err := PerSeed(&g, micro, m, nil, 0, perSeedStates); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(g.Names, []string{TeacherID, "s1", "s2"}) {
		t.Fatalf("names %v", g.Names)
	}
	assertVec(t, "teacher", g.Flats[0], []float64{2, 3, 0, 0, 6, 0}, 0)
	assertVec(t, "s1", g.Flats[1], []float64{0, 0, 4, 5, 0, 0}, 0)
	assertVec(t, "s2", g.Flats[2], []float64{0, 0, 0, 0, 0, 7}, 0)
	if !slices.Equal(g.Weights, []float64{1, 0.5, 0.375}) {
		t.Fatalf("weights %v", g.Weights)
	}
	if g.Redistributed || g.TeacherNorm != 0 {
		t.Fatal("teacher redistributed without attribution")
	}
	// Attribution whose sum is not positive leaves the teacher too.
	if err := PerSeed(&g, micro, m, map[string]float64{"s1": 0}, 3, perSeedStates); err != nil {
		t.Fatal(err)
	}
	if g.Redistributed || len(g.Names) != 3 {
		t.Fatalf("zero attribution redistributed: %v", g.Names)
	}
}

func TestPerSeedRedistributesTheTeacher(t *testing.T) {
	m, micro := perSeedFixture(t)
	var g SeedGrads
	attrib := map[string]float64{"s1": 1, "s3": 3}
	if err := PerSeed(&g, micro, m, attrib, 2, perSeedStates); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(g.Names, []string{"s1", "s2", "s3"}) {
		t.Fatalf("names %v", g.Names)
	}
	// teacher T = (2,3,0,0,6,0); s1 += T/4, s3 = 3T/4 (created).
	assertVec(t, "s1", g.Flats[0], []float64{0.5, 0.75, 4, 5, 1.5, 0}, 1e-6)
	assertVec(t, "s2", g.Flats[1], []float64{0, 0, 0, 0, 0, 7}, 0)
	assertVec(t, "s3", g.Flats[2], []float64{1.5, 2.25, 0, 0, 4.5, 0}, 1e-6)
	if !g.Redistributed || !near(g.TeacherNorm, 7, 1e-12) {
		t.Fatalf("redistributed %v, teacher norm %v (want 7)", g.Redistributed, g.TeacherNorm)
	}
	if !slices.Equal(g.Weights, []float64{0.5, 0.375, 1}) {
		t.Fatalf("weights %v", g.Weights)
	}
	// The split is a partition of the summed gradient.
	for e := range 6 {
		s := 0.0
		for _, f := range g.Flats {
			s += float64(f[e])
		}
		if !near(s, float64(micro[0][e]+micro[1][e]), 1e-6) {
			t.Fatalf("element %d: parts sum to %v", e, s)
		}
	}

	// A second step reuses every vector.
	allocs := testing.AllocsPerRun(20, func() {
		if err := PerSeed(&g, micro, m, attrib, 2, perSeedStates); err != nil {
			t.Fatal(err)
		}
	})
	if allocs != 0 {
		t.Fatalf("PerSeed: %v allocations per step, want 0", allocs)
	}
}

func TestPerSeedSingleMicrobatch(t *testing.T) {
	m, micro := perSeedFixture(t)
	var g SeedGrads
	if err := PerSeed(&g, micro[:1], m, map[string]float64{"s2": 2}, 1, nil); err != nil {
		t.Fatal(err)
	}
	// Teacher (1,2,0,0,5,0) goes entirely to s2; s1 keeps its own part.
	assertVec(t, "s1", g.Flats[0], []float64{0, 0, 3, 4, 0, 0}, 0)
	assertVec(t, "s2", g.Flats[1], []float64{1, 2, 0, 0, 5, 6}, 0)
	if !near(g.TeacherNorm, math.Sqrt(30), 1e-12) {
		t.Fatalf("teacher norm %v", g.TeacherNorm)
	}
	if !slices.Equal(g.Weights, []float64{1, 1}) {
		t.Fatalf("weights without seed states %v", g.Weights)
	}
}

func TestPerSeedRejects(t *testing.T) {
	m, micro := perSeedFixture(t)
	var g SeedGrads
	cases := map[string]error{
		"nil dst":         PerSeed(nil, micro, m, nil, 0, nil),
		"nil masks":       PerSeed(&g, micro, nil, nil, 0, nil),
		"no gradients":    PerSeed(&g, nil, m, nil, 0, nil),
		"length":          PerSeed(&g, [][]float32{{1, 2}}, m, nil, 0, nil),
		"NaN attribution": PerSeed(&g, micro, m, map[string]float64{"s1": math.NaN()}, 1, nil),
		"teacher attrib":  PerSeed(&g, micro, m, map[string]float64{TeacherID: 1}, 1, nil),
		"NaN alpha":       PerSeed(&g, micro, m, nil, 0, map[string]SeedInfo{"s1": {Alpha: math.Inf(1)}}),
	}
	for name, err := range cases {
		if !errors.Is(err, ErrInvalid) {
			t.Errorf("%s: %v", name, err)
		}
	}
}
