package kernels

import (
	"fmt"

	"github.com/esper-go/esper/tensor"
)

// The checks every backend shares. Each family file holds the rules of
// its ops (CheckConv2d in conv.go, CheckBatchNorm in norm.go, ...) and
// this file the axis and broadcast rules they build on. A check returns
// an error naming the op (its name argument) and the shapes involved;
// the backend adds its own name and panics with it (kernels/cpu) or
// returns it (kernels/cuda's Device methods), then runs kernels that do
// not check again. The backends check what only they know themselves:
// the device, contiguity, the dtypes they have kernels for.
//
// A check allocates nothing unless it fails: they run on every eager op,
// and the CPU backend's small ops are bound by such overheads.

// NormAxis resolves a possibly negative axis of shape (axis + rank when
// negative).
func NormAxis(name string, axis int, shape []int) (int, error) {
	a := axis
	if a < 0 {
		a += len(shape)
	}
	if a >= 0 && a < len(shape) {
		return a, nil
	}
	return 0, axisError(name, axis, shape)
}

func axisError(name string, axis int, shape []int) error {
	return fmt.Errorf("%s: axis %d out of range for shape %v", name, axis, shape)
}

// Split3 views shape as [outer, shape[axis], inner]: the products of the
// axes before and after axis.
func Split3(shape []int, axis int) (outer, n, inner int) {
	outer, inner = 1, 1
	for i := 0; i < axis; i++ {
		outer *= shape[i]
	}
	for i := axis + 1; i < len(shape); i++ {
		inner *= shape[i]
	}
	return outer, shape[axis], inner
}

// Broadcasts reports whether a tensor of shape from broadcasts to shape
// to under NumPy's rules (missing leading axes and axes of size 1
// expand).
func Broadcasts(from, to []int) bool {
	if len(from) > len(to) {
		return false
	}
	lead := len(to) - len(from)
	for i, d := range from {
		if d != to[lead+i] && d != 1 {
			return false
		}
	}
	return true
}

// CheckBroadcast checks that every one of ins broadcasts to dst's shape.
func CheckBroadcast(name string, dst *T, ins ...*T) error {
	for _, t := range ins {
		if !Broadcasts(t.Shape(), dst.Shape()) {
			shapes := ""
			for i, u := range ins {
				if i > 0 {
					shapes += " and "
				}
				shapes += tensor.ShapeString(u.Shape())
			}
			return fmt.Errorf("%s: shapes %s do not broadcast to %v", name, shapes, dst.Shape())
		}
	}
	return nil
}

// The messages of the checks, built out of line: a check tests its
// conditions inline and calls one of these only when one fails (a call
// per operand showed on the small eager ops).

// CheckSameShape checks that t (named what) has shape want.
func CheckSameShape(name, what string, t *T, want []int) error {
	if tensor.SameShape(t.Shape(), want) {
		return nil
	}
	return shapeError(name, what, t, want)
}

func shapeError(name, what string, t *T, want []int) error {
	return fmt.Errorf("%s: %s has shape %v, want %v", name, what, t.Shape(), append([]int(nil), want...))
}

func lenError(name, what string, t *T, n int) error {
	return fmt.Errorf("%s: %s has shape %v, want %d elements", name, what, t.Shape(), n)
}

func indexError(name, what string, t *T) error {
	return fmt.Errorf("%s: %s (shape %v) has dtype %v, want i64 or i32", name, what, t.Shape(), t.DType())
}

func floatError(name, what string, t *T) error {
	return fmt.Errorf("%s: %s (shape %v) has dtype %v, want a float dtype", name, what, t.Shape(), t.DType())
}

// isIndex reports whether t holds I64 or I32 indices.
func isIndex(t *T) bool { d := t.DType(); return d == tensor.I64 || d == tensor.I32 }
