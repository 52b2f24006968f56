// Package backendtest is the conformance suite of kernels.Backend: RunAll
// checks every method of a backend, and every optional interface of
// package kernels it implements, against float64 references on random
// inputs with dtype-scaled tolerances, and replays every call captured
// against the eager call. Every backend's tests run it:
//
//	func TestConformance(t *testing.T) {
//		backendtest.RunAll(t, cpu.Default(), backendtest.Options{})
//	}
//
// The checks sit in files named for the op families of package kernels
// (elementwise.go, reduce.go, ..., capture.go). A method added to an
// interface of package kernels without a check fails this package's
// tests.
package backendtest
