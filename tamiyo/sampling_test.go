package tamiyo

import (
	"errors"
	"math"
	"reflect"
	"testing"

	"github.com/esper-go/esper/autograd"
	"github.com/esper-go/esper/internal/testdevice"
	"github.com/esper-go/esper/leyline"
	"github.com/esper-go/esper/nn"
	"github.com/esper-go/esper/tensor"
)

// testMasks computes masks for n slots: slot 0 holds a HOLDING seed (age
// 10, alpha HOLD), the others are empty, so every op is valid when n > 1.
// edit may change the mask input first.
func testMasks(t *testing.T, n int, edit func(*leyline.MaskInput)) leyline.ActionMasks {
	t.Helper()
	cfg := testSlots(t, n)
	ids := cfg.IDs()
	in := leyline.MaskInput{
		Slots: cfg, EnabledSlots: ids, Topology: leyline.TopologyCNN,
		SlotStates: map[string]*leyline.MaskSlotState{},
		TotalSeeds: 1,
	}
	for i, id := range ids {
		if i == 0 {
			in.SlotStates[id] = &leyline.MaskSlotState{Stage: leyline.StageHolding, SeedAgeEpochs: 10, AlphaMode: leyline.AlphaHold}
		} else {
			in.SlotStates[id] = nil
		}
	}
	if edit != nil {
		edit(&in)
	}
	m, err := leyline.ComputeActionMasks(in)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// samplingFixture is a small F32 policy on the test device in
// evaluation mode with a batch of three environments (3, 1 and 5 slots)
// and their masks.
func samplingFixture(t *testing.T) (*Policy, *Graph, []leyline.ActionMasks) {
	t.Helper()
	p := nn.Eval(mustPolicy(t, smallOptions(tensor.F32)))
	counts := []int{3, 1, 5}
	var inputs []GraphInput
	var masks []leyline.ActionMasks
	for i, n := range counts {
		inputs = append(inputs, testInput(t, n, i))
		masks = append(masks, testMasks(t, n, nil))
	}
	g, err := BuildGraphBatch(inputs)
	if err != nil {
		t.Fatal(err)
	}
	return p, g, masks
}

// editParam rewrites the F32 parameter name of p in place, on its device:
// f edits a host copy of its values, which is copied back.
func editParam(t *testing.T, p *Policy, name string, f func([]float32)) {
	t.Helper()
	for _, n := range p.NamedParameters() {
		if n.Name != name {
			continue
		}
		h := testdevice.Host(t, n.Var.Value).Clone()
		f(h.F32())
		if err := nn.LoadStateDict(p, map[string]*tensor.Tensor{name: testdevice.To(t, h)}, false); err != nil {
			t.Fatal(err)
		}
		return
	}
	t.Fatalf("no parameter %s", name)
}

// checkCanonical verifies that an action respects its masks and that
// every head irrelevant to its op is at its canonical option with
// log-probability and entropy 0.
func checkCanonical(t *testing.T, r *ActResult, b int, m leyline.ActionMasks) {
	t.Helper()
	a := r.Actions[b]
	op := leyline.LifecycleOp(a[leyline.HeadOp])
	if !m.OpValid(op) {
		t.Fatalf("env %d: sampled masked op %v", b, op)
	}
	rel := leyline.CausalRelevance(op)
	for h := 0; h < leyline.NumActionHeads; h++ {
		switch {
		case h == leyline.HeadOp:
		case h == leyline.HeadSlot && op == leyline.OpWait:
			first := 0
			for !m.Slot()[first] {
				first++
			}
			if a[h] != first {
				t.Errorf("env %d WAIT: slot %d, want the first valid slot %d", b, a[h], first)
			}
		case h == leyline.HeadSlot:
			if !m.SlotByOp[op][a[h]] {
				t.Errorf("env %d: %v on slot %d, where it is not valid", b, op, a[h])
			}
		case !rel[h]:
			if a[h] != canonicalOption[h] {
				t.Errorf("env %d: %v leaves head %s at %d, want canonical %d", b, op, leyline.HeadNames[h], a[h], canonicalOption[h])
			}
		default:
			if !m.Heads[h][a[h]] {
				t.Errorf("env %d: head %s sampled masked option %d", b, leyline.HeadNames[h], a[h])
			}
		}
		if !rel[h] && (r.LogProbs[b][h] != 0 || r.Entropies[b][h] != 0) {
			t.Errorf("env %d: irrelevant head %s has log-prob %v, entropy %v (want 0, 0)", b, leyline.HeadNames[h], r.LogProbs[b][h], r.Entropies[b][h])
		}
		if e := r.Entropies[b][h]; !(e >= 0 && e <= 1) {
			t.Errorf("env %d: head %s entropy %v outside [0, 1]", b, leyline.HeadNames[h], e)
		}
	}
	if m.Heads[leyline.HeadBlueprint][leyline.BlueprintNoop] {
		t.Error("the blueprint mask should exclude NOOP")
	}
	if op == leyline.OpGerminate && a[leyline.HeadBlueprint] == int(leyline.BlueprintNoop) {
		t.Errorf("env %d germinates NOOP", b)
	}
}

func TestActSamplesOnlyValidCanonicalActions(t *testing.T) {
	p, g, masks := samplingFixture(t)
	rng := tensor.NewRNG(7)
	ops := map[leyline.LifecycleOp]int{}
	for i := 0; i < 40; i++ {
		r, err := p.Act(g, masks, ActOptions{Rand: rng})
		if err != nil {
			t.Fatal(err)
		}
		for b := range masks {
			checkCanonical(t, r, b, masks[b])
			ops[leyline.LifecycleOp(r.Actions[b][leyline.HeadOp])]++
			if err := r.Action(b).Validate(g.NumSlots(b)); err != nil {
				t.Fatal(err)
			}
		}
	}
	// The op floor (0.15) keeps every valid op explorable: with 5 valid
	// ops and 120 draws, each is all but certain to appear.
	for op := leyline.LifecycleOp(0); op < leyline.NumOps; op++ {
		if op != leyline.OpAdvance && ops[op] == 0 {
			t.Errorf("op %v never sampled in %v", op, ops)
		}
	}
	if ops[leyline.OpAdvance] != 0 {
		t.Errorf("ADVANCE is masked (HOLDING seed, empty slots) but was sampled %d times", ops[leyline.OpAdvance])
	}
}

func TestActDeterministicIsArgmax(t *testing.T) {
	p, g, masks := samplingFixture(t)
	r1, err := p.Act(g, masks, ActOptions{Deterministic: true})
	if err != nil {
		t.Fatal(err)
	}
	r2, err := p.Act(g, masks, ActOptions{Deterministic: true, Rand: tensor.NewRNG(99)})
	if err != nil {
		t.Fatal(err)
	}
	for b := range masks {
		if r1.Actions[b] != r2.Actions[b] || r1.LogProbs[b] != r2.LogProbs[b] {
			t.Fatalf("env %d: deterministic actions differ: %v vs %v", b, r1.Actions[b], r2.Actions[b])
		}
		d, err := NewMaskedCategorical(r1.OpLogits[b], masks[b].Op(), ProbabilityFloorPerHead[leyline.HeadOp])
		if err != nil {
			t.Fatal(err)
		}
		if got := r1.Actions[b][leyline.HeadOp]; got != d.Mode() {
			t.Errorf("env %d: deterministic op %d, argmax of the floored distribution %d", b, got, d.Mode())
		}
		checkCanonical(t, r1, b, masks[b])
	}
}

func TestActWaitCanonicalisesHeads(t *testing.T) {
	p := nn.Eval(mustPolicy(t, smallOptions(tensor.F32)))
	g := mustGraph(t, testInput(t, 3, 0))
	// Only WAIT is valid: every slot holds a young TRAINING seed (no
	// prune before age 5, germination blocked), ADVANCE disabled; slot 0
	// is not enabled, so the first valid slot is 1.
	m := testMasks(t, 3, func(in *leyline.MaskInput) {
		in.EnabledSlots = []string{"r0c1", "r0c2"}
		in.DisableAdvance = true
		for _, id := range []string{"r0c0", "r0c1", "r0c2"} {
			in.SlotStates[id] = &leyline.MaskSlotState{Stage: leyline.StageTraining, SeedAgeEpochs: 4, AlphaMode: leyline.AlphaHold}
		}
	})
	r, err := p.Act(g, []leyline.ActionMasks{m}, ActOptions{Rand: tensor.NewRNG(1)})
	if err != nil {
		t.Fatal(err)
	}
	if op := leyline.LifecycleOp(r.Actions[0][leyline.HeadOp]); op != leyline.OpWait {
		t.Fatalf("op %v, want WAIT (the only valid op)", op)
	}
	checkCanonical(t, r, 0, m)
	if r.Actions[0][leyline.HeadSlot] != 1 {
		t.Errorf("WAIT slot %d, want 1", r.Actions[0][leyline.HeadSlot])
	}
	for h := 0; h < leyline.NumActionHeads; h++ {
		if r.LogProbs[0][h] != 0 || r.Entropies[0][h] != 0 {
			t.Errorf("head %s: log-prob %v entropy %v, want 0 (single valid option)", leyline.HeadNames[h], r.LogProbs[0][h], r.Entropies[0][h])
		}
	}
	ev, err := p.Evaluate(g, []leyline.ActionMasks{m}, r.Actions, EvaluateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for h := range ev.LogProbs {
		if v := testdevice.F64(t, ev.LogProbs[h].Value)[0]; v != 0 {
			t.Errorf("Evaluate head %s log-prob %v, want 0", leyline.HeadNames[h], v)
		}
	}
}

func TestValueIndependentOfSampledAction(t *testing.T) {
	p, g, masks := samplingFixture(t)
	var first []float32
	for seed := uint64(1); seed <= 4; seed++ {
		r, err := p.Act(g, masks, ActOptions{Rand: tensor.NewRNG(seed), Deterministic: seed == 4})
		if err != nil {
			t.Fatal(err)
		}
		if first == nil {
			first = r.Values
			continue
		}
		for b := range first {
			if r.Values[b] != first[b] {
				t.Fatalf("env %d: value %v with seed %d, %v with seed 1", b, r.Values[b], seed, first[b])
			}
		}
	}
}

// TestEvaluateMatchesAct: Evaluate's log-probabilities, entropies and
// values are Act's, with every head floored (the G2 floors), none, and
// some (the heads computed side by side, floored or not per head).
func TestEvaluateMatchesAct(t *testing.T) {
	p, g, masks := samplingFixture(t)
	rng := tensor.NewRNG(3)
	mixed := [leyline.NumActionHeads]float32{leyline.HeadOp: 0.15, leyline.HeadBlueprint: 0.12, leyline.HeadAlphaSpeed: 0.2}
	for i := 0; i < 6; i++ {
		floors := []*[leyline.NumActionHeads]float32{nil, {}, &mixed}[i%3]
		r, err := p.Act(g, masks, ActOptions{Rand: rng, Floors: floors})
		if err != nil {
			t.Fatal(err)
		}
		ev, err := p.Evaluate(g, masks, r.Actions, EvaluateOptions{Floors: floors})
		if err != nil {
			t.Fatal(err)
		}
		lpAll, entAll := testdevice.F64(t, ev.LogProbsAll.Value), testdevice.F64(t, ev.EntropiesAll.Value)
		for h := 0; h < leyline.NumActionHeads; h++ {
			lp := testdevice.F64(t, ev.LogProbs[h].Value)
			ent := testdevice.F64(t, ev.Entropies[h].Value)
			for b := range masks {
				if d := math.Abs(lp[b] - float64(r.LogProbs[b][h])); d > 1e-5 {
					t.Errorf("floors %v env %d head %s: Evaluate log-prob %v, Act %v", floors, b, leyline.HeadNames[h], lp[b], r.LogProbs[b][h])
				}
				if lpAll[h*len(masks)+b] != lp[b] || entAll[h*len(masks)+b] != ent[b] {
					t.Errorf("env %d head %s: LogProbsAll/EntropiesAll differ from LogProbs/Entropies", b, leyline.HeadNames[h])
				}
				if d := math.Abs(ent[b] - float64(r.Entropies[b][h])); d > 1e-5 {
					t.Errorf("env %d head %s: Evaluate entropy %v, Act %v", b, leyline.HeadNames[h], ent[b], r.Entropies[b][h])
				}
			}
		}
		vals := testdevice.F64(t, ev.Value.Value)
		for b := range masks {
			if math.Abs(vals[b]-float64(r.Values[b])) > 1e-6 {
				t.Errorf("env %d: Evaluate value %v, Act %v", b, vals[b], r.Values[b])
			}
		}
	}
}

func TestEvaluateGradientsReachEveryPart(t *testing.T) {
	p, g, masks := samplingFixture(t)
	r, err := p.Act(g, masks, ActOptions{Rand: tensor.NewRNG(5)})
	if err != nil {
		t.Fatal(err)
	}
	ev, err := p.Evaluate(g, masks, r.Actions, EvaluateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	loss := autograd.SumAll(ev.Value)
	for h := range ev.LogProbs {
		loss = autograd.Add(loss, autograd.SumAll(ev.LogProbs[h]))
		loss = autograd.Add(loss, autograd.SumAll(ev.Entropies[h]))
	}
	autograd.Backward(loss)
	names := []string{"encoders.slot.lin.weight", "blueprint_embedding.weight", "sage1.slot_next_slot.lin_l.weight",
		"gat2.slot_reports_global.att_src", "head_op.fc2.weight", "head_slot.fc1.weight", "value.fc2.weight"}
	// Every head whose action had a choice in some environment (the
	// heads are computed side by side: each must still get its own
	// gradient).
	for h := 0; h < leyline.NumActionHeads; h++ {
		choice := false
		for b, a := range r.Actions {
			eff, err := effectiveMasks(masks[b], leyline.LifecycleOp(a[leyline.HeadOp]))
			if err != nil {
				t.Fatal(err)
			}
			nv := 0
			for _, v := range eff[h] {
				if v {
					nv++
				}
			}
			choice = choice || nv > 1
		}
		if choice {
			names = append(names, "head_"+leyline.HeadNames[h]+".fc2.weight")
		}
	}
	t.Logf("%d heads with a choice", len(names)-7)
	if len(names) < 9 {
		t.Fatalf("only %d heads had a choice: the fixture no longer tests the heads", len(names)-7)
	}
	for _, prefix := range names {
		found := false
		for _, n := range p.NamedParameters() {
			if n.Name != prefix {
				continue
			}
			found = true
			if n.Var.Grad == nil {
				t.Errorf("%s got no gradient", n.Name)
				continue
			}
			nz := false
			for _, v := range testdevice.F64(t, n.Var.Grad) {
				if v != 0 {
					nz = true
					break
				}
			}
			if !nz {
				t.Errorf("%s gradient is all zero", n.Name)
			}
		}
		if !found {
			t.Errorf("no parameter %s", prefix)
		}
	}
}

func TestEvaluateFloorsEveryValidOp(t *testing.T) {
	p, g, masks := samplingFixture(t)
	// Make the op head decisive so the floor binds: scale its output.
	editParam(t, p, "head_op.fc2.weight", func(w []float32) {
		for i := range w {
			w[i] *= 400
		}
	})
	for _, floors := range []*[leyline.NumActionHeads]float32{nil, {}} {
		for op := leyline.LifecycleOp(0); op < leyline.NumOps; op++ {
			if !masks[0].OpValid(op) {
				continue
			}
			acts := make([][leyline.NumActionHeads]int, len(masks))
			for b := range masks {
				eff, err := effectiveMasks(masks[b], leyline.OpWait)
				if err != nil {
					t.Fatal(err)
				}
				a := [leyline.NumActionHeads]int{}
				for h, row := range eff {
					for i, v := range row {
						if v {
							a[h] = i
							break
						}
					}
				}
				acts[b] = a
			}
			acts[0] = [leyline.NumActionHeads]int{}
			eff, _ := effectiveMasks(masks[0], op)
			for h, row := range eff {
				for i := len(row) - 1; i >= 0; i-- {
					if row[i] {
						acts[0][h] = i
						break
					}
				}
			}
			acts[0][leyline.HeadOp] = int(op)
			var ev *Evaluation
			var err error
			autograd.NoGrad(func() { ev, err = p.Evaluate(g, masks, acts, EvaluateOptions{Floors: floors}) })
			if err != nil {
				t.Fatal(err)
			}
			prob := math.Exp(testdevice.F64(t, ev.LogProbs[leyline.HeadOp].Value)[0])
			if floors == nil && prob < 0.15*(1-1e-4) {
				t.Errorf("valid op %v has probability %v under the 0.15 floor", op, prob)
			}
			// Cross-check against leyline's distribution.
			var opLogits []float32
			autograd.NoGrad(func() {
				out, _ := p.Run(g)
				opLogits = tensorRows(testdevice.Host(t, out.Logits[leyline.HeadOp].Value))[0]
			})
			min := ProbabilityFloorPerHead[leyline.HeadOp]
			if floors != nil {
				min = 0
			}
			d, err := NewMaskedCategorical(opLogits, masks[0].Op(), min)
			if err != nil {
				t.Fatal(err)
			}
			want, _ := d.LogProb(int(op))
			if got := testdevice.F64(t, ev.LogProbs[leyline.HeadOp].Value)[0]; math.Abs(got-float64(want)) > 1e-4 {
				t.Errorf("floors %v op %v: Evaluate log-prob %v, leyline %v", floors, op, got, want)
			}
		}
	}
}

func TestActAndEvaluateErrors(t *testing.T) {
	p, g, masks := samplingFixture(t)
	if _, err := p.Act(g, masks, ActOptions{}); err == nil {
		t.Error("sampling without Rand should fail")
	}
	if _, err := p.Act(g, masks[:2], ActOptions{Deterministic: true}); err == nil {
		t.Error("two masks for three environments should fail")
	}
	short := append([]leyline.ActionMasks(nil), masks...)
	short[1] = testMasks(t, 2, nil) // env 1 has one slot
	if _, err := p.Act(g, short, ActOptions{Deterministic: true}); err == nil {
		t.Error("a slot mask of the wrong length should fail")
	}
	neg := ProbabilityFloorPerHead
	neg[leyline.HeadStyle] = -0.1
	if _, err := p.Act(g, masks, ActOptions{Deterministic: true, Floors: &neg}); err == nil {
		t.Error("a negative floor should fail")
	}

	// A mask with no valid op is a state-machine bug.
	empty := append([]leyline.ActionMasks(nil), masks...)
	empty[2].Heads[leyline.HeadOp] = make([]bool, leyline.NumOps)
	_, err := p.Act(g, empty, ActOptions{Deterministic: true})
	var ism *InvalidStateMachineError
	if !errors.As(err, &ism) {
		t.Errorf("all-false op mask: err = %v, want InvalidStateMachineError", err)
	}

	// Evaluate refuses actions the masks forbid.
	r, err := p.Act(g, masks, ActOptions{Deterministic: true})
	if err != nil {
		t.Fatal(err)
	}
	bad := append([][leyline.NumActionHeads]int(nil), r.Actions...)
	bad[0][leyline.HeadOp] = int(leyline.OpAdvance) // masked: no advanceable seed
	if _, err := p.Evaluate(g, masks, bad, EvaluateOptions{}); !errors.Is(err, ErrAction) {
		t.Errorf("masked op: err = %v, want ErrAction", err)
	}
	bad = append([][leyline.NumActionHeads]int(nil), r.Actions...)
	bad[1] = [leyline.NumActionHeads]int{leyline.HeadBlueprint: 3} // WAIT with a non-canonical blueprint
	if _, err := p.Evaluate(g, masks, bad, EvaluateOptions{}); !errors.Is(err, ErrAction) {
		t.Errorf("non-canonical irrelevant head: err = %v, want ErrAction", err)
	}
	if _, err := p.Evaluate(g, masks, r.Actions[:1], EvaluateOptions{}); err == nil {
		t.Error("one action for three environments should fail")
	}

	// Diverged weights give non-finite logits, reported as such.
	editParam(t, p, "head_op.fc2.bias", func(b []float32) { b[0] = float32(math.NaN()) })
	if _, err := p.Act(g, masks, ActOptions{Deterministic: true}); !errors.Is(err, ErrNonFiniteLogits) {
		t.Errorf("NaN logits: err = %v, want ErrNonFiniteLogits", err)
	}
}

// TestSplitRowsCopiesApart: splitRows copies each row out of the
// matrix, and a row appended to never writes into the next.
func TestSplitRowsCopiesApart(t *testing.T) {
	vals := []float32{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11} // [3, 4]
	rows := splitRows(vals, 1, 2, 3, 4)
	want := [][]float32{{1, 2}, {5, 6}, {9, 10}}
	for i := range want {
		if len(rows[i]) != 2 || rows[i][0] != want[i][0] || rows[i][1] != want[i][1] {
			t.Fatalf("rows %v, want %v", rows, want)
		}
	}
	_ = append(rows[0], 99)
	if rows[1][0] != 5 {
		t.Errorf("an append to row 0 wrote into row 1: %v", rows[1])
	}
	vals[1] = -1
	if rows[0][0] != 1 {
		t.Errorf("a row aliases the matrix: %v", rows[0])
	}
}

// TestReadJoinedRowsApart: readJoined cuts each tensor's rows out of the
// joined matrix (its columns in turn), in two allocations shared by all,
// and an append to any row — the last of one tensor's, or one before
// another — writes into no other row. Read through a kept scratch
// buffer (as Inference reads), the rows are the same and alias neither
// the scratch nor the next read's rows.
func TestReadJoinedRowsApart(t *testing.T) {
	cat := tensor.FromSlice([]float32{0, 1, 2, 3, 4, 10, 11, 12, 13, 14, 20, 21, 22, 23, 24}, 3, 5)
	ts := []*tensor.Tensor{tensor.Empty(tensor.F32, 3, 2), tensor.Empty(tensor.F32, 3, 3)}
	want := [][][]float32{{{0, 1}, {10, 11}, {20, 21}}, {{2, 3, 4}, {12, 13, 14}, {22, 23, 24}}}
	var scratch []float32
	for _, sc := range []*[]float32{nil, &scratch, &scratch} {
		out, err := readJoined(cat, ts, sc)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(out, want) {
			t.Fatalf("rows %v, want %v", out, want)
		}
		_ = append(out[0][2], 99) // the first tensor's last row
		_ = append(out[1][0], 98)
		_ = append(out[0], []float32{97})
		if !reflect.DeepEqual(out, want) {
			t.Fatalf("an append wrote into another row: %v", out)
		}
		for i := range scratch {
			scratch[i] = -1 // the next read overwrites it; these rows must not change
		}
		if !reflect.DeepEqual(out, want) {
			t.Fatalf("the rows alias the scratch buffer: %v", out)
		}
	}
	if len(scratch) != 15 {
		t.Fatalf("scratch of %d values, want 15", len(scratch))
	}
}
