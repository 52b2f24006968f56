package aggregation

import (
	"errors"
	"slices"
	"testing"

	"github.com/esper-go/esper/kasmina"
	"github.com/esper-go/esper/tensor"
)

func TestSegmentMasks(t *testing.T) {
	ps := params(tensor.NewRNG(1), []int{2}, []int{3}, []int{1}, []int{2}, []int{2})
	m, err := SegmentMasks(ps, []string{kasmina.HostOwner, "s1", "s1", "", "s2"})
	if err != nil {
		t.Fatal(err)
	}
	if m.Total() != 10 {
		t.Fatalf("Total %d", m.Total())
	}
	if got := m.Owners(); !slices.Equal(got, []string{TeacherID, "s1", "s2"}) {
		t.Fatalf("Owners %v", got)
	}
	if got := m.Ranges(TeacherID); !slices.Equal(got, []Range{{0, 2}, {6, 8}}) {
		t.Fatalf("teacher ranges %v", got)
	}
	if got := m.Ranges("s1"); !slices.Equal(got, []Range{{2, 6}}) {
		t.Fatalf("s1 ranges %v (adjacent segments must merge)", got)
	}
	if m.Elems(TeacherID) != 4 || m.Elems("s1") != 4 || m.Elems("s2") != 2 || m.Elems("nobody") != 0 {
		t.Fatal("element counts")
	}
	if !m.Has("s2") || m.Has("nobody") {
		t.Fatal("Has")
	}
	assertVec(t, "mask s2", m.Mask("s2"), []float64{0, 0, 0, 0, 0, 0, 0, 0, 1, 1}, 0)

	flat := []float32{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}
	dst := make([]float32, 10)
	for i := range dst {
		dst[i] = -1
	}
	if err := m.Apply(dst, flat, TeacherID); err != nil {
		t.Fatal(err)
	}
	assertVec(t, "teacher part", dst, []float64{1, 2, 0, 0, 0, 0, 7, 8, 0, 0}, 0)
	if err := m.Apply(dst[:3], flat, "s1"); !errors.Is(err, ErrInvalid) {
		t.Fatalf("short destination: %v", err)
	}
	if allocs := testing.AllocsPerRun(20, func() { _ = m.Apply(dst, flat, "s1") }); allocs != 0 {
		t.Fatalf("Apply: %v allocations", allocs)
	}
}

func TestSegmentMasksRejects(t *testing.T) {
	ps := params(tensor.NewRNG(2), []int{2}, []int{3})
	if _, err := SegmentMasks(ps, []string{"a"}); !errors.Is(err, ErrInvalid) {
		t.Fatalf("short owner list: %v", err)
	}
	if _, err := SegmentMasks(nil, nil); !errors.Is(err, ErrInvalid) {
		t.Fatalf("no parameters: %v", err)
	}
}

func TestOwnersFromSeedMasks(t *testing.T) {
	owners, err := OwnersFromSeedMasks(map[string][]bool{
		"a": {false, true, true, false},
		"b": {false, false, false, true},
		"c": {false, false, false, false},
	}, 4)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(owners, []string{TeacherID, "a", "a", "b"}) {
		t.Fatalf("owners %v", owners)
	}
	for name, masks := range map[string]map[string][]bool{
		"length":   {"a": {true}},
		"claimed":  {"a": {true, false}, "b": {true, false}},
		"reserved": {TeacherID: {true, false}},
		"host":     {kasmina.HostOwner: {true, false}},
	} {
		if _, err := OwnersFromSeedMasks(masks, 2); !errors.Is(err, ErrInvalid) {
			t.Fatalf("%s: %v", name, err)
		}
	}
}

// The masks built from a real MorphogeneticModel's ownership agree with
// its SeedMasks.
func TestMasksFromKasminaModel(t *testing.T) {
	host := kasmina.MustCNNHost(kasmina.CNNHostOptions{InChannels: 1, Classes: 4, Blocks: 2, BaseChannels: 4})
	model, err := kasmina.NewMorphogeneticModel(host, kasmina.ModelOptions{Slots: []string{"r0c1"}})
	if err != nil {
		t.Fatal(err)
	}
	if err := model.GerminateSeed("r0c1", kasmina.GerminateOptions{Blueprint: "conv_light", BlendAlgorithmID: kasmina.BlendLinear, Tempo: 3}); err != nil {
		t.Fatal(err)
	}
	ps := model.Parameters()
	owners, err := OwnersFromSeedMasks(model.SeedMasks(), len(ps))
	if err != nil {
		t.Fatal(err)
	}
	a, err := SegmentMasks(ps, owners)
	if err != nil {
		t.Fatal(err)
	}
	b, err := SegmentMasks(ps, model.Ownership())
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(a.Owners(), b.Owners()) || len(a.Owners()) != 2 || a.Owners()[0] != TeacherID {
		t.Fatalf("owners %v vs %v", a.Owners(), b.Owners())
	}
	seed := a.Owners()[1]
	if !slices.Equal(a.Ranges(seed), b.Ranges(seed)) || a.Elems(seed) == 0 ||
		a.Elems(seed)+a.Elems(TeacherID) != a.Total() {
		t.Fatalf("seed %q ranges %v vs %v", seed, a.Ranges(seed), b.Ranges(seed))
	}
}
