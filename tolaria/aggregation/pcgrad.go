package aggregation

import (
	"math"
	"math/rand/v2"
)

// pcgradEps guards PCGrad's projection: a gradient whose squared norm is
// at most this is not projected onto, and it is added to the denominator
// (G1 tolaria/aggregation.py pcgrad, 1e-12). The weighted combination
// rejects weight sums of at most this magnitude (G1 aggregate_weighted).
const pcgradEps = 1e-12

// combineBlock is the number of elements the weighted sum accumulates in
// float64 at once (a 4 KiB stack array).
const combineBlock = 512

// Combine merges flat gradients into one, exactly as the hardened G1
// combine_flat_grads (esper-reference §3.1.2):
//
//   - with usePCGrad and at least two gradients, each gradient in an order
//     drawn from rng is projected against every other one, in the same
//     order, whenever their inner product is negative (the other may
//     already have been projected earlier in the pass); conflicts counts
//     the distinct unordered pairs that were found in conflict;
//   - the result is Σ flats when weights is nil, else Σ w_k·flat_k / Σ w_k.
//
// With fewer than two gradients nothing is projected and nothing copied:
// the result is flats[0] itself. Otherwise it is a new slice. Combine
// allocates its result and scratch each call; the trainer's per-step path
// is Combiner, which reuses them.
//
// Errors (wrapping ErrInvalid): no gradients, gradients of different
// lengths, weights non-nil with a length other than len(flats), a NaN or
// infinite weight, |Σ w| ≤ 1e-12, and a nil rng when a projection pass is
// needed.
func Combine(flats [][]float32, usePCGrad bool, weights []float64, rng *rand.Rand) (out []float32, conflicts int, err error) {
	var c Combiner
	return c.Combine(flats, usePCGrad, weights, rng)
}

// ConflictRate is the per-step grad_conflict_rate of §3.1.2: conflicts
// per neighbour, conflicts / max(1, participants−1), and 0 with fewer
// than two participants.
func ConflictRate(conflicts, participants int) float64 {
	if participants <= 1 {
		return 0
	}
	return float64(conflicts) / float64(max(1, participants-1))
}

// Combiner is Combine with reusable buffers: after its first call for a
// given number and length of gradients it allocates nothing. The zero
// value is ready to use. A Combiner is not safe for concurrent use.
type Combiner struct {
	out     []float32   // Combine's result buffer
	scratch [][]float32 // projected copies, made only on a first conflict
	cur     [][]float32 // cur[i] is flats[i] or scratch[i] once projected
	order   []int
	pairs   []bool // n×n, pairs[min·n+max] marks a counted conflict
}

// Combine is the package-level Combine without its allocations. The
// result is the Combiner's own buffer, valid until its next call, or
// flats[0] with a single gradient.
func (c *Combiner) Combine(flats [][]float32, usePCGrad bool, weights []float64, rng *rand.Rand) ([]float32, int, error) {
	wsum, err := checkCombine(flats, weights)
	if err != nil {
		return nil, 0, err
	}
	if len(flats) == 1 {
		return flats[0], 0, nil
	}
	n := len(flats[0])
	if cap(c.out) < n {
		c.out = make([]float32, n)
	}
	out := c.out[:n]
	conflicts, err := c.combineInto(out, flats, usePCGrad, weights, wsum, rng)
	if err != nil {
		return nil, 0, err
	}
	return out, conflicts, nil
}

// CombineInto is Combine writing the result into out, which must have the
// gradients' length. out may be one of flats (the combination reads every
// input element before it writes that element) but must not partially
// overlap one. With a single gradient the result is a plain copy (none
// when out is flats[0]).
func (c *Combiner) CombineInto(out []float32, flats [][]float32, usePCGrad bool, weights []float64, rng *rand.Rand) (int, error) {
	wsum, err := checkCombine(flats, weights)
	if err != nil {
		return 0, err
	}
	if len(out) != len(flats[0]) {
		return 0, invalid("Combine", "output has %d elements, the gradients %d", len(out), len(flats[0]))
	}
	if len(flats) == 1 {
		if len(out) > 0 && &out[0] != &flats[0][0] {
			copy(out, flats[0])
		}
		return 0, nil
	}
	return c.combineInto(out, flats, usePCGrad, weights, wsum, rng)
}

// checkCombine validates Combine's input and returns Σ weights (0 when
// weights is nil).
func checkCombine(flats [][]float32, weights []float64) (float64, error) {
	const op = "Combine"
	if len(flats) == 0 {
		return 0, invalid(op, "no gradients to combine")
	}
	n := len(flats[0])
	for i, f := range flats {
		if len(f) != n {
			return 0, invalid(op, "gradient %d has %d elements, gradient 0 has %d", i, len(f), n)
		}
	}
	return checkWeights(op, len(flats), weights)
}

// checkWeights validates the weights of k gradients (nil, or k finite
// numbers whose sum is not within 1e-12 of zero) and returns their sum
// (0 when weights is nil).
func checkWeights(op string, k int, weights []float64) (float64, error) {
	if weights == nil {
		return 0, nil
	}
	if len(weights) != k {
		return 0, invalid(op, "%d weights for %d gradients", len(weights), k)
	}
	sum := 0.0
	for i, w := range weights {
		if !finite(w) {
			return 0, invalid(op, "weight %d is %v", i, w)
		}
		sum += w
	}
	if math.Abs(sum) <= pcgradEps {
		return 0, invalid(op, "weights sum to %g, too close to zero to normalise", sum)
	}
	return sum, nil
}

// combineInto runs the projection pass (when asked) and the weighted sum
// for two or more validated gradients.
func (c *Combiner) combineInto(out []float32, flats [][]float32, usePCGrad bool, weights []float64, wsum float64, rng *rand.Rand) (int, error) {
	c.cur = append(c.cur[:0], flats...)
	conflicts := 0
	if usePCGrad {
		if rng == nil {
			return 0, invalid("Combine", "PCGrad needs an rng for its projection order")
		}
		conflicts = c.project(rng)
	}
	sumInto(out, c.cur, weights, wsum)
	clear(c.cur) // drop references to the caller's gradients
	return conflicts, nil
}

// project runs the hardened PCGrad pass over c.cur in place and returns
// the number of distinct unordered conflicting pairs. A gradient is
// copied into scratch only when it is first projected, so a step without
// conflicts copies nothing.
func (c *Combiner) project(rng *rand.Rand) int {
	k := len(c.cur)
	n := len(c.cur[0])
	c.order = projectionOrder(c.order, k, rng)
	if cap(c.pairs) < k*k {
		c.pairs = make([]bool, k*k)
	}
	c.pairs = c.pairs[:k*k]
	clear(c.pairs)
	for len(c.scratch) < k {
		c.scratch = append(c.scratch, nil)
	}

	conflicts := 0
	for _, i := range c.order {
		projected := false
		for _, j := range c.order {
			if j == i {
				continue
			}
			g, b := c.cur[i], c.cur[j]
			ab, bb := dotNorm(g, b)
			if !(ab < 0) {
				continue
			}
			lo, hi := min(i, j), max(i, j)
			if !c.pairs[lo*k+hi] {
				c.pairs[lo*k+hi] = true
				conflicts++
			}
			if bb <= pcgradEps {
				continue
			}
			coef := ab / (bb + pcgradEps)
			if !projected {
				if cap(c.scratch[i]) < n {
					c.scratch[i] = make([]float32, n)
				}
				dst := c.scratch[i][:n]
				subScaled(dst, g, b, coef)
				c.cur[i] = dst
				projected = true
				continue
			}
			subScaled(g, g, b, coef)
		}
	}
	return conflicts
}

// sumInto writes Σ_k w_k·flats_k / wsum into out (Σ_k flats_k when
// weights is nil), accumulating each element in float64. Two to four
// gradients (the usual seed counts) take a single fused pass; more go
// through a float64 block accumulator.
func sumInto(out []float32, flats [][]float32, weights []float64, wsum float64) {
	var w [4]float64
	scale := 1.0
	if weights == nil {
		w = [4]float64{1, 1, 1, 1}
	} else {
		copy(w[:], weights)
		scale = 1 / wsum
	}
	n := len(out)
	switch len(flats) {
	case 2:
		a, b := flats[0][:n], flats[1][:n]
		for i := range out {
			out[i] = float32((w[0]*float64(a[i]) + w[1]*float64(b[i])) * scale)
		}
		return
	case 3:
		a, b, c := flats[0][:n], flats[1][:n], flats[2][:n]
		for i := range out {
			out[i] = float32((w[0]*float64(a[i]) + w[1]*float64(b[i]) + w[2]*float64(c[i])) * scale)
		}
		return
	case 4:
		a, b, c, d := flats[0][:n], flats[1][:n], flats[2][:n], flats[3][:n]
		for i := range out {
			out[i] = float32((w[0]*float64(a[i]) + w[1]*float64(b[i]) + w[2]*float64(c[i]) + w[3]*float64(d[i])) * scale)
		}
		return
	}
	var acc [combineBlock]float64
	for s := 0; s < n; s += combineBlock {
		e := min(s+combineBlock, n)
		blk := acc[:e-s]
		clear(blk)
		for k, f := range flats {
			wk := 1.0
			if weights != nil {
				wk = weights[k]
			}
			seg := f[s:e]
			seg = seg[:len(blk)]
			for i, v := range seg {
				blk[i] += wk * float64(v)
			}
		}
		o := out[s:e]
		o = o[:len(blk)]
		for i, v := range blk {
			o[i] = float32(v * scale)
		}
	}
}

// projectionOrder returns the order of a PCGrad pass over k gradients in
// order (reused): a permutation of 0…k−1 drawn from rng by Fisher–Yates
// (rng.Shuffle would need a closure; this keeps the pass
// allocation-free). Combiner and TensorCombiner draw it alike, so one rng
// state gives both the same order.
func projectionOrder(order []int, k int, rng *rand.Rand) []int {
	order = order[:0]
	for i := range k {
		order = append(order, i)
	}
	for i := k - 1; i > 0; i-- {
		j := rng.IntN(i + 1)
		order[i], order[j] = order[j], order[i]
	}
	return order
}
