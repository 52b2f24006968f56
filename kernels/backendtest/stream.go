package backendtest

import (
	"errors"
	"reflect"

	"github.com/esper-go/esper/kernels"
	"github.com/esper-go/esper/tensor"
)

// The stream interfaces of kernels (stream.go there): naming the device,
// byte copies, event timers and the pinned Stager, and the GraphCloser a
// captured graph may implement. They are not ops with a float64
// reference: each check runs the protocol and compares the bytes that
// arrive with those sent. Only a backend with a stream of its own (CUDA)
// implements them; elsewhere the checks are skipped.

var streamCases = []conformance{
	provided[kernels.DeviceDescriber](checkDeviceDescriber, "DeviceName", "ComputeCapability"),
	provided[kernels.ByteCopier](checkByteCopier, "CopyHostToDevice", "CopyDeviceToDevice"),
	provided[kernels.EventTimers](checkEventTimer, "NewEventTimer", "Time", "Close"),
	provided[kernels.Stagers](checkStager, "NewStager", "Stage", "StageFunc", "StageAhead", "Await", "Release",
		"StartTrace", "BeginStep", "EndStep", "StopTrace", "Close", "StageInline"),
	of(checkGraphCloser, "Close"),
	provided[kernels.LaunchBounder](checkLaunchBounder, "LaunchBound"),
}

// checkLaunchBounder: the answer does not change between calls, and a
// backend that calls itself launch-bound captures graphs (what makes its
// joined launches pay: a captured step replays them as graph nodes).
func checkLaunchBounder(s *suite) {
	lb := s.b.(kernels.LaunchBounder)
	bound := lb.LaunchBound()
	if lb.LaunchBound() != bound {
		s.t.Error("LaunchBound changed between two calls")
	}
	if !bound {
		return
	}
	x := s.out(tensor.F32, 4)
	if err := s.b.BeginCapture(); err != nil {
		s.t.Fatalf("a launch-bound backend refuses BeginCapture: %v", err)
	}
	s.b.Fill(x, 1)
	g, err := s.b.EndCapture()
	if err != nil || g.Len() != 1 {
		s.t.Fatalf("a launch-bound backend's capture of one Fill: graph %v, err %v", g, err)
	}
	if c, ok := g.(kernels.GraphCloser); ok {
		if err := c.Close(); err != nil {
			s.t.Error(err)
		}
	}
}

// provided is the check of the methods of the optional interface P and
// of the interfaces P's methods return (EventTimers gives EventTimer's
// Time and Close): run when the backend implements P, skipped otherwise.
func provided[P any](run func(s *suite), methods ...string) conformance {
	return conformance{methods: methods, run: func(s *suite) {
		if _, ok := s.b.(P); !ok {
			s.t.Skipf("%T does not implement kernels.%s", s.b, reflect.TypeFor[P]().Name())
		}
		run(s)
	}}
}

// hostBatch is a host F32 tensor of n normal values and its bytes.
func (s *suite) hostBatch(n int) (vals []float64, bytes []byte) {
	h := tensor.FromFloat64s(tensor.F32, s.normals(n), n)
	return h.Float64s(), h.Storage().Bytes()[:h.Nbytes()]
}

func checkDeviceDescriber(s *suite) {
	d := s.b.(kernels.DeviceDescriber)
	if d.DeviceName() == "" {
		s.t.Error("DeviceName is empty")
	}
	major, minor, err := d.ComputeCapability()
	if err != nil || major < 1 || minor < 0 {
		s.t.Errorf("ComputeCapability = %d.%d, %v", major, minor, err)
	}
}

func checkByteCopier(s *suite) {
	c := s.b.(kernels.ByteCopier)
	const n = 37
	want, src := s.hostBatch(n)
	dst := s.out(tensor.F32, n)
	if err := c.CopyHostToDevice(dst, src); err != nil {
		s.t.Fatalf("CopyHostToDevice: %v", err)
	}
	same(s.t, "CopyHostToDevice", s.get(dst), want)
	if err := c.CopyHostToDevice(dst, src[:8]); err == nil {
		s.t.Error("CopyHostToDevice of 8 bytes into 148 returned no error")
	}
	d2 := s.out(tensor.F32, n)
	if err := c.CopyDeviceToDevice(d2, dst); err != nil {
		s.t.Fatalf("CopyDeviceToDevice: %v", err)
	}
	same(s.t, "CopyDeviceToDevice", s.get(d2), want)
	if err := c.CopyDeviceToDevice(s.out(tensor.F32, n+1), dst); err == nil {
		s.t.Error("CopyDeviceToDevice of 37 values into 38 returned no error")
	}
}

func checkEventTimer(s *suite) {
	tm, err := s.b.(kernels.EventTimers).NewEventTimer()
	if err != nil {
		s.t.Fatalf("NewEventTimer: %v", err)
	}
	x := s.out(tensor.F32, 1000)
	d, err := tm.Time(func() error { s.b.Fill(x, 2); return nil })
	if err != nil || d < 0 {
		s.t.Errorf("Time of a Fill = %v, %v", d, err)
	}
	want := make([]float64, 1000)
	for i := range want {
		want[i] = 2
	}
	same(s.t, "the timed Fill", s.get(x), want)
	failed := errors.New("f failed")
	if _, err := tm.Time(func() error { return failed }); !errors.Is(err, failed) {
		s.t.Errorf("Time of a failing f returned %v, want f's error", err)
	}
	if _, err := tm.Time(func() error { return nil }); err != nil {
		s.t.Errorf("Time after a failing f: %v", err)
	}
	if err := tm.Close(); err != nil {
		s.t.Errorf("Close: %v", err)
	}
}

func checkStager(s *suite) {
	const n = 40
	st, err := s.b.(kernels.Stagers).NewStager(2, 4*n)
	if err != nil {
		s.t.Fatalf("NewStager: %v", err)
	}
	defer st.Close()
	want1, b1 := s.hostBatch(n)
	want2, b2 := s.hostBatch(n)
	want3, b3 := s.hostBatch(n)
	dst, dst2 := s.out(tensor.F32, n), s.out(tensor.F32, n)
	if err := st.Stage(dst, b1); err != nil {
		s.t.Fatalf("Stage: %v", err)
	}
	same(s.t, "Stage", s.get(dst), want1)
	if err := st.StageFunc(dst2, func(p []byte) { copy(p, b2) }); err != nil {
		s.t.Fatalf("StageFunc: %v", err)
	}
	same(s.t, "StageFunc", s.get(dst2), want2)
	if err := st.Stage(s.out(tensor.F32, 2*n), make([]byte, 8*n)); err == nil {
		s.t.Error("Stage of more bytes than the Stager's buffers returned no error")
	}

	// One traced step hiding one copy: Release dst (read by the step
	// before), StageAhead into it, a step, Await, the trace.
	if err := st.StartTrace(1, 1); err != nil {
		s.t.Fatalf("StartTrace: %v", err)
	}
	if err := st.Release(dst); err != nil {
		s.t.Fatalf("Release: %v", err)
	}
	if err := st.StageAhead(dst, func(p []byte) { copy(p, b3) }); err != nil {
		s.t.Fatalf("StageAhead: %v", err)
	}
	if err := st.BeginStep(); err != nil {
		s.t.Fatalf("BeginStep: %v", err)
	}
	s.b.Fill(dst2, 5)
	if err := st.EndStep(); err != nil {
		s.t.Fatalf("EndStep: %v", err)
	}
	if err := st.Await(dst); err != nil {
		s.t.Fatalf("Await: %v", err)
	}
	o, err := st.StopTrace()
	if err != nil || o.Copies != 1 || o.Steps != 1 || o.Fraction < 0 || o.Fraction > 1 {
		s.t.Errorf("StopTrace = %+v, %v; want 1 copy, 1 step, a fraction in [0, 1]", o, err)
	}
	same(s.t, "StageAhead and Await", s.get(dst), want3)
	if err := st.Await(dst); err == nil {
		s.t.Error("a second Await with nothing staged ahead returned no error")
	}
	checkInlineStager(s, st, n)
	if err := st.Close(); err != nil {
		s.t.Errorf("Close: %v", err)
	}
}

// checkInlineStager: where st is a kernels.InlineStager, StageInline
// lands after the work enqueued on the device's stream before it (a Fill
// of dst) and before the work enqueued after (a copy out of dst), through
// both pinned buffers in turn, and refuses a batch of the wrong size.
func checkInlineStager(s *suite, st kernels.Stager, n int) {
	is, ok := st.(kernels.InlineStager)
	if !ok {
		return
	}
	dst := s.out(tensor.F32, n)
	for round := range 3 { // 3 batches through 2 buffers: one reused
		want, b := s.hostBatch(n)
		s.b.Fill(dst, float64(round+7))
		if err := is.StageInline(dst, b); err != nil {
			s.t.Fatalf("StageInline: %v", err)
		}
		after := s.out(tensor.F32, n)
		s.b.Copy(after, dst)
		same(s.t, "StageInline", s.get(dst), want)
		same(s.t, "StageInline, then a copy on the device's stream", s.get(after), want)
	}
	if err := is.StageInline(dst, make([]byte, 4*n-4)); err == nil {
		s.t.Error("StageInline of fewer bytes than dst's returned no error")
	}
}

// checkGraphCloser: a captured graph that implements GraphCloser replays,
// then closes without error (and a second Close is harmless).
func checkGraphCloser(s *suite) {
	if s.o.NoCapture {
		s.t.Skip("the backend does not capture")
	}
	x := s.out(tensor.F32, 8)
	if err := s.b.BeginCapture(); err != nil {
		s.t.Fatalf("BeginCapture: %v", err)
	}
	s.b.Fill(x, 3)
	g, err := s.b.EndCapture()
	if err != nil {
		s.t.Fatalf("EndCapture: %v", err)
	}
	c, ok := g.(kernels.GraphCloser)
	if !ok {
		s.t.Skipf("%T's graphs do not implement kernels.GraphCloser", s.b)
	}
	g.Replay()
	same(s.t, "the replayed Fill", s.get(x), []float64{3, 3, 3, 3, 3, 3, 3, 3})
	if err := c.Close(); err != nil {
		s.t.Errorf("Close: %v", err)
	}
	if err := c.Close(); err != nil {
		s.t.Errorf("a second Close: %v", err)
	}
}
