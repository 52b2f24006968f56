package data_test

import (
	"bytes"
	"math"
	"runtime"
	"slices"
	"testing"
	"time"

	"github.com/esper-go/esper/data"
)

func TestSyntheticDeterministic(t *testing.T) {
	o := data.SyntheticOptions{Train: 500, Test: 100, Seed: 7}
	a, at, err := data.Synthetic(o)
	if err != nil {
		t.Fatal(err)
	}
	// The worker count must not matter.
	prev := runtime.GOMAXPROCS(1)
	b, bt, err := data.Synthetic(o)
	runtime.GOMAXPROCS(prev)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(f32Bytes(a.Images().F32()), f32Bytes(b.Images().F32())) || !slices.Equal(a.Labels().I64(), b.Labels().I64()) ||
		!bytes.Equal(f32Bytes(at.Images().F32()), f32Bytes(bt.Images().F32())) {
		t.Fatal("same seed, different bytes")
	}
	o.Seed = 8
	c, _, _ := data.Synthetic(o)
	if bytes.Equal(f32Bytes(a.Images().F32()), f32Bytes(c.Images().F32())) {
		t.Fatal("seeds 7 and 8 give the same images")
	}
	// A larger split extends a smaller one: image i depends on (seed,
	// split, i) only.
	big, _, _ := data.Synthetic(data.SyntheticOptions{Train: 800, Test: 100, Seed: 7})
	if !bytes.Equal(f32Bytes(a.Images().F32()), f32Bytes(big.Images().F32()[:500*784])) {
		t.Fatal("the first 500 of 800 images differ from a 500-image split")
	}
	// Train and test are different streams.
	if bytes.Equal(f32Bytes(a.Images().F32()[:784]), f32Bytes(at.Images().F32()[:784])) {
		t.Fatal("train and test image 0 coincide")
	}
}

func TestSyntheticShapeLabelsAndNormalisation(t *testing.T) {
	train, test, err := data.Synthetic(data.SyntheticOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if train.Len() != data.DefaultSyntheticTrain || test.Len() != data.DefaultSyntheticTest || train.Classes() != 10 {
		t.Fatalf("sizes %d/%d, classes %d", train.Len(), test.Len(), train.Classes())
	}
	if s := train.Shape(); !slices.Equal(s, []int{1, 28, 28}) {
		t.Fatalf("shape %v", s)
	}
	counts := make([]int, 10)
	for _, l := range train.Labels().I64() {
		counts[l]++
	}
	for c, n := range counts {
		if n != 600 {
			t.Errorf("class %d has %d images, want 600", c, n)
		}
	}
	var sum, sq float64
	xs := train.Images().F32()
	for _, v := range xs {
		sum += float64(v)
		sq += float64(v) * float64(v)
	}
	mean := sum / float64(len(xs))
	std := math.Sqrt(sq/float64(len(xs)) - mean*mean)
	t.Logf("normalised mean %.4f, std %.4f", mean, std)
	if math.Abs(mean) > 0.02 || math.Abs(std-1) > 0.02 {
		t.Errorf("normalised pixels have mean %.4f and std %.4f, want about 0 and 1", mean, std)
	}
}

func TestSyntheticOptionsErrors(t *testing.T) {
	for _, o := range []data.SyntheticOptions{
		{Train: -1},
		{Test: -5},
		{Train: 1 << 30},
		{Noise: math.NaN()},
		{Noise: 100},
	} {
		if _, _, err := data.Synthetic(o); err == nil {
			t.Errorf("options %+v accepted", o)
		}
	}
	// A negative noise switches the noise off.
	if _, _, err := data.Synthetic(data.SyntheticOptions{Train: 10, Test: 10, Noise: -1}); err != nil {
		t.Error(err)
	}
}

// Generation of the default task (7000 images) must stay well under a
// second; a loose bound, the benchmark has the figure.
func TestSyntheticFast(t *testing.T) {
	if raceEnabled || testing.Short() {
		t.Skip("timing")
	}
	start := time.Now()
	if _, _, err := data.Synthetic(data.SyntheticOptions{}); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("generating 7000 images took %v", d)
	}
}
