package backendtest

import (
	"github.com/esper-go/esper/kernels"
	"github.com/esper-go/esper/tensor"
)

// The capture family: BeginCapture, EndCapture, Capturing, Synchronize
// and the Graph they return (Replay, Len). Every other check also
// replays its calls captured (suite.check); this one checks the
// protocol and a graph of several launches whose scalars change between
// replays.

var captureCases = []conformance{
	of(checkCapture, "BeginCapture", "EndCapture", "Capturing", "Synchronize", "Replay", "Len"),
}

func checkCapture(s *suite) {
	if err := s.b.Synchronize(); err != nil {
		s.t.Fatalf("Synchronize outside a capture: %v", err)
	}
	if s.b.Capturing() {
		s.t.Fatal("Capturing() is true before any capture")
	}
	if _, err := s.b.EndCapture(); err == nil {
		s.t.Error("EndCapture without BeginCapture returned no error")
	}
	if s.o.NoCapture {
		s.t.Skip("the backend does not capture")
	}

	// A step of several launches: y = relu(a + b), r = Σ y over axis 1,
	// one SGD step of p by g with the learning rate read from hyper, and
	// a counter.
	d := tensor.F32
	if fs := s.floats("SGDStep", tensor.F32, tensor.F64); len(fs) > 0 {
		d = fs[0]
	}
	a, av := s.in(d, 4, 6)
	b, bv := s.in(d, 6)
	y, r := s.out(d, 4, 6), s.out(d, 4, 1)
	p, pv := s.in(d, 50)
	g, gv := s.in(d, 50)
	hyper, _ := s.put(tensor.F64, []float64{0.1, 1}, 2)
	counter, _ := s.put(tensor.F32, []float64{0}, 1)
	step := func() {
		s.b.Binary(kernels.Add, y, a, b)
		s.b.Unary(kernels.Relu, y, y)
		s.b.Reduce(kernels.Sum, r, y, []int{1})
		s.b.SGDStep(p, g, nil, hyper, nil, kernels.SGDOptions{})
		s.b.Increment(counter, nil)
	}

	if err := s.b.BeginCapture(); err != nil {
		s.t.Fatalf("BeginCapture: %v", err)
	}
	if err := s.b.BeginCapture(); err == nil {
		s.t.Error("a second BeginCapture during a capture returned no error")
	}
	if !s.b.Capturing() {
		s.t.Error("Capturing() is false during a capture")
	}
	step()
	graph, err := s.b.EndCapture()
	if err != nil {
		s.t.Fatalf("EndCapture: %v", err)
	}
	if s.b.Capturing() {
		s.t.Error("Capturing() is true after EndCapture")
	}
	if graph.Len() < 5 {
		s.t.Errorf("a capture of five calls has %d launches", graph.Len())
	}
	same(s.t, "the counter after capturing", s.get(counter), []float64{0})
	same(s.t, "p after capturing", s.get(p), pv)

	wantY, wantR := make([]float64, 24), make([]float64, 4)
	for i := range wantY {
		wantY[i] = max(av[i]+bv[i%6], 0)
		wantR[i/6] += wantY[i]
	}
	wantP := append([]float64(nil), pv...)
	for rep, lr := range []float64{0.1, 0.5, 0.5} {
		if rep == 1 {
			s.b.Fill(hyper.Narrow(0, 0, 1), lr) // the replay reads the new rate
		}
		graph.Replay()
		for i := range wantP {
			wantP[i] -= lr * gv[i]
		}
		s.close(name("replay", rep, "y"), s.get(y), wantY, tol(d))
		s.close(name("replay", rep, "r"), s.get(r), wantR, 2*tol(d))
		s.close(name("replay", rep, "p"), s.get(p), wantP, 2*tol(d))
		same(s.t, name("replay", rep, "counter"), s.get(counter), []float64{float64(rep + 1)})
	}
	if err := s.b.Synchronize(); err != nil {
		s.t.Errorf("Synchronize after replays: %v", err)
	}
}
