package aggregation

import (
	"math/rand/v2"
	"strconv"

	"github.com/esper-go/esper/kernels"
	"github.com/esper-go/esper/tensor"
)

// TensorCombiner is Combiner on a device: the same hardened PCGrad pass
// and sum (esper-reference §3.1.2) over flat gradients that are tensors,
// computed by the backend of their device with no host read at all. The
// zero value is ready to use; its device scratch (one vector of the
// gradients' length and a few one-element tensors) is kept between calls
// and remade when the device, dtype, length or number of gradients
// changes. A TensorCombiner is not safe for concurrent use.
//
// Every decision of the pass stays on the device: each inner product
// a·b and squared norm ‖b‖² is a one-element tensor (a Mul and a Reduce),
// the conflict test a·b < 0 a Bool tensor, and the projection
// coefficient a·b/(‖b‖²+1e-12) is masked to zero by Where unless the pair
// conflicts and ‖b‖² > 1e-12 — so the projection g ← g − coef·b is
// applied to every ordered pair, as an exact no-op (g − 0·b) where the
// host pass skips it. The conflicting pairs are marked in a k×k F64
// tensor and counted by a Reduce into the one-element conflicts tensor
// CombineInto returns.
//
// Results. On every device the launches are the same, so the CPU, sim and
// any backend that computes like the CPU's give bitwise the same result
// for the same inputs and rng state. Against Combiner (the host path,
// float64 arithmetic with one rounding per element) the inner products
// round their products to the gradients' dtype and their sum once, and
// the coefficient and the projection round in the dtype, so the results
// agree within float32 rounding (1e-5 relative in this package's
// tests) and the conflict counts agree except for inner products within
// rounding of zero. A NaN inner product counts no conflict and projects
// nothing, as on the host; an infinite gradient, which the host pass
// skips, turns the vector projected against it to NaN (0·∞), and the
// trainer skips such a step anyway.
type TensorCombiner struct {
	dev  tensor.Device
	dt   tensor.DType
	n, k int

	cur       []*tensor.Tensor // flats as vectors
	prod      *tensor.Tensor   // [n] products, then coef·b
	ab, coef  *tensor.Tensor   // [1] in dt
	zero      *tensor.Tensor   // [1] 0 in dt
	neg       *tensor.Tensor   // [1] Bool: ab < 0
	sq, den   []*tensor.Tensor // per gradient [1]: ‖g‖², ‖g‖²+ε
	big       []*tensor.Tensor // per gradient [1] Bool: ‖g‖² > ε
	pairs     *tensor.Tensor   // F64 [k·k], pairs[lo·k+hi] = 1 once in conflict
	pairV     []*tensor.Tensor // its elements
	one64     *tensor.Tensor   // F64 [1] 1
	conflicts *tensor.Tensor   // F64 [1], the result
	order     []int
	ys, xs    []*tensor.Tensor // ForeachAxpy operands, one each
}

// CombineInto combines flat gradients into out on their device, as
// Combiner.CombineInto does on the host:
//
//   - with usePCGrad and at least two gradients, each gradient in an order
//     drawn from rng (the same draw as Combiner's, so one rng state gives
//     both the same order) is projected against every other one, in that
//     order, whenever their inner product is negative;
//   - out receives Σ flats when weights is nil, else Σ w_k·flat_k / Σ w_k.
//
// Unlike Combiner, the projection works in place: it overwrites flats
// (the per-seed vectors of a SeedTensors are scratch, so the trainer
// loses nothing; copy them first to keep them). With one gradient, out
// receives a copy and nothing is projected.
//
// flats are contiguous F32 or F64 tensors of one dtype, one length and
// one device; out is a contiguous tensor of that dtype, length and
// device that shares no storage with them. The returned tensor is a
// one-element F64 tensor on the device holding the number of distinct
// unordered pairs found in conflict (0 without PCGrad); it belongs to the
// combiner and is overwritten by its next call. Nothing is read on the
// host: a step costs no host sync (read the count with an explicit copy,
// or hand it to SeedMetricsAccumulator.RecordCombineTensor, which sums it
// on the device).
//
// Errors (wrapping ErrInvalid) are Combine's — no gradients, lengths that
// differ, bad weights, a nil rng when a projection pass is needed — and
// gradients or out of another dtype, device or layout, or an out that
// overlaps a gradient.
func (c *TensorCombiner) CombineInto(out *tensor.Tensor, flats []*tensor.Tensor, usePCGrad bool, weights []float64, rng *rand.Rand) (*tensor.Tensor, error) {
	const op = "TensorCombiner.CombineInto"
	if len(flats) == 0 {
		return nil, invalid(op, "no gradients to combine")
	}
	if flats[0] == nil {
		return nil, invalid(op, "gradient 0 is nil")
	}
	n, dev, dt := flats[0].Numel(), flats[0].Device(), flats[0].DType()
	if dt != tensor.F32 && dt != tensor.F64 {
		return nil, invalid(op, "gradients have dtype %v, want f32 or f64", dt)
	}
	for i, f := range flats {
		if f == nil {
			return nil, invalid(op, "gradient %d is nil", i)
		}
		if f.Numel() != n {
			return nil, invalid(op, "gradient %d has %d elements, gradient 0 has %d", i, f.Numel(), n)
		}
		if err := checkVector(op, "gradient "+strconv.Itoa(i), f, n); err != nil {
			return nil, err
		}
		if f.Device() != dev || f.DType() != dt {
			return nil, invalid(op, "gradient %d is %v on %v, gradient 0 %v on %v", i, f.DType(), f.Device(), dt, dev)
		}
		for j := range i {
			if f.Storage() == flats[j].Storage() {
				return nil, invalid(op, "gradients %d and %d share storage", j, i)
			}
		}
	}
	if err := checkVector(op, "output", out, n); err != nil {
		return nil, err
	}
	if out.Device() != dev || out.DType() != dt {
		return nil, invalid(op, "output is %v on %v, the gradients %v on %v", out.DType(), out.Device(), dt, dev)
	}
	for i, f := range flats {
		if f.Storage() == out.Storage() {
			return nil, invalid(op, "output shares storage with gradient %d", i)
		}
	}
	wsum, err := checkWeights(op, len(flats), weights)
	if err != nil {
		return nil, err
	}
	k := len(flats)
	if usePCGrad && k > 1 && rng == nil {
		return nil, invalid(op, "PCGrad needs an rng for its projection order")
	}
	be, err := backendFor(op, dev)
	if err != nil {
		return nil, err
	}
	if err := c.scratch(op, be, dev, dt, n, k); err != nil {
		return nil, err
	}
	c.cur = c.cur[:0]
	for _, f := range flats {
		c.cur = append(c.cur, vectorView(f))
	}
	outV := vectorView(out)
	be.Fill(c.conflicts, 0)
	if k == 1 {
		be.Copy(outV, c.cur[0])
	} else {
		if usePCGrad {
			c.project(be, rng)
		}
		c.sum(be, outV, weights, wsum)
	}
	clear(c.cur) // drop references to the caller's gradients
	return c.conflicts, nil
}

// scratch makes the combiner's device tensors for k gradients of n
// elements of dt on dev, unless it has them.
func (c *TensorCombiner) scratch(op string, be kernels.Backend, dev tensor.Device, dt tensor.DType, n, k int) error {
	if c.prod != nil && c.dev == dev && c.dt == dt && c.n == n && c.k == k {
		return nil
	}
	fresh := TensorCombiner{dev: dev, dt: dt, n: n, k: k, order: c.order, cur: c.cur}
	var err error
	alloc := func(dt tensor.DType, v float64, shape ...int) *tensor.Tensor {
		if err != nil {
			return nil
		}
		var t *tensor.Tensor
		t, err = filledOn(op, be, dev, dt, v, shape...)
		return t
	}
	fresh.prod = alloc(dt, 0, n)
	fresh.ab = alloc(dt, 0, 1)
	fresh.coef = alloc(dt, 0, 1)
	fresh.zero = alloc(dt, 0, 1)
	fresh.neg = alloc(tensor.Bool, 0, 1)
	sq := alloc(dt, 0, k)
	den := alloc(dt, 0, k)
	big := alloc(tensor.Bool, 0, k)
	fresh.pairs = alloc(tensor.F64, 0, k*k)
	fresh.one64 = alloc(tensor.F64, 1, 1)
	fresh.conflicts = alloc(tensor.F64, 0, 1)
	if err != nil {
		return err
	}
	fresh.sq, fresh.den, fresh.big = elemViews(sq), elemViews(den), elemViews(big)
	fresh.pairV = elemViews(fresh.pairs)
	fresh.ys, fresh.xs = make([]*tensor.Tensor, 1), make([]*tensor.Tensor, 1)
	*c = fresh
	return nil
}

// project runs the PCGrad pass over c.cur in place and leaves the number
// of distinct conflicting pairs in c.conflicts.
func (c *TensorCombiner) project(be kernels.Backend, rng *rand.Rand) {
	k := len(c.cur)
	c.order = projectionOrder(c.order, k, rng)
	be.Fill(c.pairs, 0)
	for j := range k {
		c.norm(be, j)
	}
	for _, i := range c.order {
		g := c.cur[i]
		for _, j := range c.order {
			if j == i {
				continue
			}
			b := c.cur[j]
			dotInto(be, c.ab, g, b, c.prod)
			be.BinaryScalar(kernels.Lt, c.neg, c.ab, 0, false)
			// pairs[lo·k+hi] = 1 once the pair conflicts.
			p := c.pairV[min(i, j)*k+max(i, j)]
			be.Where(p, c.neg, c.one64, p)
			// coef = ab/(‖b‖²+ε) where ab < 0 and ‖b‖² > ε, else 0.
			be.Binary(kernels.Div, c.coef, c.ab, c.den[j])
			be.Where(c.coef, c.neg, c.coef, c.zero)
			be.Where(c.coef, c.big[j], c.coef, c.zero)
			// g ← g − coef·b.
			be.Binary(kernels.Mul, c.prod, b, c.coef)
			be.Binary(kernels.Sub, g, g, c.prod)
		}
		c.norm(be, i) // g may have changed: later pairs project onto it
	}
	be.Reduce(kernels.Sum, c.conflicts, c.pairs, axis0)
}

// norm refreshes gradient j's ‖g‖², ‖g‖²+ε and ‖g‖² > ε.
func (c *TensorCombiner) norm(be kernels.Backend, j int) {
	g := c.cur[j]
	dotInto(be, c.sq[j], g, g, c.prod)
	be.BinaryScalar(kernels.Add, c.den[j], c.sq[j], pcgradEps, false)
	be.BinaryScalar(kernels.Gt, c.big[j], c.sq[j], pcgradEps, false)
}

// sum writes Σ_k w_k·cur_k / wsum (Σ_k cur_k when weights is nil) into
// out, adding the gradients in index order.
func (c *TensorCombiner) sum(be kernels.Backend, out *tensor.Tensor, weights []float64, wsum float64) {
	if weights == nil {
		be.Copy(out, c.cur[0])
		for _, f := range c.cur[1:] {
			be.Binary(kernels.Add, out, out, f)
		}
		return
	}
	be.BinaryScalar(kernels.Mul, out, c.cur[0], weights[0]/wsum, false)
	c.ys[0] = out
	for k, f := range c.cur[1:] {
		c.xs[0] = f
		be.ForeachAxpy(c.ys, c.xs, weights[k+1]/wsum)
	}
	c.ys[0], c.xs[0] = nil, nil
}
