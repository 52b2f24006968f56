package tolaria

import (
	"fmt"
	"math"
	"strings"
)

// DecisionText renders the epoch's decision and what came of it, for an
// epoch's progress line: a rollback says so with the governor's reason,
// and a decision Kasmina refused (a gate failed, the slot was busy) reads
// "→ refused" with Kasmina's reason, since the seeds then show no change.
func (r EpochReport) DecisionText() string {
	if r.RolledBack {
		return "rolled back by the governor (" + r.PanicReason + ")"
	}
	s := r.Decision.String()
	if r.Applied == ApplyRejected {
		s += " → refused"
		if r.ApplyReason != "" {
			s += ": " + r.ApplyReason
		}
	}
	return s
}

// SeedsText renders the epoch's seeds as "  [slot:STAGE α=0.50, …]"
// (empty without seeds), for an epoch's progress line.
func (r EpochReport) SeedsText() string {
	if len(r.Seeds) == 0 {
		return ""
	}
	parts := make([]string, len(r.Seeds))
	for i, s := range r.Seeds {
		parts[i] = fmt.Sprintf("%s:%s α=%.2f", s.SlotID, s.Stage, s.Alpha)
	}
	return "  [" + strings.Join(parts, ", ") + "]"
}

// HostSyncsText summarises the run's host syncs per epoch
// (tolaria.host_syncs): "N over E epochs (lo to hi per epoch)", or "no
// epoch".
func (s Summary) HostSyncsText() string {
	if len(s.Epochs) == 0 {
		return "no epoch"
	}
	var total, lo, hi uint64
	lo = math.MaxUint64
	for _, r := range s.Epochs {
		total += r.HostSyncs
		lo, hi = min(lo, r.HostSyncs), max(hi, r.HostSyncs)
	}
	return fmt.Sprintf("%d over %d epochs (%d to %d per epoch)", total, len(s.Epochs), lo, hi)
}
