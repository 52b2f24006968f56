//go:build cuda

package cuda

// Multi-tensor apply against the CPU backend (GPU runs only, like every
// test of this package): lists mixing tiny tensors, tensors on both sides
// of a chunk boundary and misaligned views (the scalar path), updated in
// one launch, agree with the CPU's per-tensor loops; a captured step is
// one graph node per launch and replays like the eager step; a list first
// seen during a capture falls back to one launch per tensor.

import (
	"fmt"
	"math"
	"testing"

	"github.com/esper-go/esper/kernels"
	"github.com/esper-go/esper/tensor"
)

// mtSizes cross the chunk size (16384) and the float4 tail.
var mtSizes = []int{1, 3, 300, 16384, 16385, 40007, 5, 70000}

// mtList is one operand list on the host and on the device; with
// misaligned set, every third device tensor is a view one element into a
// larger block, so its address is not 16-byte aligned.
func mtList(t *testing.T, rng func(n int) *tensor.Tensor, misaligned bool) (host, devs []*tensor.Tensor) {
	t.Helper()
	for i, n := range mtSizes {
		h := rng(n)
		host = append(host, h)
		if misaligned && i%3 == 1 {
			block := devEmpty(t, tensor.F32, n+1)
			view := block.Narrow(0, 1, n)
			if err := dev.Copy(view, toDev(t, h)); err != nil {
				t.Fatal(err)
			}
			devs = append(devs, view)
			continue
		}
		devs = append(devs, toDev(t, h))
	}
	return host, devs
}

// closeList compares a device list with its host reference.
func closeList(t *testing.T, what string, got, want []*tensor.Tensor, tol float64) {
	t.Helper()
	for i := range got {
		closeRel(t, fmt.Sprintf("%s[%d] (%d elements)", what, i, want[i].Numel()), fromDev(t, got[i]), want[i], tol)
	}
}

// TestForeachStepsMatchCPU: ForeachSGDStep (each SGD variant) and
// ForeachAdamWStep over mixed lists agree with the CPU backend's
// SGDStep/AdamWStep run tensor by tensor, and foundInf skips the update.
func TestForeachStepsMatchCPU(t *testing.T) {
	rng := tensor.NewRNG(300)
	normal := func(n int) *tensor.Tensor { return tensor.Normal(rng, tensor.F32, 0, 1, n) }
	zeros := func(n int) *tensor.Tensor { return tensor.Zeros(tensor.F32, n) }
	for _, o := range []kernels.SGDOptions{{}, {Momentum: 0.9}, {Momentum: 0.9, Nesterov: true, WeightDecay: 1e-2}, {Momentum: 0.8, Dampening: 0.1, Maximize: true}} {
		p, pd := mtList(t, normal, true)
		var m, md []*tensor.Tensor
		if o.Momentum != 0 {
			m, md = mtList(t, zeros, true)
		}
		for step := 1; step <= 5; step++ {
			g, gd := mtList(t, normal, false)
			hyper := tensor.FromSlice([]float64{0.01, float64(step)}, 2)
			for i := range p {
				var mi *tensor.Tensor
				if m != nil {
					mi = m[i]
				}
				cpuBE.SGDStep(p[i], g[i], mi, hyper, nil, o)
			}
			if err := dev.ForeachSGDStep(pd, gd, md, toDev(t, hyper), nil, o); err != nil {
				t.Fatal(err)
			}
		}
		closeList(t, fmt.Sprintf("foreach sgd %+v", o), pd, p, 1e-5)
	}
	p, pd := mtList(t, normal, true)
	m, md := mtList(t, zeros, false)
	v, vd := mtList(t, zeros, true)
	o := kernels.AdamWOptions{Beta1: 0.9, Beta2: 0.999, Eps: 1e-8, WeightDecay: 0.01}
	inf := toDev(t, tensor.Zeros(tensor.F32, 1))
	for step := 1; step <= 20; step++ {
		g, gd := mtList(t, normal, true)
		hyper := tensor.FromSlice([]float64{1e-3, float64(step)}, 2)
		for i := range p {
			cpuBE.AdamWStep(p[i], g[i], m[i], v[i], hyper, nil, o)
		}
		if err := dev.ForeachAdamWStep(pd, gd, md, vd, toDev(t, hyper), inf, o); err != nil {
			t.Fatal(err)
		}
	}
	closeList(t, "foreach adamw", pd, p, 1e-5)
	closeList(t, "foreach adamw v", vd, v, 1e-5)
	if err := dev.Fill(inf, 1); err != nil {
		t.Fatal(err)
	}
	_, gd := mtList(t, normal, false)
	if err := dev.ForeachAdamWStep(pd, gd, md, vd, toDev(t, tensor.FromSlice([]float64{1e-3, 21}, 2)), inf, o); err != nil {
		t.Fatal(err)
	}
	closeList(t, "foreach adamw skipped on found_inf", pd, p, 1e-5)
	// Misuse is an error, not a launch.
	if err := dev.ForeachSGDStep(pd, gd[:2], nil, toDev(t, tensor.FromSlice([]float64{1, 1}, 2)), nil, kernels.SGDOptions{}); err == nil {
		t.Fatal("lists of different lengths were accepted")
	}
	if err := dev.ForeachSGDStep(pd, gd, nil, toDev(t, tensor.FromSlice([]float64{1, 1}, 2)), nil, kernels.SGDOptions{Momentum: 0.9}); err == nil {
		t.Fatal("momentum without buffers was accepted")
	}
}

// TestForeachListOpsMatchCPU: ForeachNorm, ForeachScale, ForeachAxpy and
// UnscaleCheck over multi-chunk lists with misaligned views (and a norm
// over a list of one tensor).
func TestForeachListOpsMatchCPU(t *testing.T) {
	rng := tensor.NewRNG(301)
	normal := func(n int) *tensor.Tensor { return tensor.Normal(rng, tensor.F32, 0, 1, n) }
	xs, xsD := mtList(t, normal, true)
	ys, ysD := mtList(t, normal, true)
	want := tensor.Empty(tensor.F64, len(xs))
	cpuBE.ForeachNorm(want, xs)
	got := devEmpty(t, tensor.F64, len(xs))
	if err := dev.ForeachNorm(got, xsD); err != nil {
		t.Fatal(err)
	}
	closeRel(t, "foreach norm", fromDev(t, got), want, 1e-5)
	one := tensor.Empty(tensor.F32, 1) // a one-tensor list: one launch per tensor
	cpuBE.ForeachNorm(one, xs[7:])
	oneD := devEmpty(t, tensor.F32, 1)
	if err := dev.ForeachNorm(oneD, xsD[7:]); err != nil {
		t.Fatal(err)
	}
	closeRel(t, "foreach norm of one tensor", fromDev(t, oneD), one, 1e-5)
	s := tensor.FromSlice([]float32{0.75}, 1)
	cpuBE.ForeachScale(xs, s)
	if err := dev.ForeachScale(xsD, toDev(t, s)); err != nil {
		t.Fatal(err)
	}
	closeList(t, "foreach scale", xsD, xs, 1e-6)
	cpuBE.ForeachAxpy(ys, xs, -0.3)
	if err := dev.ForeachAxpy(ysD, xsD, -0.3); err != nil {
		t.Fatal(err)
	}
	closeList(t, "foreach axpy", ysD, ys, 1e-6)
	inv := tensor.FromSlice([]float32{1.0 / 1024}, 1)
	found := tensor.Zeros(tensor.F32, 1)
	foundD := toDev(t, found)
	cpuBE.UnscaleCheck(xs, inv, found)
	if err := dev.UnscaleCheck(xsD, toDev(t, inv), foundD); err != nil {
		t.Fatal(err)
	}
	closeRel(t, "found inf (clean)", fromDev(t, foundD), found, 0)
	closeList(t, "unscaled", xsD, xs, 1e-6)
	if err := dev.Fill(xsD[5].Narrow(0, 40000, 1), math.Inf(1)); err != nil {
		t.Fatal(err)
	}
	if err := dev.UnscaleCheck(xsD, toDev(t, inv), foundD); err != nil {
		t.Fatal(err)
	}
	closeRel(t, "found inf (poisoned)", fromDev(t, foundD), tensor.Ones(tensor.F32, 1), 0)
}

// TestForeachStepCaptured: an SGD step over 200 tensors (the counter
// increment and one multi-tensor launch) captures into a graph of two
// nodes whose replays equal the same steps run eagerly on a copy.
func TestForeachStepCaptured(t *testing.T) {
	rng := tensor.NewRNG(302)
	const k = 200
	mk := func() (a, b []*tensor.Tensor) {
		for i := 0; i < k; i++ {
			h := tensor.Normal(rng, tensor.F32, 0, 1, 100+37*i)
			a, b = append(a, toDev(t, h)), append(b, toDev(t, h))
		}
		return a, b
	}
	p1, p2 := mk()
	g1, g2 := mk()
	m1, m2 := mk()
	h1 := toDev(t, tensor.FromSlice([]float64{0.01, 0}, 2))
	h2 := toDev(t, tensor.FromSlice([]float64{0.01, 0}, 2))
	o := kernels.SGDOptions{Momentum: 0.9}
	step := func(p, g, m []*tensor.Tensor, h *tensor.Tensor) error {
		if err := dev.Increment(h.Narrow(0, 1, 1), nil); err != nil {
			return err
		}
		return dev.ForeachSGDStep(p, g, m, h, nil, o)
	}
	if err := step(p1, g1, m1, h1); err != nil { // eager: uploads the table
		t.Fatal(err)
	}
	if err := step(p2, g2, m2, h2); err != nil {
		t.Fatal(err)
	}
	gr, err := dev.Capture(func() error { return step(p1, g1, m1, h1) })
	if err != nil {
		t.Fatal(err)
	}
	defer gr.Close()
	if gr.Nodes() != 2 {
		t.Fatalf("captured foreach SGD step has %d nodes, want 2 (increment, one multi-tensor launch)", gr.Nodes())
	}
	for i := 0; i < 3; i++ {
		if err := gr.Replay(); err != nil {
			t.Fatal(err)
		}
		if err := step(p2, g2, m2, h2); err != nil {
			t.Fatal(err)
		}
	}
	for i := range p1 {
		closeRel(t, fmt.Sprintf("replayed param %d", i), fromDev(t, p1[i]), fromDev(t, p2[i]), 0)
	}
}

// TestForeachCaptureMissFallsBack: a list whose table was never uploaded
// is captured as one launch per tensor, and the replays are right.
func TestForeachCaptureMissFallsBack(t *testing.T) {
	rng := tensor.NewRNG(303)
	var xs, xsD []*tensor.Tensor
	for _, n := range []int{4321, 987, 65} { // sizes no other test uses
		x := tensor.Normal(rng, tensor.F32, 0, 1, n)
		xs, xsD = append(xs, x), append(xsD, toDev(t, x))
	}
	s := tensor.FromSlice([]float32{0.5}, 1)
	sD := toDev(t, s)
	gr, err := dev.Capture(func() error { return dev.ForeachScale(xsD, sD) })
	if err != nil {
		t.Fatal(err)
	}
	defer gr.Close()
	if gr.Nodes() != len(xs) {
		t.Fatalf("capture of an unseen list has %d nodes, want one per tensor (%d)", gr.Nodes(), len(xs))
	}
	for i := 0; i < 2; i++ {
		if err := gr.Replay(); err != nil {
			t.Fatal(err)
		}
		cpuBE.ForeachScale(xs, s)
	}
	closeList(t, "replayed per-tensor scale", xsD, xs, 1e-6)
}
