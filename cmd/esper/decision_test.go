package main

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/esper-go/esper/leyline"
	"github.com/esper-go/esper/tolaria"
)

// TestDecisionText: the epoch line says what came of the decision: an
// ADVANCE that Kasmina's gate refused reads "refused" with the gate's
// reason, not as if it had moved the seed.
func TestDecisionText(t *testing.T) {
	adv := leyline.Decision{Op: leyline.OpAdvance, SlotID: "r0c0", Reason: "Advance to BLENDING (improvement +0.00%)", Confidence: 1}
	for _, tc := range []struct {
		r    tolaria.EpochReport
		want string
	}{
		{tolaria.EpochReport{Decision: leyline.Wait("Host not stabilized"), Applied: tolaria.ApplyNoop},
			"WAIT (Host not stabilized)"},
		{tolaria.EpochReport{Decision: adv, Applied: tolaria.ApplyApplied},
			"ADVANCE r0c0 (Advance to BLENDING (improvement +0.00%))"},
		{tolaria.EpochReport{Decision: adv, Applied: tolaria.ApplyRejected, ApplyReason: "G2 failed: insufficient_epochs_in_stage"},
			"ADVANCE r0c0 (Advance to BLENDING (improvement +0.00%)) → refused: G2 failed: insufficient_epochs_in_stage"},
		{tolaria.EpochReport{Decision: adv, Applied: tolaria.ApplyRejected},
			"ADVANCE r0c0 (Advance to BLENDING (improvement +0.00%)) → refused"},
	} {
		require.Equal(t, tc.want, decisionText(tc.r))
	}
}
