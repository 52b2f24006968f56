package aggregation

import (
	"math"
	"slices"

	"github.com/esper-go/esper/leyline"
)

// minSeedWeight is the floor of a seed's aggregation weight (G1
// _resolve_seed_weights: max(0.1, …)).
const minSeedWeight = 0.1

// SeedInfo is what the seed path needs to know about a live seed: its
// lifecycle stage and current blend alpha (from Kasmina's seed-state
// export).
type SeedInfo struct {
	Stage leyline.SeedStage
	Alpha float64
}

// StageWeight is the base aggregation weight of a seed in stage s: 0.5
// while BLENDING, 0.25 just GERMINATED, 1.0 otherwise (TRAINING, HOLDING
// and FOSSILIZED are the "active" stages of the first generation).
//
// This is the reference's intended rule, not its behaviour: G1 keyed the
// table by SEED_STAGE_ACTIVE and SEED_STAGE_GERMINATING, which its enum
// lacks, so both keys collapsed to 0 and UNKNOWN seeds got 0.25 while
// germinated ones got 1.0 (esper-reference §3.1.2, "Quirk").
func StageWeight(s leyline.SeedStage) float64 {
	switch s {
	case leyline.StageBlending:
		return 0.5
	case leyline.StageGerminated:
		return 0.25
	default:
		return 1.0
	}
}

// SeedWeight is a seed's aggregation weight,
// max(0.1, StageWeight(stage)·(0.5 + 0.5·alpha)).
func SeedWeight(stage leyline.SeedStage, alpha float64) float64 {
	return math.Max(minSeedWeight, StageWeight(stage)*(0.5+0.5*alpha))
}

// SeedGrads is the per-seed split of one optimizer step's gradient, the
// input of Combine and SeedMetricsAccumulator.Record. PerSeed fills it;
// its vectors are owned by the SeedGrads and reused by the next PerSeed
// call, so keep one per trainer.
type SeedGrads struct {
	// Names lists the participants: the masks' owners in order (the
	// teacher left out when it was redistributed), then seeds that only
	// appear in the attribution, sorted.
	Names []string
	// Flats holds one flat gradient per name, each of Masks.Total
	// elements.
	Flats [][]float32
	// Weights holds one aggregation weight per name: SeedWeight for seeds
	// with a SeedInfo, 1.0 for the teacher and unknown names.
	Weights []float64
	// Redistributed reports whether the teacher's gradient was split over
	// the seeds by attribution.
	Redistributed bool
	// TeacherNorm is the L2 norm of the teacher's gradient when it was
	// redistributed (for SeedMetricsAccumulator.RecordTeacherNorm), else 0.
	TeacherNorm float64

	bufs  [][]float32 // backing vectors, reused by position
	extra []string
}

// PerSeed splits the step's gradient by owner (the seed path of §3.1.2):
// per_seed[name] = Σ_microbatches flat ⊙ mask[name] for every owner of
// masks. When attribution exists (attribUses > 0, the sum of attribSums
// positive) and the teacher owns parameters, the teacher's vector is
// removed and added to the seeds in proportion to their attribution,
// per_seed[sid] += teacher · attribSums[sid]/Σ attribSums (seeds without
// parameters are created), and its L2 norm is reported. Weights come from
// seeds (see SeedWeight); the teacher and names without a SeedInfo weigh
// 1.0.
//
// micro holds the microbatch flat gradients of the step (one per
// microbatch, each of masks.Total() elements). PerSeed allocates nothing
// once dst's vectors have grown to the step's participant count.
// It fails on missing masks or gradients, a length mismatch, non-finite
// attribution or alpha, or attribution naming the teacher.
func PerSeed(dst *SeedGrads, micro [][]float32, masks *Masks, attribSums map[string]float64, attribUses int, seeds map[string]SeedInfo) error {
	const op = "PerSeed"
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
		if len(f) != total {
			return invalid(op, "microbatch gradient %d has %d elements, the masks cover %d", i, len(f), total)
		}
	}
	redistribute, attribTotal, err := planSplit(op, &dst.Names, &dst.extra, masks, attribSums, attribUses, seeds)
	if err != nil {
		return err
	}

	// Masked sums.
	dst.Flats = dst.Flats[:0]
	for i, name := range dst.Names {
		for len(dst.bufs) <= i {
			dst.bufs = append(dst.bufs, nil)
		}
		if cap(dst.bufs[i]) < total {
			dst.bufs[i] = make([]float32, total)
		}
		buf := dst.bufs[i][:total]
		maskedSum(buf, micro, masks.ranges[name])
		dst.Flats = append(dst.Flats, buf)
	}

	// Teacher redistribution.
	dst.Redistributed, dst.TeacherNorm = redistribute, 0
	if redistribute {
		teacher := masks.ranges[TeacherID]
		sq := 0.0
		for _, r := range teacher {
			sq += rangeSumSq(micro, r)
		}
		dst.TeacherNorm = math.Sqrt(sq)
		for i, name := range dst.Names {
			a, ok := attribSums[name]
			if !ok {
				continue
			}
			frac := a / attribTotal
			for _, r := range teacher {
				addScaledSum(dst.Flats[i][r.Start:r.End], micro, r, frac)
			}
		}
	}

	dst.Weights = splitWeights(dst.Weights[:0], dst.Names, seeds)
	return nil
}

// planSplit validates PerSeed's attribution and seed infos and fills
// names with the split's participants (extra is scratch for the seeds
// that only appear in the attribution). It returns whether the teacher
// is redistributed and the attribution's sum. It allocates nothing once
// names and extra have grown.
func planSplit(op string, names, extra *[]string, masks *Masks, attribSums map[string]float64, attribUses int, seeds map[string]SeedInfo) (redistribute bool, attribTotal float64, err error) {
	for sid, v := range attribSums {
		if !finite(v) {
			return false, 0, invalid(op, "attribution of seed %q is %v", sid, v)
		}
		if sid == TeacherID {
			return false, 0, invalid(op, "attribution names the teacher %q", sid)
		}
		attribTotal += v
	}
	for sid, s := range seeds {
		if !finite(s.Alpha) {
			return false, 0, invalid(op, "alpha of seed %q is %v", sid, s.Alpha)
		}
	}
	redistribute = attribUses > 0 && attribTotal > 0 && masks.Has(TeacherID)

	*names = (*names)[:0]
	for _, o := range masks.owners {
		if o == TeacherID && redistribute {
			continue
		}
		*names = append(*names, o)
	}
	if redistribute {
		*extra = (*extra)[:0]
		for sid := range attribSums {
			if !masks.Has(sid) {
				*extra = append(*extra, sid)
			}
		}
		slices.Sort(*extra)
		*names = append(*names, *extra...)
	}
	return redistribute, attribTotal, nil
}

// splitWeights appends one aggregation weight per name to dst: SeedWeight
// for seeds with a SeedInfo, 1.0 for the teacher and unknown names.
func splitWeights(dst []float64, names []string, seeds map[string]SeedInfo) []float64 {
	for _, name := range names {
		w := 1.0
		if s, ok := seeds[name]; ok && name != TeacherID {
			w = SeedWeight(s.Stage, s.Alpha)
		}
		dst = append(dst, w)
	}
	return dst
}

// maskedSum writes buf = Σ_m micro[m] on ranges and 0 elsewhere.
func maskedSum(buf []float32, micro [][]float32, ranges []Range) {
	prev := 0
	for _, r := range ranges {
		clear(buf[prev:r.Start])
		seg := buf[r.Start:r.End]
		copy(seg, micro[0][r.Start:r.End])
		for _, f := range micro[1:] {
			src := f[r.Start:r.End]
			src = src[:len(seg)]
			for i, v := range src {
				seg[i] += v
			}
		}
		prev = r.End
	}
	clear(buf[prev:])
}

// rangeSumSq returns ‖Σ_m micro[m][r]‖² in float64.
func rangeSumSq(micro [][]float32, r Range) float64 {
	if len(micro) == 1 {
		return sumSq(micro[0][r.Start:r.End])
	}
	s := 0.0
	for e := r.Start; e < r.End; e++ {
		t := 0.0
		for _, f := range micro {
			t += float64(f[e])
		}
		s += t * t
	}
	return s
}

// addScaledSum adds frac·Σ_m micro[m][r] into dst (len r.Len()).
func addScaledSum(dst []float32, micro [][]float32, r Range, frac float64) {
	if len(micro) == 1 {
		src := micro[0][r.Start:r.End]
		src = src[:len(dst)]
		for i, v := range src {
			dst[i] = float32(float64(dst[i]) + frac*float64(v))
		}
		return
	}
	for i := range dst {
		t := 0.0
		for _, f := range micro {
			t += float64(f[r.Start+i])
		}
		dst[i] = float32(float64(dst[i]) + frac*t)
	}
}
