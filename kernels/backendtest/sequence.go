package backendtest

import (
	"github.com/esper-go/esper/kernels"
	"github.com/esper-go/esper/tensor"
)

// The block sequence (kernels.BlockSequencer).

var sequenceCases = []conformance{
	optional[kernels.BlockSequencer](checkBlockSequence, "BeginSequence", "EndSequence"),
}

// seqProgram is a small linear model's epoch as a trainer's epoch graph
// runs it — a ZeroMany of the metrics and gradients, SGD steps
// (LinearCESGDStep), then validation batches (LinearCrossEntropyCount)
// — with a call a sequence cannot join between the two passes: the
// weights copied (Copy) to the tensor the validation reads, so that the
// copy must come after the held-back steps that update them and before
// the held-back validation that reads the copy.
type seqProgram struct {
	m, k, n []int // per training step, then per validation batch: rows
	k0, n0  int   // features and classes
	steps   int
	xs, ts  []*T
	p       kernels.CrossEntropyParams
	o       kernels.SGDOptions
}

// seqState is what a seqProgram writes.
type seqState struct {
	a                  linearArena
	trainSums, valSums *T // F32 [2]
	trainAcc, valAcc   []*T
	logits, loss, dl   []*T
	wv, bv             *T
}

func (st *seqState) writes() []*T {
	out := []*T{st.a.param, st.a.grad, st.a.mom, st.a.hyper, st.trainSums, st.valSums, st.wv, st.bv}
	out = append(out, st.trainAcc...)
	out = append(out, st.valAcc...)
	out = append(out, st.logits...)
	out = append(out, st.loss...)
	for _, d := range st.dl {
		if d != nil {
			out = append(out, d)
		}
	}
	return out
}

// newSeqState draws the program's starting state.
func (s *suite) newSeqState(pr *seqProgram) *seqState {
	st := &seqState{a: s.linearArena(pr.n0, pr.k0, true, 0)}
	st.trainSums, st.valSums = s.f32(s.normals(2), 2), s.f32(s.normals(2), 2)
	st.wv, st.bv = s.out(tensor.F32, pr.n0, pr.k0), s.out(tensor.F32, pr.n0)
	for i, m := range pr.m {
		_, av := s.ceMetrics(m)
		acc := s.f32(av, m)
		if i < pr.steps {
			st.trainAcc = append(st.trainAcc, acc)
			st.dl = append(st.dl, s.out(tensor.F32, m, pr.n0))
		} else {
			st.valAcc = append(st.valAcc, acc)
			st.dl = append(st.dl, nil)
		}
		st.logits = append(st.logits, s.out(tensor.F32, m, pr.n0))
		st.loss = append(st.loss, s.out(tensor.F32))
	}
	return st
}

// cloneSeqState is a copy of st made by the backend.
func (s *suite) cloneSeqState(st *seqState, pr *seqProgram) *seqState {
	c := &seqState{}
	param, grad, mom, hyper := s.clone(st.a.param), s.clone(st.a.grad), s.clone(st.a.mom), s.clone(st.a.hyper)
	nk := pr.n0 * pr.k0
	c.a = linearArena{param: param, grad: grad, mom: mom, hyper: hyper,
		w: param.Narrow(0, 0, nk).Reshape(pr.n0, pr.k0), b: param.Narrow(0, nk, pr.n0),
		gw: grad.Narrow(0, 0, nk).Reshape(pr.n0, pr.k0), gb: grad.Narrow(0, nk, pr.n0)}
	c.trainSums, c.valSums, c.wv, c.bv = s.clone(st.trainSums), s.clone(st.valSums), s.clone(st.wv), s.clone(st.bv)
	for _, t := range st.trainAcc {
		c.trainAcc = append(c.trainAcc, s.clone(t))
	}
	for _, t := range st.valAcc {
		c.valAcc = append(c.valAcc, s.clone(t))
	}
	for i := range st.logits {
		c.logits = append(c.logits, s.clone(st.logits[i]))
		c.loss = append(c.loss, s.clone(st.loss[i]))
		var d *T
		if st.dl[i] != nil {
			d = s.clone(st.dl[i])
		}
		c.dl = append(c.dl, d)
	}
	return c
}

// run launches the program on st, as one sequence when seq. It reports
// whether every fused call ran (a backend may decline them).
func (s *suite) runSeq(pr *seqProgram, st *seqState, seq bool) bool {
	s.t.Helper()
	ls := s.b.(kernels.LinearCESGDStepper)
	lc := s.b.(kernels.LinearCrossEntropyCounter)
	zm := s.b.(kernels.ZeroManyer)
	bs := s.b.(kernels.BlockSequencer)
	if seq {
		bs.BeginSequence()
	}
	all := true
	zm.ZeroMany([]*T{st.trainSums, st.valSums, st.a.grad})
	for i := 0; i < pr.steps; i++ {
		o := pr.o
		o.ZeroGrad = i < pr.steps-1 // as an epoch graph's steps but the last
		all = ls.LinearCESGDStep(st.logits[i], st.loss[i], pr.xs[i], st.a.w, st.a.b, pr.ts[i], pr.p,
			st.trainSums.Narrow(0, 0, 1), st.trainAcc[i], st.dl[i], st.a.gw, st.a.gb, st.a.param, st.a.grad, st.a.mom, st.a.hyper, o) && all
	}
	s.b.Copy(st.wv, st.a.w)
	s.b.Copy(st.bv, st.a.b)
	for j := pr.steps; j < len(pr.m); j++ {
		all = lc.LinearCrossEntropyCount(st.logits[j], st.loss[j], pr.xs[j], st.wv, st.bv, pr.ts[j], pr.p,
			st.valSums.Narrow(0, 0, 1), st.valAcc[j-pr.steps], nil) && all
	}
	if seq {
		if err := bs.EndSequence(); err != nil {
			s.t.Fatalf("EndSequence: %v", err)
		}
	}
	return all
}

// checkBlockSequence: a sequence changes no bit of what its calls write.
// A small linear model's epoch (seqProgram) run as one sequence writes
// bit for bit what it writes call by call, eagerly and replayed from a
// capture: W1's epoch (4 steps and 4 validation batches of 4 rows), an
// epoch whose batches change size (another block size: held-back steps
// launch before the step that does not fit beside them), and one of 24
// steps (more than one launch's argument space). EndSequence outside a
// sequence is an error.
func checkBlockSequence(s *suite) {
	_, ok1 := s.b.(kernels.LinearCESGDStepper)
	_, ok2 := s.b.(kernels.LinearCrossEntropyCounter)
	_, ok3 := s.b.(kernels.ZeroManyer)
	if !ok1 || !ok2 || !ok3 {
		s.t.Skip("the backend joins nothing this check can call (LinearCESGDStep, LinearCrossEntropyCount, ZeroMany)")
	}
	bs := s.b.(kernels.BlockSequencer)
	if err := bs.EndSequence(); err == nil {
		s.t.Errorf("EndSequence outside a sequence: no error")
	}
	rows := func(train, val []int) []int { return append(append([]int{}, train...), val...) }
	cases := []struct {
		what       string
		train, val []int
		k, n       int
	}{
		{"W1's epoch", []int{4, 4, 4, 4}, []int{4, 4, 4, 4}, 16, 4},
		{"batch sizes change", []int{4, 40, 40, 3}, []int{40, 4}, 8, 5},
		{"24 steps", make([]int, 24), []int{6, 6}, 6, 3},
	}
	for i := range cases[2].train {
		cases[2].train[i] = 6
	}
	for _, c := range cases {
		for pi, p := range countParams {
			pr := &seqProgram{m: rows(c.train, c.val), k0: c.k, n0: c.n, steps: len(c.train), p: p,
				o: kernels.SGDOptions{Momentum: 0.9}}
			for _, m := range pr.m {
				x, _ := s.in(tensor.F32, m, c.k)
				tg, _ := s.put(tensor.I64, s.ceTargets(m, c.n, p), m)
				pr.xs, pr.ts = append(pr.xs, x), append(pr.ts, tg)
			}
			st := s.newSeqState(pr)
			ref := s.cloneSeqState(st, pr)
			fused := s.runSeq(pr, ref, false)
			want := s.read(ref.writes())
			what := name("BlockSequence", c.what, "params", pi)
			s.check(call{what: what, launch: func() { s.runSeq(pr, st, true) }, writes: st.writes()}, func(got [][]float64) {
				for i := range got {
					same(s.t, name(what, "written", i, "(against the calls one by one)"), got[i], want[i])
				}
			})
			if !fused {
				s.t.Logf("%s: some calls not fused on this backend", what)
			}
		}
	}
}
