//go:build cuda

package cuda

import (
	"math"
	"testing"

	"github.com/esper-go/esper/tensor"
)

// TestCopiesAndTimer: a pageable host copy, a device copy and a batch
// staged with StageFunc arrive intact; misuse is an error; the Timer
// times a device copy as a positive, finite duration.
func TestCopiesAndTimer(t *testing.T) {
	const n = 128 * 28 * 28
	h := tensor.Normal(tensor.NewRNG(310), tensor.F32, 0, 1, n)
	a := poisoned(t, tensor.F32, n)
	if err := dev.CopyHostToDevice(a, h.Storage().Bytes()); err != nil {
		t.Fatal(err)
	}
	closeRel(t, "host to device", fromDev(t, a), h, 0)
	b := poisoned(t, tensor.F32, n)
	tm, err := dev.NewTimer()
	if err != nil {
		t.Fatal(err)
	}
	defer tm.Close()
	d, err := tm.Time(func() error { return dev.CopyDeviceToDevice(b, a) })
	if err != nil {
		t.Fatal(err)
	}
	if !(d > 0) || math.IsInf(d.Seconds(), 0) {
		t.Fatalf("timed a device copy as %v", d)
	}
	closeRel(t, "device to device", fromDev(t, b), h, 0)
	if err := dev.CopyDeviceToDevice(a.Narrow(0, 1, 100), a.Narrow(0, 0, 100)); err == nil {
		t.Fatal("an overlapping device copy was accepted")
	}
	if err := dev.CopyHostToDevice(a, make([]byte, 8)); err == nil {
		t.Fatal("a host copy of the wrong size was accepted")
	}
	s, err := dev.NewStager(2, 4*n)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	c := poisoned(t, tensor.F32, n)
	if err := s.StageFunc(c, func(pinned []byte) { copy(pinned, h.Storage().Bytes()) }); err != nil {
		t.Fatal(err)
	}
	closeRel(t, "staged in place", fromDev(t, c), h, 0)
	if err := s.StageFunc(c, nil); err == nil {
		t.Fatal("a nil fill function was accepted")
	}
}
