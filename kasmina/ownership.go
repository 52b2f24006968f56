package kasmina

// HostOwner is the owner name of the host's parameters in Ownership.
const HostOwner = "host"

// Ownership returns, for each parameter in Parameters() order, who owns
// it: HostOwner or the seed id of the slot's seed (a seed's gate belongs
// to the seed). It reflects the current parameter set; recompute it when
// Version changes.
func (m *MorphogeneticModel) Ownership() []string {
	out := make([]string, 0, len(m.host.Parameters()))
	for range m.host.NamedParameters() {
		out = append(out, HostOwner)
	}
	for _, s := range m.slots {
		n := len(s.NamedParameters())
		for range n {
			out = append(out, s.state.SeedID)
		}
	}
	return out
}

// SeedMasks returns, per seed id, a mask over Parameters() order that is
// true exactly at that seed's parameters (Tolaria's PCGrad splits the
// gradient by it). Seeds without parameters have all-false masks; slots
// without a seed module are absent.
func (m *MorphogeneticModel) SeedMasks() map[string][]bool {
	owners := m.Ownership()
	masks := map[string][]bool{}
	for _, s := range m.slots {
		if s.seed != nil {
			masks[s.state.SeedID] = make([]bool, len(owners))
		}
	}
	for i, o := range owners {
		if mask, ok := masks[o]; ok && o != HostOwner {
			mask[i] = true
		}
	}
	return masks
}
