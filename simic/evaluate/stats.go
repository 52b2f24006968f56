package evaluate

import (
	"math"
	"math/rand/v2"
	"slices"
)

// DefaultBootstrapSamples is the number of resamples of a paired
// bootstrap interval.
const DefaultBootstrapSamples = 10000

// PairStats compares two controllers over the seeds both ran: per seed
// the difference A − B of a figure (final validation accuracy in points,
// for the table), its mean, a paired bootstrap 95 % interval of the
// mean, and how many seeds A won, tied and lost.
type PairStats struct {
	A, B string
	// N is the number of seeds paired.
	N int
	// MeanDiff is the mean of the per-seed differences A − B.
	MeanDiff float64
	// Lo and Hi bound the paired bootstrap 95 % interval of MeanDiff:
	// the 2.5th and 97.5th percentiles of the means of resamples of the
	// per-seed differences (seeds drawn with replacement).
	Lo, Hi float64
	// Wins, Ties and Losses count the seeds where A's figure was
	// higher, equal (within 1e-9) or lower.
	Wins, Ties, Losses int
}

// Paired returns the statistics of the per-seed differences a[i] − b[i]
// (the two slices pair by index; they must have the same length, at
// least 1). The interval comes from samples resamples (DefaultBootstrap
// Samples when ≤ 0) drawn from an RNG seeded with seed, so that a report
// is reproducible.
func Paired(a, b []float64, samples int, seed uint64) PairStats {
	if len(a) != len(b) || len(a) == 0 {
		panic("evaluate.Paired: the figures must pair one to one, at least one pair")
	}
	d := make([]float64, len(a))
	var st PairStats
	st.N = len(a)
	for i := range a {
		d[i] = a[i] - b[i]
		switch {
		case math.Abs(d[i]) <= 1e-9:
			st.Ties++
		case d[i] > 0:
			st.Wins++
		default:
			st.Losses++
		}
	}
	st.MeanDiff = mean(d)
	st.Lo, st.Hi = bootstrapInterval(d, samples, seed)
	return st
}

// bootstrapInterval is the percentile interval (2.5 %, 97.5 %) of the
// mean of d under resampling with replacement.
func bootstrapInterval(d []float64, samples int, seed uint64) (lo, hi float64) {
	if samples <= 0 {
		samples = DefaultBootstrapSamples
	}
	rng := rand.New(rand.NewPCG(seed, 0xb007))
	means := make([]float64, samples)
	n := len(d)
	for s := range means {
		var sum float64
		for range n {
			sum += d[rng.IntN(n)]
		}
		means[s] = sum / float64(n)
	}
	slices.Sort(means)
	return percentile(means, 0.025), percentile(means, 0.975)
}

// percentile is the q-quantile of sorted xs with linear interpolation
// between the two nearest ranks.
func percentile(xs []float64, q float64) float64 {
	if len(xs) == 1 {
		return xs[0]
	}
	pos := q * float64(len(xs)-1)
	i := int(pos)
	if i >= len(xs)-1 {
		return xs[len(xs)-1]
	}
	f := pos - float64(i)
	return xs[i] + f*(xs[i+1]-xs[i])
}

func mean(xs []float64) float64 {
	var s float64
	for _, x := range xs {
		s += x
	}
	return s / float64(len(xs))
}
