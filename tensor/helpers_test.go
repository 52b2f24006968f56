package tensor_test

import (
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/esper-go/esper/tensor"
)

// The tests use only the standard library: testify's own dependencies are
// not in go.sum, and this package must not change the module files.

// panicMessage runs f and returns what it panicked with as a string, or
// fails the test when f returns normally.
func panicMessage(t *testing.T, f func()) (msg string) {
	t.Helper()
	defer func() {
		r := recover()
		if r == nil {
			t.Fatalf("expected a panic, got none")
		}
		msg = fmt.Sprint(r)
	}()
	f()
	return ""
}

// mustPanicWith checks that f panics with exactly want.
func mustPanicWith(t *testing.T, want string, f func()) {
	t.Helper()
	if got := panicMessage(t, f); got != want {
		t.Errorf("panic message\n got: %s\nwant: %s", got, want)
	}
}

// mustPanicContaining checks that f panics with a message holding every
// part.
func mustPanicContaining(t *testing.T, f func(), parts ...string) {
	t.Helper()
	msg := panicMessage(t, f)
	for _, p := range parts {
		if !strings.Contains(msg, p) {
			t.Errorf("panic message %q does not contain %q", msg, p)
		}
	}
}

// equal fails the test when got and want differ (reflect.DeepEqual).
func equal(t *testing.T, got, want any, what ...any) {
	t.Helper()
	if !reflect.DeepEqual(got, want) {
		t.Errorf("%s\n got: %#v\nwant: %#v", fmt.Sprint(what...), got, want)
	}
}

// noErr fails the test immediately on a non-nil error.
func noErr(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatalf("unexpected error: %v", err)
	}
}

// ints is shorthand for a shape or stride literal.
func ints(v ...int) []int {
	if v == nil {
		return []int{}
	}
	return v
}

// sameInts compares shapes, treating nil and empty as equal.
func sameInts(t *testing.T, got, want []int, what ...any) {
	t.Helper()
	if !tensor.SameShape(got, want) {
		t.Errorf("%s: got %v, want %v", fmt.Sprint(what...), got, want)
	}
}

// iota64 returns 0, 1, ..., n-1 as float64.
func iota64(n int) []float64 {
	out := make([]float64, n)
	for i := range out {
		out[i] = float64(i)
	}
	return out
}

// allDTypes lists every valid dtype.
var allDTypes = []tensor.DType{tensor.F64, tensor.F32, tensor.BF16, tensor.F16, tensor.I32, tensor.I64, tensor.Bool}

// shares reports whether two tensors view one storage.
func shares(a, b *tensor.Tensor) bool { return a.Storage() == b.Storage() }
