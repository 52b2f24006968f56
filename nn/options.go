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
