package tamiyo

import (
	"context"

	"github.com/esper-go/esper/leyline"
)

// Controller chooses one lifecycle decision per epoch. The trainer calls
// EvaluateEpoch at the end of every epoch with the epoch's signals, the
// seeds and the slots, and applies the decision it gets back. Tolaria
// declares the same method set locally, so any Controller (the Heuristic
// here, the GNN policy later) plugs into it without tolaria importing
// tamiyo.
//
// The contract every implementation keeps:
//
//   - EvaluateEpoch honours ctx: it returns promptly once ctx is done
//     (the trainer runs it under a deadline), with an error that wraps
//     ctx.Err(), so errors.Is(err, context.DeadlineExceeded) works. A
//     controller that has already been cancelled decides nothing and
//     leaves its state as it was.
//   - On success the Decision has a non-empty Reason and a Confidence in
//     [0, 1]. Its SlotID, for every op but WAIT, is one of s.Slots.
//   - When there is nothing to do the decision is WAIT (leyline.Wait),
//     never an error: an error means the controller could not decide
//     (cancelled, or s is inconsistent).
//   - The caller must not apply a decision returned with a non-nil error;
//     it falls back to WAIT (the trainer's conservative mode).
//
// Implementations keep state across epochs (embargoes, penalties,
// recurrent memory), so one Controller serves one environment.
type Controller interface {
	EvaluateEpoch(ctx context.Context, s leyline.EpochState) (leyline.Decision, error)
}
