package nn

import (
	"testing"

	"github.com/esper-go/esper/tensor"
)

// TestHostCopiesOneSync: tensors on sim come back with their values and
// shapes after a single host sync; CPU tensors are returned as they are
// and nil entries stay nil.
func TestHostCopiesOneSync(t *testing.T) {
	rng := tensor.NewRNG(7)
	dev := tensor.Sim(6)
	cpu := tensor.Normal(rng, tensor.F32, 0, 1, 3)
	var want, in []*tensor.Tensor
	for _, shape := range [][]int{{2, 3}, {4}, {0}, {1, 1, 5}} {
		h := tensor.Normal(rng, tensor.F32, 0, 1, shape...)
		d, err := h.ToDevice(dev)
		if err != nil {
			t.Fatal(err)
		}
		want, in = append(want, h), append(in, d)
	}
	in = append(in, nil, cpu)
	before := tensor.HostSyncs(dev)
	got, err := HostCopies(in)
	if err != nil {
		t.Fatal(err)
	}
	if n := tensor.HostSyncs(dev) - before; n != 1 {
		t.Fatalf("%d host syncs, want 1", n)
	}
	for i, w := range want {
		g := got[i]
		if !g.Device().IsCPU() || len(g.Shape()) != len(w.Shape()) {
			t.Fatalf("%d: %v %v, want cpu %v", i, g.Device(), g.Shape(), w.Shape())
		}
		wv, gv := w.Contiguous().F32(), g.Contiguous().F32()
		for j := range wv {
			if wv[j] != gv[j] {
				t.Fatalf("%d[%d]: %v, want %v", i, j, gv[j], wv[j])
			}
		}
	}
	if got[len(want)] != nil || got[len(want)+1] != cpu {
		t.Fatal("nil and cpu entries must come back as they are")
	}
}
