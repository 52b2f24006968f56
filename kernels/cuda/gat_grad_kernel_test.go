package cuda

import (
	"math"
	"math/rand"
	"testing"

	"github.com/esper-go/esper/kernels"
	"github.com/esper-go/esper/kernels/cpu"
	"github.com/esper-go/esper/tensor"
)

// gat_mean_grad_f32 and gat_grad_edge_f32 (src/graph_grad.cu) transcribed
// to Go: per node, ga = alpha·g added into dBias, then per head the
// three passes over the node's incoming edges (the maximum of the
// logits; their exponentials' sum s and u = Σ e·dα; then α, dz and the
// additions), in float32 as the kernels compute, a warp's sums as plain
// sums. The gradients must agree with the CPU's GATMeanGrad (float64
// throughout) to float32 rounding, over two relations of one node type
// (one with a node without edges, one with a node of many), so that the
// passes, the normaliser t = u/s and where each term is added are the
// CPU's.

// ggRelEmu is one relation's operands and gradients over Go slices.
type ggRelEmu struct {
	ns, e                                  int
	hs, hd, attr, we, attSrc, attDst, attE []float32
	src, rowPtr, order                     []int64
	dHs, dHd, dAs, dAd, dAe, dWe, dBias    []float32
}

func ggKernelEmu(q *ggRelEmu, g []float32, nd, heads, c, f int, slope, alpha float32) {
	H, C, F, HC := heads, c, f, heads*c
	lds, ldd := HC, HC
	v := make([]float32, H*F)
	for h := 0; h < H; h++ {
		for ff := 0; ff < F; ff++ {
			var part float32
			for cc := 0; cc < C; cc++ {
				part += q.attE[h*C+cc] * q.we[(h*C+cc)*F+ff]
			}
			v[h*F+ff] = part
		}
	}
	dv := make([]float32, H*F)
	ga := make([]float32, C)
	leaky := func(z float32) float32 {
		s := slope * z
		switch {
		case z > s:
			return 1
		case z < s:
			return slope
		}
		return 0.5 * (1 + slope)
	}
	for i := 0; i < nd; i++ {
		for cc := 0; cc < C; cc++ {
			ga[cc] = alpha * g[i*C+cc]
			q.dBias[cc] += ga[cc]
		}
		dhd := make([]float32, HC)
		p0, p1 := q.rowPtr[i], q.rowPtr[i+1]
		for h := 0; h < H && p1 > p0; h++ {
			hdi := q.hd[i*ldd+h*C : i*ldd+(h+1)*C]
			var dterm float32
			for cc := 0; cc < C; cc++ {
				dterm += hdi[cc] * q.attDst[h*C+cc]
			}
			logit := func(p int64) ([]float32, int64, float32) {
				k := q.order[p]
				hj := q.hs[q.src[k]*int64(lds)+int64(h*C):]
				var part float32
				for cc := 0; cc < C; cc++ {
					part += hj[cc] * q.attSrc[h*C+cc]
				}
				z := part + dterm
				for ff := 0; ff < F; ff++ {
					z += q.attr[k*int64(F)+int64(ff)] * v[h*F+ff]
				}
				return hj, k, z
			}
			m := float32(math.Inf(-1))
			for p := p0; p < p1; p++ {
				_, _, z := logit(p)
				m = max(m, max(z, slope*z))
			}
			var s, u float32
			for p := p0; p < p1; p++ {
				hj, _, z := logit(p)
				e := float32(math.Exp(float64(max(z, slope*z) - m)))
				var part float32
				for cc := 0; cc < C; cc++ {
					part += ga[cc] * hj[cc]
				}
				s += e
				u += e * part * (1 / float32(H))
			}
			t := u / s
			for p := p0; p < p1; p++ {
				hj, k, z := logit(p)
				al := float32(math.Exp(float64(max(z, slope*z)-m))) / s
				var part float32
				for cc := 0; cc < C; cc++ {
					part += ga[cc] * hj[cc]
				}
				dal := part * (1 / float32(H))
				dz := al * (dal - t) * leaky(z)
				j := q.src[k]
				for cc := 0; cc < C; cc++ {
					o := h*C + cc
					q.dHs[j*int64(HC)+int64(o)] += al*ga[cc]*(1/float32(H)) + dz*q.attSrc[o]
					q.dAs[o] += dz * hj[cc]
					q.dAd[o] += dz * hdi[cc]
					dhd[o] += dz * q.attDst[o]
				}
				for ff := 0; ff < F; ff++ {
					dv[h*F+ff] += dz * q.attr[k*int64(F)+int64(ff)]
				}
			}
		}
		copy(q.dHd[i*HC:(i+1)*HC], dhd)
	}
	// gat_grad_edge_f32.
	for o := 0; o < HC; o++ {
		h := o / C
		var t float32
		for ff := 0; ff < F; ff++ {
			d := dv[h*F+ff]
			t += d * q.we[o*F+ff]
			q.dWe[o*F+ff] = q.attE[o] * d
		}
		q.dAe[o] = t
	}
}

func TestGATMeanGradKernelInGo(t *testing.T) {
	rng := rand.New(rand.NewSource(3))
	const nd, heads, c, f = 7, 3, 5, 2
	hc := heads * c
	normal := func(n int) []float32 {
		v := make([]float32, n)
		for i := range v {
			v[i] = float32(rng.NormFloat64())
		}
		return v
	}
	mk := func(ns, e int, hub bool) *ggRelEmu {
		src, dst := make([]int64, e), make([]int64, e)
		for k := range src {
			src[k] = int64(rng.Intn(ns))
			d := rng.Intn(nd)
			if d == 1 {
				d = 0 // node 1 without incoming edges
			}
			if hub && k%2 == 0 {
				d = 3 // a node of many
			}
			dst[k] = int64(d)
		}
		rowPtr, order, err := kernels.BuildCSR(dst, nd)
		if err != nil {
			t.Fatal(err)
		}
		return &ggRelEmu{ns: ns, e: e, hs: normal(ns * hc), hd: normal(nd * hc), attr: normal(e * f), we: normal(hc * f),
			attSrc: normal(hc), attDst: normal(hc), attE: normal(hc), src: src, rowPtr: rowPtr, order: order,
			dHs: make([]float32, ns*hc), dHd: make([]float32, nd*hc), dAs: make([]float32, hc), dAd: make([]float32, hc),
			dAe: make([]float32, hc), dWe: make([]float32, hc*f), dBias: make([]float32, c)}
	}
	rels := []*ggRelEmu{mk(6, 15, false), mk(4, 22, true)}
	g := normal(nd * c)
	const slope = 0.2
	for _, q := range rels {
		ggKernelEmu(q, g, nd, heads, c, f, slope, 1/float32(len(rels)))
	}
	// The CPU's gradients of the same operands.
	ts := func(v []float32, shape ...int) *tensor.Tensor {
		return tensor.FromSlice(append([]float32(nil), v...), shape...)
	}
	var ops [11][]*tensor.Tensor
	var grads [7][]*tensor.Tensor
	for _, q := range rels {
		for i, o := range []*tensor.Tensor{ts(q.hs, q.ns, hc), ts(q.hd, nd, hc), ts(q.attr, q.e, f), ts(q.we, hc, f), ts(q.attSrc, 1, heads, c),
			ts(q.attDst, 1, heads, c), ts(q.attE, 1, heads, c), ts(make([]float32, c), c),
			tensor.FromSlice(q.src, q.e), tensor.FromSlice(q.rowPtr, nd+1), tensor.FromSlice(q.order, q.e)} {
			ops[i] = append(ops[i], o)
		}
		for i, shape := range [][]int{{q.ns, hc}, {nd, hc}, {hc, f}, {1, heads, c}, {1, heads, c}, {1, heads, c}, {c}} {
			grads[i] = append(grads[i], tensor.Empty(tensor.F32, shape...))
		}
	}
	cpu.Default().GATMeanGrad(grads[0], grads[1], grads[2], grads[3], grads[4], grads[5], grads[6], ts(g, nd, c),
		ops[0], ops[1], ops[2], ops[3], ops[4], ops[5], ops[6], ops[7], ops[8], ops[9], ops[10], heads, slope)
	for k, q := range rels {
		for i, emu := range [][]float32{q.dHs, q.dHd, q.dWe, q.dAs, q.dAd, q.dAe, q.dBias} {
			want := grads[i][k].F32()
			for n := range want {
				if d := math.Abs(float64(emu[n] - want[n])); d > 1e-4*math.Max(1, math.Abs(float64(want[n]))) {
					t.Fatalf("relation %d, gradient %d, element %d: kernel %v, CPU %v", k, i, n, emu[n], want[n])
				}
			}
		}
	}
}

// TestGGPack: the words land where struct GgArgs reads them.
func TestGGPack(t *testing.T) {
	var w [ggWords]uint64
	rels := []ggRel{{lds: 3, ldd: 4, f: 5}, {lds: 6, ldd: 7, f: 8}}
	for i := range rels[1].ptrs {
		rels[1].ptrs[i] = uint64(100 + i)
	}
	ggPack(&w, 42, 9, 4, 128, 0.2, 0.5, rels)
	want := map[int]uint64{0: 42, 1: 2, 2: 9, 3: 4, 4: 128, 5: math.Float64bits(0.2), 6: math.Float64bits(0.5),
		7 + 16: 3, 7 + 17: 4, 7 + 18: 5, 26: 100, 26 + 15: 115, 26 + 16: 6, 26 + 17: 7, 26 + 18: 8, 26 + 19: 0}
	for i, v := range want {
		if w[i] != v {
			t.Errorf("GgArgs word %d = %d, want %d", i, w[i], v)
		}
	}
}

// TestGGSharedBound: the policy's GAT layers (4 heads of 128, 3 edge
// features) fit gat_mean_grad_f32's shared memory, so they train fused
// on CUDA; 4 heads of 1024 do not (GATMeanGradFits false: autograd takes
// the unfused ops), though their forward fits.
func TestGGSharedBound(t *testing.T) {
	if got := ggShared(4, 128, 3); got > gatMeanMaxShared {
		t.Errorf("the policy's widths need %d bytes, more than %d", got, gatMeanMaxShared)
	}
	if got := ggShared(4, 1024, 3); got <= gatMeanMaxShared {
		t.Errorf("4 heads of 1024 need %d bytes, within %d", got, gatMeanMaxShared)
	}
	if got := gatShared(4, 1024, 3); got > gatMeanMaxShared {
		t.Errorf("the forward of 4 heads of 1024 needs %d bytes, more than %d", got, gatMeanMaxShared)
	}
}
