package aggregation

import (
	"errors"
	"fmt"
)

// ErrInvalid is wrapped by every error this package returns for bad
// input (empty gradient lists, length or dtype mismatches, non-finite
// weights), so callers can match them with errors.Is.
var ErrInvalid = errors.New("aggregation: invalid input")

// invalid formats an error that wraps ErrInvalid and names the operation.
func invalid(op, format string, args ...any) error {
	return fmt.Errorf("%w: %s: %s", ErrInvalid, op, fmt.Sprintf(format, args...))
}
