package aggregation

import (
	"strconv"

	"github.com/esper-go/esper/kernels"
	"github.com/esper-go/esper/tensor"
)

// SeedTensors is SeedGrads on a device: the per-seed split of one
// optimizer step's gradient as tensors on the gradient's device, filled
// by PerSeedTensors, the input of TensorCombiner and
// SeedMetricsAccumulator.RecordTensors. Its tensors are owned by the
// SeedTensors and reused by the next PerSeedTensors call (on the same
// device, dtype and length), so keep one per trainer.
type SeedTensors struct {
	// Names lists the participants, as SeedGrads.Names.
	Names []string
	// Flats holds one flat gradient per name: a contiguous vector of
	// Masks.Total elements on the microbatches' device, in their dtype.
	Flats []*tensor.Tensor
	// Weights holds one aggregation weight per name, as
	// SeedGrads.Weights (host numbers: they come from the seeds' stages
	// and alphas, not from the gradient).
	Weights []float64
	// Redistributed reports whether the teacher's gradient was split over
	// the seeds by attribution.
	Redistributed bool
	// TeacherNorm is a one-element F64 tensor on the device holding the
	// L2 norm of the teacher's gradient when it was redistributed (for
	// SeedMetricsAccumulator.RecordTeacherNormTensor), else nil. Reading
	// it on the host is a host sync; the accumulator does not.
	TeacherNorm *tensor.Tensor

	bufs    []*tensor.Tensor // backing vectors, reused by position
	teacher *tensor.Tensor   // Σ microbatches on the teacher's ranges (several microbatches)
	tnorms  *tensor.Tensor   // F64 [ranges]: the teacher's per-range norms
	tnorm   *tensor.Tensor   // F64 [1]
	extra   []string
	ys, xs  []*tensor.Tensor // ForeachAxpy / ForeachNorm operand lists
}

// PerSeedTensors is PerSeed on the microbatches' device: the same split
// (participants, masked sums, teacher redistribution by attribution,
// weights) computed by the device's backend, with no host read. micro
// holds the step's microbatch flat gradients, contiguous tensors of
// masks.Total() elements of one float dtype on one device (usually
// buffers from GradientBufferPool.AcquireOn filled by
// GradsToFlatTensor); dst's vectors are made on that device in that
// dtype.
//
// Per participant it costs a Fill and one Copy per owned range (plus an
// Add per further microbatch); the teacher's norm is one ForeachNorm over
// its ranges and the redistribution one ForeachAxpy per seed with
// attribution. The masked sums are bitwise those of PerSeed (the same
// float32 additions); the redistribution rounds frac·teacher to the
// dtype before adding (PerSeed adds in float64 and rounds once), and the
// teacher norm sums its squares in another order, so those agree with
// PerSeed within float32 rounding.
//
// It fails as PerSeed does, and also when the microbatches mix devices or
// dtypes, are not contiguous, or live on a device without a backend.
func PerSeedTensors(dst *SeedTensors, micro []*tensor.Tensor, masks *Masks, attribSums map[string]float64, attribUses int, seeds map[string]SeedInfo) error {
	const op = "PerSeedTensors"
	if dst == nil {
		return invalid(op, "nil destination")
	}
	if masks == nil {
		return invalid(op, "nil masks")
	}
	if len(micro) == 0 {
		return invalid(op, "no microbatch gradients")
	}
	total := masks.Total()
	for i, f := range micro {
		if err := checkVector(op, "microbatch gradient "+strconv.Itoa(i), f, total); err != nil {
			return err
		}
		if f.Device() != micro[0].Device() || f.DType() != micro[0].DType() {
			return invalid(op, "microbatch gradient %d is %v on %v, gradient 0 %v on %v", i, f.DType(), f.Device(), micro[0].DType(), micro[0].Device())
		}
	}
	dev, dt := micro[0].Device(), micro[0].DType()
	be, err := backendFor(op, dev)
	if err != nil {
		return err
	}
	redistribute, attribTotal, err := planSplit(op, &dst.Names, &dst.extra, masks, attribSums, attribUses, seeds)
	if err != nil {
		return err
	}
	if err := dst.grow(op, len(dst.Names), dev, dt, total); err != nil {
		return err
	}

	// Masked sums.
	dst.Flats = dst.Flats[:0]
	for i, name := range dst.Names {
		buf := dst.bufs[i]
		maskedSumTensor(be, buf, micro, masks.ranges[name])
		dst.Flats = append(dst.Flats, buf)
	}

	// Teacher redistribution.
	dst.Redistributed, dst.TeacherNorm = redistribute, nil
	if redistribute {
		ranges := masks.ranges[TeacherID]
		src := micro[0]
		if len(micro) > 1 {
			if dst.teacher == nil || dst.teacher.Device() != dev || dst.teacher.DType() != dt || dst.teacher.Numel() != total {
				if dst.teacher, err = emptyOn(op, dev, dt, total); err != nil {
					return err
				}
			}
			maskedSumTensor(be, dst.teacher, micro, ranges)
			src = dst.teacher
		}
		if err := dst.teacherNorm(op, be, src, ranges); err != nil {
			return err
		}
		for i, name := range dst.Names {
			a, ok := attribSums[name]
			if !ok {
				continue
			}
			dst.ys, dst.xs = dst.ys[:0], dst.xs[:0]
			for _, r := range ranges {
				if r.Len() > 0 {
					dst.ys = append(dst.ys, segment(dst.Flats[i], r.Start, r.Len()))
					dst.xs = append(dst.xs, segment(src, r.Start, r.Len()))
				}
			}
			if len(dst.ys) > 0 {
				be.ForeachAxpy(dst.ys, dst.xs, a/attribTotal)
			}
		}
		clear(dst.ys)
		clear(dst.xs)
	}
	dst.Weights = splitWeights(dst.Weights[:0], dst.Names, seeds)
	return nil
}

// grow makes sure dst has k vectors of total elements of dt on dev.
func (dst *SeedTensors) grow(op string, k int, dev tensor.Device, dt tensor.DType, total int) error {
	for len(dst.bufs) < k {
		dst.bufs = append(dst.bufs, nil)
	}
	for i := range k {
		b := dst.bufs[i]
		if b != nil && b.Device() == dev && b.DType() == dt && b.Numel() == total {
			continue
		}
		var err error
		if dst.bufs[i], err = emptyOn(op, dev, dt, total); err != nil {
			return err
		}
	}
	return nil
}

// teacherNorm writes ‖src on ranges‖ into dst.tnorm (F64 [1]) and points
// TeacherNorm at it: the per-range norms in one ForeachNorm, then the
// root of the sum of their squares.
func (dst *SeedTensors) teacherNorm(op string, be kernels.Backend, src *tensor.Tensor, ranges []Range) error {
	dev := src.Device()
	if dst.tnorm == nil || dst.tnorm.Device() != dev {
		var err error
		if dst.tnorm, err = emptyOn(op, dev, tensor.F64, 1); err != nil {
			return err
		}
	}
	if len(ranges) == 0 {
		be.Fill(dst.tnorm, 0)
		dst.TeacherNorm = dst.tnorm
		return nil
	}
	if dst.tnorms == nil || dst.tnorms.Device() != dev || dst.tnorms.Numel() != len(ranges) {
		var err error
		if dst.tnorms, err = emptyOn(op, dev, tensor.F64, len(ranges)); err != nil {
			return err
		}
	}
	dst.xs = dst.xs[:0]
	for _, r := range ranges {
		dst.xs = append(dst.xs, segment(src, r.Start, r.Len()))
	}
	be.ForeachNorm(dst.tnorms, dst.xs)
	clear(dst.xs)
	be.Unary(kernels.Square, dst.tnorms, dst.tnorms)
	be.Reduce(kernels.Sum, dst.tnorm, dst.tnorms, axis0)
	be.Unary(kernels.Sqrt, dst.tnorm, dst.tnorm)
	dst.TeacherNorm = dst.tnorm
	return nil
}

// maskedSumTensor writes buf = Σ_m micro[m] on ranges and 0 elsewhere,
// with the backend (the float32 additions of maskedSum, in its order).
func maskedSumTensor(be kernels.Backend, buf *tensor.Tensor, micro []*tensor.Tensor, ranges []Range) {
	be.Fill(buf, 0)
	for _, r := range ranges {
		if r.Len() == 0 {
			continue
		}
		seg := segment(buf, r.Start, r.Len())
		be.Copy(seg, segment(micro[0], r.Start, r.Len()))
		for _, f := range micro[1:] {
			be.Binary(kernels.Add, seg, seg, segment(f, r.Start, r.Len()))
		}
	}
}
