package leyline

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

func heads(names ...string) [NumActionHeads]bool {
	var out [NumActionHeads]bool
	for _, n := range names {
		out[HeadIndex(n)] = true
	}
	return out
}

func TestCausalRelevance(t *testing.T) {
	cases := map[LifecycleOp][NumActionHeads]bool{
		OpWait:           heads("op"),
		OpGerminate:      heads("op", "slot", "blueprint", "style", "tempo", "alpha_target"),
		OpSetAlphaTarget: heads("op", "slot", "style", "alpha_target", "alpha_speed", "alpha_curve"),
		OpPrune:          heads("op", "slot", "alpha_speed", "alpha_curve"),
		OpFossilize:      heads("op", "slot"),
		OpAdvance:        heads("op", "slot"),
	}
	for op, want := range cases {
		assert.Equal(t, want, CausalRelevance(op), "%v", op)
		for h := range NumActionHeads {
			assert.Equal(t, want[h], IsCausallyRelevant(op, h))
		}
	}
	assert.Equal(t, heads("op"), CausalRelevance(LifecycleOp(17)))
	assert.False(t, IsCausallyRelevant(OpGerminate, 8))
}

func TestAvailabilityMask(t *testing.T) {
	ops := func(list ...LifecycleOp) [NumOps]bool {
		var v [NumOps]bool
		for _, o := range list {
			v[o] = true
		}
		return v
	}
	cases := []struct {
		valid [NumOps]bool
		want  [NumActionHeads]bool
	}{
		{ops(OpWait), heads("op")},
		{ops(OpWait, OpAdvance), heads("op", "slot")},
		{ops(OpWait, OpGerminate), heads("op", "slot", "blueprint", "tempo", "style", "alpha_target")},
		{ops(OpWait, OpSetAlphaTarget), heads("op", "slot", "style", "alpha_target", "alpha_speed", "alpha_curve")},
		{ops(OpWait, OpPrune), heads("op", "slot", "alpha_speed", "alpha_curve")},
		{ops(), heads("op")},
	}
	for _, c := range cases {
		assert.Equal(t, c.want, AvailabilityMask(c.valid), "%v", c.valid)
	}
}
