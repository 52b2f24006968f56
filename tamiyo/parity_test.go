package tamiyo

import (
	"encoding/json"
	"flag"
	"math"
	"os"
	"path/filepath"
	"testing"

	"github.com/esper-go/esper/autograd"
	"github.com/esper-go/esper/internal/testdevice"
	"github.com/esper-go/esper/leyline"
	"github.com/esper-go/esper/nn"
	"github.com/esper-go/esper/tensor"
)

// The parity fixture compares the policy with an independent PyTorch
// implementation of the same network (testdata/policy_parity.py, plain
// torch, float64). To regenerate it:
//
//	go test ./tamiyo -run TestPolicyParity -tamiyo.write-parity-input
//	python3 tamiyo/testdata/policy_parity.py
//
// The first writes the graph, weights and loss weights; the second the
// reference outputs and parameter gradients.
var writeParityInput = flag.Bool("tamiyo.write-parity-input", false, "write testdata/policy_parity_input.json from a fresh policy and graph")

const (
	parityInputFile   = "testdata/policy_parity_input.json"
	parityFixtureFile = "testdata/policy_parity_fixture.json"
	// parityTol bounds max|ours − reference| / max|reference| per tensor
	// (F32 against a float64 reference). For gradients the denominator is
	// floored at parityGradFloor times the largest reference gradient of
	// the model: some gradients are exactly zero in exact arithmetic (an
	// attention vector whose term cancels in the softmax when every
	// incoming logit of a node is on the same side of the LeakyReLU), and
	// against those F32 round-off (~1e-13 here) would read as an infinite
	// relative error.
	parityTol       = 1e-5
	parityGradFloor = 1e-6
)

type parityParam struct {
	Name  string    `json:"name"`
	Shape []int     `json:"shape"`
	Data  []float64 `json:"data"`
}

type parityInput struct {
	Options struct {
		Hidden, GATHidden, GATHeads, HeadHidden, BlueprintEmbedding int
	} `json:"options"`
	Graph       *Graph               `json:"graph"`
	Params      []parityParam        `json:"params"`
	LossWeights map[string][]float64 `json:"loss_weights"`
}

type parityFixture struct {
	Outputs map[string][]float64 `json:"outputs"`
	Grads   map[string][]float64 `json:"grads"`
}

// parityOutputs names the outputs the loss reads: every head but the
// padded slot logits, the slot scores and the value.
func parityOutputs(out *PolicyOutput) map[string]*autograd.Var {
	m := map[string]*autograd.Var{"slot_scores": out.SlotScores, "value": out.Value}
	for h, name := range leyline.HeadNames {
		if h != leyline.HeadSlot {
			m[name] = out.Logits[h]
		}
	}
	return m
}

func parityOptions() PolicyOptions {
	return PolicyOptions{Hidden: 8, GATHidden: 4, GATHeads: 2, HeadHidden: 6, NoDropout: true, Seed: 21}
}

// writeParity writes the fixture's input from a CPU policy (a file
// generator, run by hand with -write-parity-input).
func writeParity(t *testing.T) {
	p := newPolicy(t, parityOptions())
	// Random biases and norms everywhere, so no term hides behind a zero.
	rng := tensor.NewRNG(77)
	for _, n := range p.NamedParameters() {
		if len(n.Var.Shape()) == 1 {
			copy(n.Var.Value.F32(), tensor.Uniform(rng, tensor.F32, -0.3, 0.3, n.Var.Shape()...).F32())
		}
	}
	g, err := BuildGraphBatch([]GraphInput{testInput(t, 3, 0), testInput(t, 1, 1), testInput(t, 5, 2)})
	if err != nil {
		t.Fatal(err)
	}
	in := parityInput{Graph: g, LossWeights: map[string][]float64{}}
	o := p.Options()
	in.Options.Hidden, in.Options.GATHidden, in.Options.GATHeads = o.Hidden, o.GATHidden, o.GATHeads
	in.Options.HeadHidden, in.Options.BlueprintEmbedding = o.HeadHidden, o.BlueprintEmbedding
	for _, n := range p.NamedParameters() {
		in.Params = append(in.Params, parityParam{Name: n.Name, Shape: n.Var.Shape(), Data: n.Var.Value.Float64s()})
	}
	out, err := p.Run(g)
	if err != nil {
		t.Fatal(err)
	}
	for name, v := range parityOutputs(out) {
		in.LossWeights[name] = tensor.Uniform(rng, tensor.F64, -1, 1, v.Value.Numel()).F64()
	}
	b, err := json.Marshal(in)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(parityInputFile, b, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("wrote %s; now run python3 tamiyo/testdata/%s", parityInputFile, filepath.Base("policy_parity.py"))
}

func readJSON(t *testing.T, path string, v any) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, v); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
}

// maxAbs returns max|v|.
func maxAbs(v []float64) float64 {
	m := 0.0
	for _, x := range v {
		m = math.Max(m, math.Abs(x))
	}
	return m
}

// relErr returns max|a − b| / max(max|b|, floor).
func relErr(a, b []float64, floor float64) float64 {
	var d float64
	for i := range b {
		d = math.Max(d, math.Abs(a[i]-b[i]))
	}
	m := math.Max(maxAbs(b), floor)
	if m == 0 {
		return d
	}
	return d / m
}

func TestPolicyParity(t *testing.T) {
	if *writeParityInput {
		writeParity(t)
		return
	}
	var in parityInput
	var fx parityFixture
	readJSON(t, parityInputFile, &in)
	readJSON(t, parityFixtureFile, &fx)

	o := parityOptions()
	o.Hidden, o.GATHidden, o.GATHeads = in.Options.Hidden, in.Options.GATHidden, in.Options.GATHeads
	o.HeadHidden, o.BlueprintEmbedding = in.Options.HeadHidden, in.Options.BlueprintEmbedding
	p := nn.Eval(mustPolicy(t, o))
	params := map[string]*autograd.Var{}
	for _, n := range p.NamedParameters() {
		params[n.Name] = n.Var
	}
	if len(in.Params) != len(params) {
		t.Fatalf("fixture has %d parameters, the policy %d", len(in.Params), len(params))
	}
	sd := map[string]*tensor.Tensor{}
	for _, pp := range in.Params {
		v, ok := params[pp.Name]
		if !ok || !tensor.SameShape(v.Shape(), pp.Shape) {
			t.Fatalf("fixture parameter %s %v does not match the policy", pp.Name, pp.Shape)
		}
		sd[pp.Name] = testdevice.To(t, tensor.FromFloat64s(tensor.F32, pp.Data, pp.Shape...))
	}
	if err := nn.LoadStateDict(p, sd, false); err != nil {
		t.Fatal(err)
	}

	out, err := p.Run(in.Graph)
	if err != nil {
		t.Fatal(err)
	}
	outs := parityOutputs(out)
	var loss *autograd.Var
	for name, v := range outs {
		want := fx.Outputs[name]
		got := testdevice.F64(t, v.Value)
		if len(got) != len(want) {
			t.Fatalf("output %s: %d values, fixture %d", name, len(got), len(want))
		}
		if e := relErr(got, want, 0); e > parityTol {
			t.Errorf("output %s: relative error %.3g > %g", name, e, parityTol)
		}
		w := autograd.Const(testdevice.To(t, tensor.FromFloat64s(tensor.F32, in.LossWeights[name], v.Shape()...)))
		term := autograd.SumAll(autograd.Mul(v, w))
		if loss == nil {
			loss = term
		} else {
			loss = autograd.Add(loss, term)
		}
	}
	autograd.Backward(loss)
	scale := 0.0
	for _, g := range fx.Grads {
		scale = math.Max(scale, maxAbs(g))
	}
	worst, where := 0.0, ""
	for name, v := range params {
		want, ok := fx.Grads[name]
		if !ok {
			t.Fatalf("fixture has no gradient for %s", name)
		}
		got := make([]float64, len(want))
		if v.Grad != nil {
			got = testdevice.F64(t, v.Grad)
		}
		e := relErr(got, want, parityGradFloor*scale)
		if e > worst {
			worst, where = e, name
		}
		if e > parityTol {
			t.Errorf("gradient of %s: relative error %.3g > %g", name, e, parityTol)
		}
	}
	t.Logf("worst gradient relative error %.3g (%s) over %d parameters", worst, where, len(params))
}
