//go:build cuda

package cuda

import (
	"fmt"
	"math"
	"math/rand/v2"
	"reflect"
	"sync/atomic"
	"testing"

	"github.com/esper-go/esper/bench"
	"github.com/esper-go/esper/kernels"
	"github.com/esper-go/esper/kernels/backendtest"
	"github.com/esper-go/esper/leyline"
	"github.com/esper-go/esper/tamiyo"
	"github.com/esper-go/esper/tensor"
)

// TestPolicyInferenceOnCUDA: W2's policy on the GPU, in inference —
// the GAT projections joined per node type (autograd.LinearStack, this
// backend being launch-bound), one GATAggregate launch per relation
// accumulating the node type's mean over row-strided projections, SAGE
// products added in place, Concat in one launch — gives the logits and
// values of the CPU's policy with the same weights, captured and eager,
// at batch 1 and 64; an eager forward makes its joined launches
// (Device.Joins: ten at batch 1, six at batch 64, whose products are
// cuBLAS's), and the captured forward's graph nodes are logged and
// bounded. The same again with the joins off (ESPER_CUDA_JOINS=off's
// setting): no joined launch, the same logits.
func TestPolicyInferenceOnCUDA(t *testing.T) {
	defer joinsOff.Store(joinsOff.Load())
	for _, apart := range []bool{false, true} {
		joinsOff.Store(apart)
		name := map[bool]string{false: "joined", true: "joins off"}[apart]
		t.Run(name, func(t *testing.T) { policyInferenceOnCUDA(t, apart) })
	}
}

// policyInferenceOnCUDA is TestPolicyInferenceOnCUDA with the joins on
// or off (apart).
func policyInferenceOnCUDA(t *testing.T, apart bool) {
	for _, n := range []int{1, 64} {
		g, err := bench.W2Graph(n)
		if err != nil {
			t.Fatal(err)
		}
		cpu, err := tamiyo.NewPolicy(tamiyo.PolicyOptions{Seed: 4, NoDropout: true})
		if err != nil {
			t.Fatal(err)
		}
		onDev, err := tamiyo.NewPolicy(tamiyo.PolicyOptions{Seed: 4, NoDropout: true, Device: tensor.CUDA(0)})
		if err != nil {
			t.Fatal(err)
		}
		want, err := tamiyo.NewInference(cpu, tamiyo.InferenceOptions{NoCapture: true})
		if err != nil {
			t.Fatal(err)
		}
		// A second graph of the same shape, other features: forwards
		// alternating between the two copy each into the same kept
		// buffers (through pinned memory, on the device's stream:
		// StageInline), each after the forward before it has read them.
		g2 := *g
		for ty := range g2.Nodes {
			f := append([]float32(nil), g.Nodes[ty].Features...)
			for i := range f {
				f[i] = 0.5 - f[i]
			}
			g2.Nodes[ty].Features = f
		}
		w, err := want.Forward(g)
		if err != nil {
			t.Fatal(err)
		}
		w2, err := want.Forward(&g2)
		if err != nil {
			t.Fatal(err)
		}
		for _, noCapture := range []bool{true, false} {
			in, err := tamiyo.NewInference(onDev, tamiyo.InferenceOptions{NoCapture: noCapture, OnFallback: func(err error) { t.Errorf("capture fell back: %v", err) }})
			if err != nil {
				t.Fatal(err)
			}
			var got *tamiyo.Logits
			if noCapture {
				// An eager forward calls the joins itself: the encoders,
				// each SAGE layer's products and sums, each GAT layer's
				// projections and means and the heads, one joined launch
				// each.
				joins := dev.Joins()
				if _, err := in.Forward(g); err != nil {
					t.Fatal(err)
				}
				want := int64(10)
				if n == 64 {
					// Every layer's products include one of 192 rows by
					// 2048 or 4096 stacked weight rows by 128 or 256: past
					// gemmJoinMaxMACs, so cuBLAS takes each layer's
					// products and the four product joins are not made.
					want = 6
				}
				if apart {
					want = 0
				}
				if made := dev.Joins() - joins; made != want {
					t.Errorf("batch %d: an eager forward made %d joined launches, want %d (joins off %v; on: encoders, 2 SAGE ×2, 2 GAT ×2, heads)", n, made, want, apart)
				}
			}
			for i := 0; i < 6; i++ {
				if i%2 == 0 {
					got, err = in.Forward(g)
				} else {
					got, err = in.Forward(&g2)
				}
				if err != nil {
					t.Fatal(err)
				}
				if i%2 == 1 {
					closeRel(t, "values of the second graph, forward "+string(rune('0'+i)), tensor.FromSlice(got.Values, len(got.Values)), tensor.FromSlice(w2.Values, len(w2.Values)), 1e-3)
				}
			}
			if got, err = in.Forward(g); err != nil {
				t.Fatal(err)
			}
			what := func(s string) string {
				return s + map[bool]string{true: " (eager", false: " (captured"}[noCapture] + ", batch " + map[bool]string{true: "1)", false: "64)"}[n == 1]
			}
			closeRel(t, what("values"), tensor.FromSlice(got.Values, len(got.Values)), tensor.FromSlice(w.Values, len(w.Values)), 1e-3)
			for h := 0; h < leyline.NumActionHeads; h++ {
				var gf, wf []float32
				for b := range got.Heads[h] {
					gf, wf = append(gf, got.Heads[h][b]...), append(wf, w.Heads[h][b]...)
				}
				closeRel(t, what("logits of head "+leyline.HeadNames[h]), tensor.FromSlice(gf, len(gf)), tensor.FromSlice(wf, len(wf)), 1e-3)
			}
			if !noCapture {
				t.Logf("batch %d: captured inference forward of %d graph nodes", n, in.GraphNodes())
				// The node types' encoders, SAGE products and sums, GAT
				// projections and means and all the heads are one launch
				// each (the joins, counted exactly in the eager forward
				// above): 10 nodes on sim with ESPER_SIM_LAUNCH_BOUND=on
				// (14 before the encoders' and the heads' launches
				// gathered their inputs and the heads' wrote the joined
				// logits), where the per-type launches made 48 on an
				// H200. At batch 64 the four product joins are twelve
				// cuBLAS products: eight launches more (25 nodes in fp32
				// and 22 in tf32 on an H200 before those four launches
				// went, cuBLAS choosing its kernels).
				most := 24
				if n == 64 {
					most = 24 + 8
				}
				if nodes := in.GraphNodes(); apart && nodes <= 24 {
					t.Errorf("batch %d: %d graph nodes with the joins off: the joined launches' count (no more than 24), not the per-type launches'", n, nodes)
				}
				if nodes := in.GraphNodes(); !apart && nodes > most {
					t.Errorf("batch %d: %d graph nodes, want at most %d with the node types and heads joined", n, nodes, most)
				}
			}
		}
	}
}

// TestGemmJoinTF32OnCUDA: with ESPER_CUDA_JOINS_TF32's setting on, in
// the matmul precision High, MatMulsT runs a batch-64 policy layer's
// products (narrowed) and sizes no multiple of the tile or the K step on
// gemm_join_tf32 (one joined launch) within TF32's rounding of the
// float64 products; with the setting off, the same products past
// gemmJoinMaxMACs are declined (cuBLAS's).
func TestGemmJoinTF32OnCUDA(t *testing.T) {
	defer tf32JoinsOn.Store(tf32JoinsOn.Load())
	defer be.SetMatmulPrecision(kernels.Highest)
	be.SetMatmulPrecision(kernels.High)
	rng := rand.New(rand.NewPCG(37, 0))
	shapes := [][3]int{{192, 300, 256}, {70, 129, 31}, {65, 64, 33}, {9, 1, 40}, {192, 130, 128}}
	var calls []kernels.MatMulTCall
	var want []*tensor.Tensor
	for _, sh := range shapes {
		m, n, k := sh[0], sh[1], sh[2]
		a, b := tensor.Normal(rng, tensor.F32, 0, 1, m, k), tensor.Normal(rng, tensor.F32, 0, 1, n, k)
		w := make([]float64, m*n)
		av, bv := a.Float64s(), b.Float64s()
		for i := 0; i < m; i++ {
			for j := 0; j < n; j++ {
				for p := 0; p < k; p++ {
					w[i*n+j] += av[i*k+p] * bv[j*k+p]
				}
			}
		}
		want = append(want, tensor.FromFloat64s(tensor.F32, w, m, n))
		calls = append(calls, kernels.MatMulTCall{Dst: poisoned(t, tensor.F32, m, n), A: toDev(t, a), B: toDev(t, b)})
	}
	tf32JoinsOn.Store(true)
	joins := dev.Joins()
	if !be.MatMulsT(calls) {
		t.Fatal("MatMulsT declined the products with the TF32 joins on")
	}
	if made := dev.Joins() - joins; made != 1 {
		t.Errorf("%d joined launches, want 1", made)
	}
	for i, c := range calls {
		closeRel(t, fmt.Sprintf("product %d %v", i, shapes[i]), fromDev(t, c.Dst), want[i], 4e-3)
	}
	big := []kernels.MatMulTCall{{Dst: poisoned(t, tensor.F32, 192, 4096), A: toDev(t, tensor.Normal(rng, tensor.F32, 0, 1, 192, 256)), B: toDev(t, tensor.Normal(rng, tensor.F32, 0, 1, 4096, 256))}}
	tf32JoinsOn.Store(false)
	if be.MatMulsT(big) {
		t.Error("with the TF32 joins off, a product of 192·4096·256 multiply-adds was joined, not left to cuBLAS")
	}
}

// TestGATWarpsOnCUDA: the conformance suite's GATMean and GATMeansAct
// checks pass with ESPER_CUDA_GAT_WARPS's setting off (the block
// kernels, which the suite no longer reaches by default) and on (the
// warp kernels, having launched them); they hold GATMean to
// GATAggregate, which stays on the block kernel, and GATMeansAct to
// GATMeanAct, bit for bit. W2's policy at batch 1 and 64 gives the
// logits and values with the warp kernels that it gives with the block
// kernels, bit for bit, eager and captured.
func TestGATWarpsOnCUDA(t *testing.T) {
	defer gatWarpsOn.Store(gatWarpsOn.Load())
	for _, on := range []bool{false, true} {
		gatWarpsOn.Store(on)
		launched := dev.gatWarps.Load()
		backendtest.RunCases(t, be, conformanceOptions, "GATMean+GATMeanAct+GatherConcat", "GATMeansAct")
		if ran := dev.gatWarps.Load() != launched; ran != on {
			t.Fatalf("with the switch on %v, the conformance checks launched the warp GAT kernels: %v", on, ran)
		}
	}
	for _, n := range []int{1, 64} {
		g, err := bench.W2Graph(n)
		if err != nil {
			t.Fatal(err)
		}
		p, err := tamiyo.NewPolicy(tamiyo.PolicyOptions{Seed: 4, NoDropout: true, Device: tensor.CUDA(0)})
		if err != nil {
			t.Fatal(err)
		}
		forward := func(warps, capture bool) *tamiyo.Logits {
			gatWarpsOn.Store(warps)
			lg, _ := w2Forwards(t, p, g, capture)
			return lg
		}
		want := forward(false, false)
		launched := dev.gatWarps.Load()
		for _, capture := range []bool{false, true} {
			if got := forward(true, capture); !reflect.DeepEqual(got, want) {
				t.Errorf("batch %d, captured %v: the warp kernels' logits differ from the block kernels'", n, capture)
			}
		}
		if dev.gatWarps.Load() == launched {
			t.Errorf("batch %d: no warp GAT kernel launched with the switch on", n)
		}
	}
}

// TestSideStreamsOnCUDA: with ESPER_CUDA_SIDE_STREAMS=on's setting,
// MatMulsT takes products past the joins' bounds (W2's batch-64 stacked
// projections, and a small one beside them) and runs them on side
// streams: each equals MatMul's product bit for bit, in fp32 and TF32,
// eager and replayed from a capture (the fork and joins as the graph's
// edges); W2's policy at batch 64 gives the same logits and values with
// the switch on as off, eager and captured, in as many graph nodes.
func TestSideStreamsOnCUDA(t *testing.T) {
	for _, sw := range []*atomic.Bool{&sideStreamsOn, &tf32JoinsOn, &joinsOff} {
		defer sw.Store(sw.Load())
	}
	tf32JoinsOn.Store(false) // the TF32 join would take these products
	joinsOff.Store(false)
	defer be.SetMatmulPrecision(kernels.Highest)
	rng := rand.New(rand.NewPCG(41, 0))
	shapes := [][3]int{{192, 4096, 256}, {64, 2048, 256}, {192, 1536, 256}, {9, 40, 40}, {64, 1024, 128}}
	var as, bs []*tensor.Tensor
	for _, sh := range shapes {
		as = append(as, toDev(t, tensor.Normal(rng, tensor.F32, 0, 1, sh[0], sh[2])))
		bs = append(bs, toDev(t, tensor.Normal(rng, tensor.F32, 0, 1, sh[1], sh[2])))
	}
	calls := func() []kernels.MatMulTCall {
		cs := make([]kernels.MatMulTCall, len(shapes))
		for i, sh := range shapes {
			cs[i] = kernels.MatMulTCall{Dst: poisoned(t, tensor.F32, sh[0], sh[1]), A: as[i], B: bs[i]}
		}
		return cs
	}
	for _, prec := range []kernels.Precision{kernels.Highest, kernels.High} {
		be.SetMatmulPrecision(prec)
		want := calls()
		for _, c := range want {
			be.MatMul(c.Dst, c.A, c.B, false, true)
		}
		sideStreamsOn.Store(false)
		if be.MatMulsT(calls()) {
			t.Fatalf("precision %v: with the side streams off, MatMulsT took products past the joins' bounds", prec)
		}
		sideStreamsOn.Store(true)
		eager := calls()
		ran := dev.sideProducts()
		if !be.MatMulsT(eager) {
			t.Fatalf("precision %v: MatMulsT declined the products with the side streams on", prec)
		}
		if got := dev.sideProducts() - ran; got != int64(len(shapes)) {
			t.Fatalf("precision %v: %d products on the side streams, want %d", prec, got, len(shapes))
		}
		replayed := calls()
		if err := dev.BeginCapture(); err != nil {
			t.Fatal(err)
		}
		took := be.MatMulsT(replayed)
		g, err := dev.EndCapture()
		if err != nil {
			t.Fatal(err)
		}
		if !took {
			t.Fatalf("precision %v: MatMulsT declined the products in a capture", prec)
		}
		if g.Nodes() < len(shapes) {
			t.Fatalf("precision %v: a captured graph of %d nodes for %d products", prec, g.Nodes(), len(shapes))
		}
		for _, c := range replayed { // what the capture wrote, if anything, is not the replay's
			if err := dev.Fill(c.Dst, math.NaN()); err != nil {
				t.Fatal(err)
			}
		}
		if err := g.Replay(); err != nil {
			t.Fatal(err)
		}
		if err := g.Close(); err != nil {
			t.Fatal(err)
		}
		for i := range shapes {
			w := fromDev(t, want[i].Dst)
			for name, got := range map[string]*tensor.Tensor{"eager": eager[i].Dst, "replayed": replayed[i].Dst} {
				if !reflect.DeepEqual(fromDev(t, got).Float64s(), w.Float64s()) {
					t.Errorf("precision %v, product %d %v, %s: not MatMul's bits", prec, i, shapes[i], name)
				}
			}
		}
	}
	be.SetMatmulPrecision(kernels.Highest)
	p, g := w2Policy(t)
	forward := func(sides, capture bool) (*tamiyo.Logits, int) {
		sideStreamsOn.Store(sides)
		return w2Forwards(t, p, g, capture)
	}
	want, _ := forward(false, false)
	_, nodes := forward(false, true)
	for _, capture := range []bool{false, true} {
		ran := dev.sideProducts()
		got, n := forward(true, capture)
		if !reflect.DeepEqual(got, want) {
			t.Errorf("captured %v: the side streams' logits differ from the device stream's", capture)
		}
		if dev.sideProducts() == ran {
			t.Errorf("captured %v: W2's batch-64 forward ran no product on the side streams", capture)
		}
		if capture && n != nodes {
			t.Errorf("%d graph nodes with the side streams, %d without", n, nodes)
		}
	}
}

// w2Policy returns W2's policy on the GPU (seed 4, no dropout) and its
// batch of 64 graphs.
func w2Policy(t *testing.T) (*tamiyo.Policy, *tamiyo.Graph) {
	t.Helper()
	g, err := bench.W2Graph(64)
	if err != nil {
		t.Fatal(err)
	}
	p, err := tamiyo.NewPolicy(tamiyo.PolicyOptions{Seed: 4, NoDropout: true, Device: tensor.CUDA(0)})
	if err != nil {
		t.Fatal(err)
	}
	return p, g
}

// w2Forwards runs three forwards of g through a new Inference of p,
// eager or captured (the warm-up, the capture, a replay), and returns
// the last one's logits and the captured graph's nodes (0 eager).
func w2Forwards(t *testing.T, p *tamiyo.Policy, g *tamiyo.Graph, capture bool) (*tamiyo.Logits, int) {
	t.Helper()
	in, err := tamiyo.NewInference(p, tamiyo.InferenceOptions{NoCapture: !capture})
	if err != nil {
		t.Fatal(err)
	}
	var lg *tamiyo.Logits
	for range 3 {
		if lg, err = in.Forward(g); err != nil {
			t.Fatal(err)
		}
	}
	return lg, in.GraphNodes()
}

// TestGatherInOnCUDA: W2's policy at batch 64 reads its encoders' and
// heads' gathered inputs inside their launches and its logits from the
// heads' joined output (ESPER_CUDA_GATHER_IN's default), and gives the
// same logits and values, bit for bit, as with the switch off (the
// inputs gathered in launches of their own, the logits joined after the
// heads), eager and captured, in four graph nodes fewer.
func TestGatherInOnCUDA(t *testing.T) {
	defer gatherInOff.Store(gatherInOff.Load())
	p, g := w2Policy(t)
	forward := func(off, capture bool) (*tamiyo.Logits, int) {
		gatherInOff.Store(off)
		return w2Forwards(t, p, g, capture)
	}
	for _, capture := range []bool{false, true} {
		want, apart := forward(true, capture)
		got, nodes := forward(false, capture)
		if !reflect.DeepEqual(got, want) {
			t.Errorf("captured %v: the gathered inputs' logits differ from those of the inputs gathered apart", capture)
		}
		if capture && nodes != apart-4 {
			t.Errorf("%d graph nodes with the gathered inputs, %d without: want four fewer", nodes, apart)
		}
	}
}
