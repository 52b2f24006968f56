package leyline

// causalTable says which heads influence the outcome of each op (G2
// leyline/causal_masks.py, the single source of truth). The op head is
// always relevant; a head that is not relevant to the op taken gets no
// credit or blame in the policy update.
var causalTable = [NumOps][NumActionHeads]bool{
	OpWait:           {HeadOp: true},
	OpGerminate:      {HeadSlot: true, HeadBlueprint: true, HeadStyle: true, HeadTempo: true, HeadAlphaTarget: true, HeadOp: true},
	OpSetAlphaTarget: {HeadSlot: true, HeadStyle: true, HeadAlphaTarget: true, HeadAlphaSpeed: true, HeadAlphaCurve: true, HeadOp: true},
	OpPrune:          {HeadSlot: true, HeadAlphaSpeed: true, HeadAlphaCurve: true, HeadOp: true},
	OpFossilize:      {HeadSlot: true, HeadOp: true},
	OpAdvance:        {HeadSlot: true, HeadOp: true},
}

// CausalRelevance returns, per head in HeadNames order, whether the head
// matters when op is taken. An invalid op yields only the op head.
func CausalRelevance(op LifecycleOp) [NumActionHeads]bool {
	if !op.Valid() {
		return [NumActionHeads]bool{HeadOp: true}
	}
	return causalTable[op]
}

// IsCausallyRelevant reports whether head (an index into HeadNames)
// matters when op is taken.
func IsCausallyRelevant(op LifecycleOp, head int) bool {
	if head < 0 || head >= NumActionHeads {
		return false
	}
	return CausalRelevance(op)[head]
}

// AvailabilityMask returns, per head, whether the head could matter given
// which ops are valid (the op mask row): a head is available when it is
// causally relevant to at least one valid op. So slot is available when
// any op other than WAIT is valid, blueprint and tempo when GERMINATE is,
// style and alpha_target when GERMINATE or SET_ALPHA_TARGET is, and
// alpha_speed and alpha_curve when SET_ALPHA_TARGET or PRUNE is. The op
// head is always available.
func AvailabilityMask(validOps [NumOps]bool) [NumActionHeads]bool {
	out := [NumActionHeads]bool{HeadOp: true}
	for op, ok := range validOps {
		if !ok {
			continue
		}
		for h, rel := range causalTable[op] {
			if rel {
				out[h] = true
			}
		}
	}
	return out
}
