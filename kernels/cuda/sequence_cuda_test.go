//go:build cuda

package cuda

import (
	"testing"
	"time"

	"github.com/esper-go/esper/tensor"
)

// withinSeconds fails t if f does not return within s seconds (a
// deadlock would otherwise hang the test binary).
func withinSeconds(t *testing.T, s int, what string, f func()) {
	t.Helper()
	done := make(chan struct{})
	go func() {
		defer close(done)
		f()
	}()
	select {
	case <-done:
	case <-time.After(time.Duration(s) * time.Second):
		t.Fatalf("%s: still running after %d s (a deadlock?)", what, s)
	}
}

// TestSequenceAcrossCaptureBounds: steps held back when a capture begins
// run before it (eagerly), steps held back inside a capture are in its
// graph when it ends — the calls that launch them hold the device's
// lock (BeginCapture, EndCapture), which the launch must not take again.
func TestSequenceAcrossCaptureBounds(t *testing.T) {
	ones := func() *tensor.Tensor { return toDev(t, tensor.Full(tensor.F32, 1, 64)) }
	a, b := ones(), ones()
	withinSeconds(t, 20, "a sequence across a capture", func() {
		dev.BeginSequence()
		if err := dev.ZeroMany([]*tensor.Tensor{a}); err != nil { // held back
			t.Error(err)
		}
		if err := dev.BeginCapture(); err != nil { // launches a's zeroing first
			t.Error(err)
			return
		}
		if err := dev.ZeroMany([]*tensor.Tensor{b}); err != nil { // held back inside the capture
			t.Error(err)
		}
		g, err := dev.EndCapture() // launches b's zeroing into the graph
		if err != nil {
			t.Error(err)
			return
		}
		if err := dev.EndSequence(); err != nil {
			t.Error(err)
		}
		for i, v := range fromDev(t, a).F32() {
			if v != 0 {
				t.Fatalf("a[%d] = %v: the step held before the capture did not run", i, v)
			}
		}
		for i, v := range fromDev(t, b).F32() {
			if v != 1 {
				t.Fatalf("b[%d] = %v: the step held inside the capture ran eagerly", i, v)
			}
		}
		if g.Nodes() != 1 {
			t.Errorf("the capture holds %d nodes, want the one joined launch", g.Nodes())
		}
		if err := g.Replay(); err != nil {
			t.Error(err)
		}
		for i, v := range fromDev(t, b).F32() {
			if v != 0 {
				t.Fatalf("b[%d] = %v after a replay", i, v)
			}
		}
		if err := g.Close(); err != nil {
			t.Error(err)
		}
	})
	if err := dev.EndSequence(); err == nil {
		t.Error("EndSequence outside a sequence: no error")
	}
}

// TestSequencesOffHoldNothing: with the sequences off
// (ESPER_CUDA_SEQUENCES=off's setting) a call inside a sequence launches
// at once — nothing is held back after it (read before anything else
// enters the device, which would launch what is held), and a capture of
// two such calls holds two nodes, not one.
func TestSequencesOffHoldNothing(t *testing.T) {
	defer sequencesOff.Store(sequencesOff.Load())
	sequencesOff.Store(true)
	ones := func() *tensor.Tensor { return toDev(t, tensor.Full(tensor.F32, 1, 64)) }
	a, b, c := ones(), ones(), ones()
	withinSeconds(t, 20, "a sequence with the sequences off", func() {
		dev.BeginSequence()
		if err := dev.ZeroMany([]*tensor.Tensor{a}); err != nil {
			t.Error(err)
		}
		if dev.seqHeld.Load() {
			t.Fatal("a step is held back inside the sequence with the sequences off")
		}
		for i, v := range fromDev(t, a).F32() {
			if v != 0 {
				t.Fatalf("a[%d] = %v", i, v)
			}
		}
		if err := dev.BeginCapture(); err != nil {
			t.Error(err)
			return
		}
		if err := dev.ZeroMany([]*tensor.Tensor{b}); err != nil {
			t.Error(err)
		}
		if err := dev.ZeroMany([]*tensor.Tensor{c}); err != nil {
			t.Error(err)
		}
		g, err := dev.EndCapture()
		if err != nil {
			t.Error(err)
			return
		}
		if err := dev.EndSequence(); err != nil {
			t.Error(err)
		}
		if g.Nodes() != 2 {
			t.Errorf("the capture holds %d nodes, want 2 (one per call: nothing joined)", g.Nodes())
		}
		if err := g.Replay(); err != nil {
			t.Error(err)
		}
		for _, x := range []*tensor.Tensor{b, c} {
			for i, v := range fromDev(t, x).F32() {
				if v != 0 {
					t.Fatalf("[%d] = %v after a replay", i, v)
				}
			}
		}
		if err := g.Close(); err != nil {
			t.Error(err)
		}
	})
}
