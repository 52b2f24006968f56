package nn

import (
	"errors"
	"fmt"

	"github.com/esper-go/esper/tensor"
)

// ErrOptions is wrapped by every error a layer constructor returns for
// invalid options; match it with errors.Is.
var ErrOptions = errors.New("invalid options")

// optionsErr formats a constructor error for layer that wraps ErrOptions.
func optionsErr(layer, format string, args ...any) error {
	return fmt.Errorf("nn: %s: %w: %s", layer, ErrOptions, fmt.Sprintf(format, args...))
}

// checkSizes refuses, with an error wrapping ErrOptions, parameter shapes
// that cannot be allocated: an overflowing size, or more bytes in all
// than tensor.HostLimit (so that NewLinear with In = 2^40 is an error,
// not a crash).
func checkSizes(layer string, d tensor.DType, shapes ...[]int) error {
	var total int64
	for _, s := range shapes {
		n, err := tensor.CheckShape(d, s...)
		if err != nil {
			return optionsErr(layer, "parameters too large: %v", err)
		}
		total += int64(n) * int64(d.Size())
	}
	if total > tensor.HostLimit() {
		return optionsErr(layer, "parameters too large: %d bytes, more than this machine's limit of %d", total, tensor.HostLimit())
	}
	return nil
}

// paramDType resolves a layer's DType option: zero means F32, and
// parameters must be floating point.
func paramDType(layer string, d tensor.DType) (tensor.DType, error) {
	if d == tensor.Invalid {
		return tensor.F32, nil
	}
	if !d.IsFloat() {
		return 0, optionsErr(layer, "DType %v is not a floating-point type", d)
	}
	return d, nil
}

// must panics with err, for the MustX constructors.
func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}
