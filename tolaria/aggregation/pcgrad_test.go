package aggregation

import (
	"errors"
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/esper-go/esper/tensor"
)

// §7 G1 check: opposite gradients conflict once and the result equals
// one of the inputs, which one depending on the random order.
func TestCombineOppositeGradients(t *testing.T) {
	seen := map[float32]bool{}
	for seed := range uint64(32) {
		g1, g2 := []float32{1, 0}, []float32{-1, 0}
		out, conflicts, err := Combine([][]float32{g1, g2}, true, nil, tensor.NewRNG(seed))
		if err != nil {
			t.Fatal(err)
		}
		if conflicts != 1 {
			t.Fatalf("seed %d: %d conflicts, want 1", seed, conflicts)
		}
		if !(near(float64(out[0]), 1, 1e-6) || near(float64(out[0]), -1, 1e-6)) || out[1] != 0 {
			t.Fatalf("seed %d: result %v, want (1,0) or (-1,0)", seed, out)
		}
		seen[float32(math.Round(float64(out[0])))] = true
		if g1[0] != 1 || g2[0] != -1 {
			t.Fatal("Combine modified its inputs")
		}
	}
	if !seen[1] || !seen[-1] {
		t.Fatalf("over 32 rng seeds the result was always %v: the order is not random", seen)
	}
}

func TestCombineOrthogonalGradients(t *testing.T) {
	for seed := range uint64(8) {
		out, conflicts, err := Combine([][]float32{{1, 0}, {0, 1}}, true, nil, tensor.NewRNG(seed))
		if err != nil {
			t.Fatal(err)
		}
		if conflicts != 0 {
			t.Fatalf("%d conflicts, want 0", conflicts)
		}
		assertVec(t, "sum", out, []float64{1, 1}, 0)
	}
}

func TestCombineWeighted(t *testing.T) {
	ones := []float32{1, 1, 1, 1, 1}
	twos := []float32{2, 2, 2, 2, 2}
	for _, pc := range []bool{false, true} {
		out, conflicts, err := Combine([][]float32{ones, twos}, pc, []float64{1, 3}, tensor.NewRNG(1))
		if err != nil {
			t.Fatal(err)
		}
		if conflicts != 0 {
			t.Fatalf("%d conflicts", conflicts)
		}
		assertVec(t, "weighted", out, []float64{1.75, 1.75, 1.75, 1.75, 1.75}, 0)
	}
}

func TestCombineRejects(t *testing.T) {
	rng := tensor.NewRNG(1)
	a, b := []float32{1, 2}, []float32{3, 4}
	cases := []struct {
		name    string
		flats   [][]float32
		weights []float64
		rng     *rand.Rand
		want    string
	}{
		{"empty", nil, nil, rng, "no gradients"},
		{"shape mismatch", [][]float32{a, {1, 2, 3}}, nil, rng, "elements"},
		{"NaN weight", [][]float32{a, b}, []float64{1, math.NaN()}, rng, "NaN"},
		{"Inf weight", [][]float32{a, b}, []float64{math.Inf(1), 1}, rng, "Inf"},
		{"weight count", [][]float32{a, b}, []float64{1}, rng, "1 weights for 2"},
		{"empty weights", [][]float32{a, b}, []float64{}, rng, "0 weights"},
		{"zero weight sum", [][]float32{a, b}, []float64{1, -1}, rng, "close to zero"},
		{"tiny weight sum", [][]float32{a, b}, []float64{1e-13, 0}, rng, "close to zero"},
		{"single NaN weight", [][]float32{a}, []float64{math.NaN()}, rng, "NaN"},
		{"nil rng", [][]float32{a, b}, nil, nil, "rng"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, _, err := Combine(c.flats, true, c.weights, c.rng)
			if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("Combine: %v, want ErrInvalid containing %q", err, c.want)
			}
			var comb Combiner
			if len(c.flats) > 0 {
				_, err = comb.CombineInto(make([]float32, len(c.flats[0])), c.flats, true, c.weights, c.rng)
				if !errors.Is(err, ErrInvalid) {
					t.Fatalf("CombineInto: %v", err)
				}
			}
		})
	}
	var comb Combiner
	if _, err := comb.CombineInto(make([]float32, 3), [][]float32{a, b}, false, nil, nil); !errors.Is(err, ErrInvalid) {
		t.Fatalf("CombineInto with a short output: %v", err)
	}
}

// With one participant nothing is projected or copied, whatever the
// weights, and no rng is needed.
func TestCombineSingleSeedFastPath(t *testing.T) {
	g := []float32{3, -1, 2}
	out, conflicts, err := Combine([][]float32{g}, true, []float64{0.25}, nil)
	if err != nil || conflicts != 0 {
		t.Fatalf("conflicts %d, err %v", conflicts, err)
	}
	if &out[0] != &g[0] {
		t.Fatal("single-seed result is a copy")
	}
	var c Combiner
	dst := make([]float32, 3)
	if _, err := c.CombineInto(dst, [][]float32{g}, true, nil, nil); err != nil {
		t.Fatal(err)
	}
	assertVec(t, "copy", dst, []float64{3, -1, 2}, 0)
	if _, err := c.CombineInto(g, [][]float32{g}, true, nil, nil); err != nil {
		t.Fatal(err)
	}
	if allocs := testing.AllocsPerRun(20, func() { _, _, _ = c.Combine([][]float32{g}, true, nil, nil) }); allocs > 0 {
		// The [][]float32 literal may live on the stack; Combine itself
		// must not allocate.
		t.Fatalf("single-seed Combine: %v allocations", allocs)
	}
}

// refCombine is the hardened algorithm of §3.1.2 written as plainly as
// the Python: full copies, pcgrad recomputing its inner products, the
// same permutation draw as the Combiner.
func refCombine(flats [][]float32, weights []float64, rng *rand.Rand) ([]float64, int) {
	k := len(flats)
	adj := make([][]float32, k)
	for i, f := range flats {
		adj[i] = append([]float32(nil), f...)
	}
	order := make([]int, k)
	for i := range order {
		order[i] = i
	}
	for i := k - 1; i > 0; i-- {
		j := rng.IntN(i + 1)
		order[i], order[j] = order[j], order[i]
	}
	pcgrad := func(a, b []float32) []float32 {
		ab, bb := 0.0, 0.0
		for i := range a {
			ab += float64(a[i]) * float64(b[i])
			bb += float64(b[i]) * float64(b[i])
		}
		if ab >= 0 || bb <= 1e-12 {
			return a
		}
		out := make([]float32, len(a))
		for i := range a {
			out[i] = float32(float64(a[i]) - ab/(bb+1e-12)*float64(b[i]))
		}
		return out
	}
	type pair struct{ a, b int }
	pairs := map[pair]bool{}
	for _, i := range order {
		g := adj[i]
		for _, j := range order {
			if j == i {
				continue
			}
			if dot(g, adj[j]) < 0 {
				pairs[pair{min(i, j), max(i, j)}] = true
				g = pcgrad(g, adj[j])
			}
		}
		adj[i] = g
	}
	out := make([]float64, len(flats[0]))
	wsum := 0.0
	for k, f := range adj {
		w := 1.0
		if weights != nil {
			w = weights[k]
			wsum += w
		}
		for i, v := range f {
			out[i] += w * float64(v)
		}
	}
	if weights != nil {
		for i := range out {
			out[i] /= wsum
		}
	}
	return out, len(pairs)
}

func TestCombineMatchesReference(t *testing.T) {
	rng := tensor.NewRNG(42)
	for trial := range 60 {
		k := 2 + trial%5
		n := 1 + rng.IntN(1500)
		flats := make([][]float32, k)
		base := randVec(rng, n)
		for i := range flats {
			flats[i] = randVec(rng, n)
			// Mix in ±base so that pairs conflict often but not always.
			s := float32(rng.Float64()*4 - 2)
			for e := range flats[i] {
				flats[i][e] += s * base[e]
			}
		}
		var weights []float64
		if trial%2 == 1 {
			weights = make([]float64, k)
			for i := range weights {
				weights[i] = 0.1 + rng.Float64()
			}
		}
		seed := uint64(trial)
		want, wantConflicts := refCombine(flats, weights, tensor.NewRNG(seed))
		var c Combiner
		got, conflicts, err := c.Combine(flats, true, weights, tensor.NewRNG(seed))
		if err != nil {
			t.Fatal(err)
		}
		if conflicts != wantConflicts {
			t.Fatalf("trial %d (%d seeds): %d conflicts, reference %d", trial, k, conflicts, wantConflicts)
		}
		for i := range got {
			if !near(float64(got[i]), want[i], 1e-5*(1+math.Abs(want[i]))) {
				t.Fatalf("trial %d: [%d] = %v, reference %v", trial, i, got[i], want[i])
			}
		}
		if wantConflicts > 0 && trial%5 == 0 {
			// Reusing the Combiner (its scratch now holds old data) gives
			// the same answer.
			again, _, _ := c.Combine(flats, true, weights, tensor.NewRNG(seed))
			for i := range again {
				if again[i] != got[i] {
					t.Fatal("a reused Combiner gave a different result")
				}
			}
		}
	}
}

// After the pass no projected pair still conflicts with the gradient it
// was projected against (two gradients: exact PCGrad geometry).
func TestCombineTwoGradientsRemovesConflict(t *testing.T) {
	a, b := []float32{2, 1, 0}, []float32{-1, 1, 1}
	// a·b = -1: both are projected. Whatever the order, the first one
	// becomes orthogonal to the original second.
	for seed := range uint64(4) {
		out, conflicts, err := Combine([][]float32{a, b}, true, nil, tensor.NewRNG(seed))
		if err != nil || conflicts != 1 {
			t.Fatalf("conflicts %d err %v", conflicts, err)
		}
		// Order a first: a' = a + b/3 = (5/3, 4/3, 1/3), a'·b = 0 → b kept.
		// Order b first: b' = b + a/5 = (-3/5, 6/5, 1), b'·a = 0 → a kept.
		s1 := []float64{5.0/3 - 1, 4.0/3 + 1, 1.0/3 + 1}
		s2 := []float64{2 - 3.0/5, 1 + 6.0/5, 1}
		ok1, ok2 := true, true
		for i := range out {
			ok1 = ok1 && near(float64(out[i]), s1[i], 1e-6)
			ok2 = ok2 && near(float64(out[i]), s2[i], 1e-6)
		}
		if !ok1 && !ok2 {
			t.Fatalf("seed %d: %v, want %v or %v", seed, out, s1, s2)
		}
	}
}

func TestCombineWithoutPCGradSumsOnly(t *testing.T) {
	out, conflicts, err := Combine([][]float32{{1, 0}, {-1, 0}, {0, 2}}, false, nil, nil)
	if err != nil || conflicts != 0 {
		t.Fatalf("conflicts %d err %v", conflicts, err)
	}
	assertVec(t, "sum", out, []float64{0, 2}, 0)
}

func TestCombineIntoMayReuseAnInput(t *testing.T) {
	a, b := []float32{1, 0, 3}, []float32{-1, 2, 1}
	want, _ := refCombine([][]float32{a, b}, []float64{2, 1}, tensor.NewRNG(9))
	var c Combiner
	if _, err := c.CombineInto(a, [][]float32{a, b}, true, []float64{2, 1}, tensor.NewRNG(9)); err != nil {
		t.Fatal(err)
	}
	assertVec(t, "in place", a, want, 1e-6)
}

func TestCombinerAllocatesNothing(t *testing.T) {
	rng := tensor.NewRNG(3)
	const n = 10_000
	flats := [][]float32{randVec(rng, n), randVec(rng, n), randVec(rng, n), randVec(rng, n)}
	for i := range flats[1] {
		flats[1][i] = -flats[0][i] + 0.1*flats[1][i] // conflicts, so the projection path runs
	}
	weights := []float64{1, 0.5, 0.25, 1}
	out := make([]float32, n)
	var c Combiner
	prng := tensor.NewRNG(4)
	conflicts, err := c.CombineInto(out, flats, true, weights, prng)
	if err != nil || conflicts == 0 {
		t.Fatalf("warm-up: conflicts %d err %v", conflicts, err)
	}
	allocs := testing.AllocsPerRun(20, func() {
		if _, err := c.CombineInto(out, flats, true, weights, prng); err != nil {
			t.Fatal(err)
		}
		if _, _, err := c.Combine(flats, true, weights, prng); err != nil {
			t.Fatal(err)
		}
	})
	if allocs != 0 {
		t.Fatalf("Combiner: %v allocations per step, want 0", allocs)
	}
}

func TestConflictRate(t *testing.T) {
	for _, c := range []struct {
		conflicts, participants int
		want                    float64
	}{{0, 0, 0}, {0, 1, 0}, {1, 2, 1}, {2, 3, 1}, {1, 4, 1.0 / 3}} {
		if got := ConflictRate(c.conflicts, c.participants); got != c.want {
			t.Fatalf("ConflictRate(%d, %d) = %v, want %v", c.conflicts, c.participants, got, c.want)
		}
	}
}
