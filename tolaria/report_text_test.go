package tolaria

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/esper-go/esper/leyline"
)

// TestDecisionText: the epoch line says what came of the decision: an
// ADVANCE that Kasmina's gate refused reads "refused" with the gate's
// reason, not as if it had moved the seed.
func TestDecisionText(t *testing.T) {
	adv := leyline.Decision{Op: leyline.OpAdvance, SlotID: "r0c0", Reason: "Advance to BLENDING (improvement +0.00%)", Confidence: 1}
	for _, tc := range []struct {
		r    EpochReport
		want string
	}{
		{EpochReport{Decision: leyline.Wait("Host not stabilized"), Applied: ApplyNoop},
			"WAIT (Host not stabilized)"},
		{EpochReport{Decision: adv, Applied: ApplyApplied},
			"ADVANCE r0c0 (Advance to BLENDING (improvement +0.00%))"},
		{EpochReport{Decision: adv, Applied: ApplyRejected, ApplyReason: "G2 failed: insufficient_epochs_in_stage"},
			"ADVANCE r0c0 (Advance to BLENDING (improvement +0.00%)) → refused: G2 failed: insufficient_epochs_in_stage"},
		{EpochReport{Decision: adv, Applied: ApplyRejected},
			"ADVANCE r0c0 (Advance to BLENDING (improvement +0.00%)) → refused"},
	} {
		require.Equal(t, tc.want, tc.r.DecisionText())
	}
}

// TestSeedsAndSyncsText: the seed list and the host-sync summary of the
// progress lines and the end-of-run table.
func TestSeedsAndSyncsText(t *testing.T) {
	require.Equal(t, "", EpochReport{}.SeedsText())
	r := EpochReport{Seeds: []leyline.SeedReport{{SlotID: "r0c0", Stage: leyline.StageBlending, Alpha: 0.5}, {SlotID: "r0c1", Stage: leyline.StageTraining}}}
	require.Equal(t, "  [r0c0:BLENDING α=0.50, r0c1:TRAINING α=0.00]", r.SeedsText())
	require.Equal(t, "no epoch", Summary{}.HostSyncsText())
	sum := Summary{Epochs: []EpochReport{{HostSyncs: 1}, {HostSyncs: 4}, {HostSyncs: 2}}}
	require.Equal(t, "7 over 3 epochs (1 to 4 per epoch)", sum.HostSyncsText())
}
