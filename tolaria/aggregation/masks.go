package aggregation

import (
	"sort"

	"github.com/esper-go/esper/autograd"
	"github.com/esper-go/esper/kasmina"
)

// TeacherID is the owner of every parameter no seed owns: the host
// network, whose gradient the seed path treats as the "teacher" and
// redistributes over the seeds by attribution (G1 "__teacher__").
const TeacherID = "__teacher__"

// Range is a half-open range [Start, End) of flat gradient elements.
type Range struct{ Start, End int }

// Len is the number of elements in r.
func (r Range) Len() int { return r.End - r.Start }

// Masks records which flat gradient elements each owner (a seed id or
// TeacherID) owns, as ranges over the flat layout of GradsToFlat. It is
// the fence metadata of §3.1.1 step 4, built once per parameter set and
// read every step. A Masks is immutable after SegmentMasks.
type Masks struct {
	total  int
	owners []string // order of first appearance in parameter order
	ranges map[string][]Range
	elems  map[string]int
}

// SegmentMasks builds the owner masks of params: owners[i] owns
// params[i]'s whole flat segment. An empty owner, kasmina.HostOwner and
// TeacherID all mean the teacher (the host). Adjacent segments of one
// owner merge into one range. It fails when the lists differ in length,
// are empty, or hold a nil parameter.
func SegmentMasks(params []*autograd.Var, owners []string) (*Masks, error) {
	const op = "SegmentMasks"
	total, err := flatLen(op, params)
	if err != nil {
		return nil, err
	}
	if len(owners) != len(params) {
		return nil, invalid(op, "%d owners for %d parameters", len(owners), len(params))
	}
	m := &Masks{total: total, ranges: map[string][]Range{}, elems: map[string]int{}}
	off := 0
	for i, p := range params {
		o := owners[i]
		if o == "" || o == kasmina.HostOwner {
			o = TeacherID
		}
		rs, seen := m.ranges[o]
		if !seen {
			m.owners = append(m.owners, o)
			m.ranges[o] = nil
		}
		n := p.Value.Numel()
		if n > 0 {
			if k := len(rs); k > 0 && rs[k-1].End == off {
				rs[k-1].End += n
			} else {
				rs = append(rs, Range{off, off + n})
			}
			m.ranges[o] = rs
			m.elems[o] += n
		}
		off += n
	}
	return m, nil
}

// OwnersFromSeedMasks turns kasmina's MorphogeneticModel.SeedMasks (per
// seed, a bool per parameter) into the per-parameter owner list
// SegmentMasks takes; parameters no seed claims belong to TeacherID. n is
// the number of parameters. It fails when a mask has the wrong length,
// when two seeds claim one parameter, or when a seed id is empty or
// collides with the teacher's names.
func OwnersFromSeedMasks(seedMasks map[string][]bool, n int) ([]string, error) {
	const op = "OwnersFromSeedMasks"
	ids := make([]string, 0, len(seedMasks))
	for id := range seedMasks {
		ids = append(ids, id)
	}
	sort.Strings(ids) // deterministic error messages
	owners := make([]string, n)
	for _, id := range ids {
		if id == "" || id == TeacherID || id == kasmina.HostOwner {
			return nil, invalid(op, "seed id %q is reserved for the teacher", id)
		}
		mask := seedMasks[id]
		if len(mask) != n {
			return nil, invalid(op, "mask of seed %q has %d entries for %d parameters", id, len(mask), n)
		}
		for i, on := range mask {
			if !on {
				continue
			}
			if owners[i] != "" {
				return nil, invalid(op, "parameter %d is claimed by seeds %q and %q", i, owners[i], id)
			}
			owners[i] = id
		}
	}
	for i, o := range owners {
		if o == "" {
			owners[i] = TeacherID
		}
	}
	return owners, nil
}

// Total is the length of the flat gradient the masks describe.
func (m *Masks) Total() int { return m.total }

// Owners returns the owners in order of their first parameter (a copy).
func (m *Masks) Owners() []string { return append([]string(nil), m.owners...) }

// Has reports whether owner owns any parameter (possibly of no elements).
func (m *Masks) Has(owner string) bool {
	_, ok := m.ranges[owner]
	return ok
}

// Ranges returns owner's flat element ranges in increasing order (a copy).
func (m *Masks) Ranges(owner string) []Range { return append([]Range(nil), m.ranges[owner]...) }

// Elems is the number of flat elements owner owns.
func (m *Masks) Elems(owner string) int { return m.elems[owner] }

// Mask returns owner's mask as a new float vector over the flat layout:
// 1 on its elements, 0 elsewhere (the G1 float mask). Per-step code uses
// Apply, which needs no mask vector.
func (m *Masks) Mask(owner string) []float32 {
	out := make([]float32, m.total)
	for _, r := range m.ranges[owner] {
		for i := r.Start; i < r.End; i++ {
			out[i] = 1
		}
	}
	return out
}

// Apply writes dst = flat ⊙ mask(owner) without allocating. dst and flat
// must have Total elements; dst may be flat.
func (m *Masks) Apply(dst, flat []float32, owner string) error {
	if len(flat) != m.total || len(dst) != m.total {
		return invalid("Masks.Apply", "vectors of %d and %d elements for masks over %d", len(dst), len(flat), m.total)
	}
	prev := 0
	for _, r := range m.ranges[owner] {
		clear(dst[prev:r.Start])
		copy(dst[r.Start:r.End], flat[r.Start:r.End])
		prev = r.End
	}
	clear(dst[prev:])
	return nil
}
