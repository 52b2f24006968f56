package autograd

import (
	"testing"

	"github.com/esper-go/esper/tensor"
)

func TestGradCheckVarsOnHeldParameters(t *testing.T) {
	rng := tensor.NewRNG(3)
	w := Param(tensor.Normal(rng, tensor.F64, 0, 1, 3, 4))
	b := Param(tensor.Normal(rng, tensor.F64, 0, 1, 3))
	x := Param(tensor.Normal(rng, tensor.F64, 0, 1, 2, 4))
	before := w.Value.Clone()
	f := func() *Var { return Tanh(Linear(x, w, b)) }
	if err := GradCheckVars(f, []*Var{w, b, x}, GradCheckOptions{}); err != nil {
		t.Fatal(err)
	}
	// Values are restored after the perturbations.
	for i, v := range w.Value.F64() {
		if v != before.F64()[i] {
			t.Fatalf("weight element %d changed: %g -> %g", i, before.F64()[i], v)
		}
	}
	// A gradient blocked by Detach is wrong (the value still depends on
	// x) and must be caught.
	g := func() *Var { return Tanh(Linear(Detach(x), w, b)) }
	if err := GradCheckVars(g, []*Var{w, b, x}, GradCheckOptions{}); err == nil {
		t.Fatal("a detached input's missing gradient was not caught")
	}
	if err := GradCheckVars(f, []*Var{Const(tensor.Zeros(tensor.F64, 2))}, GradCheckOptions{}); err == nil {
		t.Fatal("a var that does not require grad was accepted")
	}
}
