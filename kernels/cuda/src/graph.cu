// Fused message passing of a graph network's inference forward
// (kernels.GraphAggregator), fp32: one relation's edges grouped by
// destination node in host-built CSR form (src [E], rowPtr [Nd+1] and
// order [E], all int64, read as given). gat_aggregate_f32 is one GAT
// relation (logits, a softmax over each node's incoming edges per head,
// the weighted sum of the sources, heads averaged, bias) in one launch;
// gather_mean_f32 the mean of the sources' rows per node. Every sum runs
// in a fixed order (warp butterflies and per-thread loops, no atomics),
// so the results are deterministic.
#include <stdint.h>
#include <math.h>
#include "common.cuh"

// GatGeom is gat_aggregate_f32's sizes and scalars (the Go gatGeom, word
// for word; byte offsets on the right): nd destination nodes, heads, c =
// out's width (hs and hd are [·, heads·c]), f = attr's width, the leaky
// slope, the row strides lds of hs and ldd of hd in elements (≥ heads·c:
// row-strided views), and the output's scale alpha and accumulate flag
// (nonzero: out += alpha·r, else out = alpha·r).
struct GatGeom {
    int64_t nd, heads, c, f;  //  0,  8, 16, 24
    double slope;             // 32
    int64_t lds, ldd;         // 40, 48
    double alpha;             // 56
    int64_t accumulate;       // 64 (72 bytes in all)
};

// GAT_MAX_RELS is the most relations one gat_mean_f32 launch takes (Go's
// gatMaxRels); GatRel is one of them (Go's gatRel, word for word: eleven
// pointers, then hs's and hd's row strides and attr's width), GatMulti
// the launch (Go's gatMulti: scratch, then nrel, nd, heads, c, slope,
// alpha and relBase, the launch's first relation among the mean's; then
// the combining tail's out, res, counters and act, counters null when
// gat_combine_f32 adds the relations instead; then GAT_MAX_RELS
// relations).
#define GAT_MAX_RELS 8
struct GatRel {
    const float *hs, *hd, *attr, *we, *attSrc, *attDst, *attEdge, *bias;
    const int64_t *src, *rowPtr, *order;
    int64_t lds, ldd, f;
};
struct GatMulti {
    float* scratch;
    int64_t nrel, nd, heads, c;
    double slope, alpha;
    int64_t relBase;
    float* out;
    const float* res;
    int* counters;
    int64_t act;
    GatRel rel[GAT_MAX_RELS];
};

// GATHER_MAX is the most pieces one gather_concat_f32 launch takes (Go's
// gatherMax; a piece is a GatherPart, common.cuh), GatherCat the launch
// (Go's gatherCat: out, nd, ldo out's row stride, width the launch's
// local columns, npieces, then GATHER_MAX pieces in ascending loc).
#define GATHER_MAX 16
struct GatherCat {
    float* out;
    int64_t nd, ldo, width, npieces;
    GatherPart p[GATHER_MAX];
};

// GSUM_MAX is the most terms one gather_sum_f32 launch adds (Go's
// gsumMax); GsumTerm is one (Go's gsumTerm, word for word: x, src,
// rowPtr, order, then ld, x's row stride in elements: with src null, row
// i of x is x + i·ld, so a bias [C] is a term with ld 0), GatherSumArgs
// the launch (Go's gsumPack: out, res, nd, c, nterms, scale, act, the
// accumulate flag, then GSUM_MAX terms).
#define GSUM_MAX 16
struct GsumTerm {
    const float* x;
    const int64_t *src, *rowPtr, *order;
    int64_t ld;
};
struct GatherSumArgs {
    float* out;
    const float* res;
    int64_t nd, c, nterms;
    double scale;
    int64_t act, accumulate;
    GsumTerm t[GSUM_MAX];
};

// warp_sum returns the sum of v over the warp's 32 lanes to every lane
// (a butterfly: every lane adds in the same order, so all agree).
__device__ __forceinline__ float warp_sum(float v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffff, v, o);
    return v;
}

// gat_relation is gat_aggregate_f32's body (documented there), shared with
// gat_mean_f32 so that the two compute each relation alike, bit for bit.
// Its node loop strides over blockIdx.x alone.
// GatTailArgs is what gat_tail reads of a GatMulti, copied out of the
// parameter block by gat_mean_f32 and passed by value (a pointer into the
// block, or to a local, would make every thread copy it to local
// memory).
struct GatTailArgs {
    const float* scratch;
    float* out;
    const float* res;
    int* counters;
    int64_t act, nrel, nd, c;
};

__device__ __forceinline__ void gat_tail(const GatTailArgs m, int64_t i);

// gat_edge_v writes the edge-attribute term of a GAT relation's logits
// into shared v (gat_relation and gat_relation_warp, once per block):
// v[h·F + f] = Σ_c attEdge[h·C + c]·we[(h·C + c)·F + f], warp w taking
// t = h·F + f = w, w + warps, …, its lanes striding over c (fma in
// order), then a butterfly.
__device__ __forceinline__ void gat_edge_v(float* v, const float* attEdge, const float* we, int H, int C, int F) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
    for (int t = warp; t < H * F; t += warps) {
        int h = t / F, f = t % F;
        float part = 0.f;
        for (int c = lane; c < C; c += 32) part = __fmaf_rn(attEdge[h * C + c], we[((int64_t)h * C + c) * F + f], part);
        part = warp_sum(part);
        if (lane == 0) v[t] = part;
    }
}

__device__ __forceinline__ void gat_relation(float* out, const float* hs, const float* hd, const float* attr,
                                             const float* we, const float* attSrc, const float* attDst,
                                             const float* attEdge, const float* bias, const int64_t* src,
                                             const int64_t* rowPtr, const int64_t* order, const GatGeom& g, float* sh,
                                             const GatTailArgs tail, const bool hasTail) {
    const int H = (int)g.heads, C = (int)g.c, F = (int)g.f;
    const int64_t HC = g.heads * g.c;
    float* v = sh;
    float* dterm = v + H * F;
    float* m = dterm + H;
    float* s = m + H;
    float* sc = s + H;
    float* wt = sc + 2 * H;
    float* acc = wt + 2 * H;
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, warps = blockDim.x >> 5;
    const float slope = (float)g.slope, alpha = (float)g.alpha;
    const bool accumulate = g.accumulate != 0;

    // v is the same for every node: once per block.
    gat_edge_v(v, attEdge, we, H, C, F);

    for (int64_t i = blockIdx.x; i < g.nd; i += gridDim.x) {
        const int64_t a = rowPtr[i], b = rowPtr[i + 1];
        for (int h = warp; h < H; h += warps) {
            const float* hdi = hd + i * g.ldd + (int64_t)h * C;
            float part = 0.f;
            for (int c = lane; c < C; c += 32) part = __fmaf_rn(hdi[c], attDst[h * C + c], part);
            part = warp_sum(part);
            if (lane == 0) {
                dterm[h] = part;
                m[h] = -INFINITY;
                s[h] = 0.f;
            }
        }
        for (int64_t q = tid; q < HC; q += blockDim.x) acc[q] = 0.f;
        __syncthreads();  // v, dterm, m, s and acc are set

        for (int64_t p = a; p < b; p++) {
            const int64_t k = edge_at(order, p);
            const float* hj = hs + src[k] * g.lds;
            float* scp = sc + (p & 1) * H;
            float* wtp = wt + (p & 1) * H;
            for (int h = warp; h < H; h += warps) {
                float part = 0.f;
                for (int c = lane; c < C; c += 32) part = __fmaf_rn(hj[h * C + c], attSrc[h * C + c], part);
                part = warp_sum(part);
                if (lane == 0) {
                    float z = part + dterm[h];
                    for (int f = 0; f < F; f++) z = __fmaf_rn(attr[k * F + f], v[h * F + f], z);
                    float l = fmaxf(z, slope * z);
                    float mo = m[h];
                    // The new maximum; a NaN logit takes over (and stays:
                    // nothing compares above it), so that it reaches the
                    // output as it does through the unfused softmax.
                    float mn = (l > mo || l != l) ? l : mo;
                    // mo == mn: no rescale (also when both are −∞ or +∞,
                    // where exp(mo − mn) would be NaN); a −∞ logit weighs 0.
                    scp[h] = mo == mn ? 1.f : expf(mo - mn);
                    float w = l == -INFINITY ? 0.f : expf(l - mn);
                    wtp[h] = w;
                    s[h] = __fmaf_rn(s[h], scp[h], w);
                    m[h] = mn;
                }
            }
            __syncthreads();  // this edge's sc and wt are published
            for (int64_t q = tid; q < HC; q += blockDim.x) {
                int h = (int)(q / C);
                // Every contraction spelled out (here as nvcc made them
                // implicitly before), so that gat_relation_warp's
                // arithmetic is this one's whatever the compiler.
                acc[q] = __fmaf_rn(acc[q], scp[h], __fmul_rn(wtp[h], hj[q]));
            }
        }
        __syncthreads();  // acc and s are final

        const float inv = 1.f / (float)H;
        for (int c = tid; c < C; c += blockDim.x) {
            float r = bias[c];
            if (b > a) {
                float t = 0.f;
                for (int h = 0; h < H; h++) t = __fadd_rn(t, __fdiv_rn(acc[h * C + c], s[h]));
                r = __fmaf_rn(t, inv, r);
            }
            // alpha·r rounded before the add (_rn: never fused into an fma),
            // as the CPU computes it.
            float* o = out + i * C + c;
            const float ar = __fmul_rn(alpha, r);
            *o = accumulate ? __fadd_rn(*o, ar) : ar;
        }
        __syncthreads();  // acc, s and the buffers are free for the next node
        if (hasTail) gat_tail(tail, i);
    }
}

// gat_tail is gat_mean_f32's combining tail for node i, once this block
// has written its relation's row i of the scratch: the block's writes
// are fenced (visible device-wide) before thread 0 counts the relation
// done in counters[i]; the block that counts the last relation adds the
// relations' rows in relation order (__ldcg: from L2, where the other
// blocks' writes are), applies the activation and residual as
// gat_combine_f32 does, writes out's row i and sets counters[i] back to
// 0 for the next launch. Which block finishes last varies; the sum's
// order does not, so the result is gat_combine_f32's bit for bit.
__device__ __forceinline__ void gat_tail_sum(const GatTailArgs m, int64_t i, int first, int step);
__device__ __forceinline__ void gat_tail(const GatTailArgs m, int64_t i) {
    if (last_block(m.counters, i, (int)m.nrel)) gat_tail_sum(m, i, threadIdx.x, blockDim.x);
}

// gat_tail_sum is the last block's (or warp's) work of gat_tail for node
// i, its threads taking columns first, first + step, …
__device__ __forceinline__ void gat_tail_sum(const GatTailArgs m, int64_t i, int first, int step) {
    {
        const int64_t n = m.nd * m.c;
        for (int64_t c = first; c < m.c; c += step) {
            const int64_t q = i * m.c + c;
            float v = __ldcg(m.scratch + q);
            for (int64_t r = 1; r < m.nrel; r++) v = __fadd_rn(v, __ldcg(m.scratch + r * n + q));
            if (m.act >= 0) {
                v = unary_f((int)m.act, v);
                if (m.res) v = __fadd_rn(v, m.res[q]);
            }
            m.out[q] = v;
        }
        if (first == 0) m.counters[i] = 0;
    }
}

// GW_HEADS, GW_CW, GW_WARPS and GW_F shape gat_relation_warp (Go's
// gwHeads, gwChunks, gwWarps, gwAttr): a relation of at most GW_HEADS
// heads, c ≤ 32·GW_CW channels a head and edge attributes of at most
// GW_F runs a warp per destination node, GW_WARPS nodes a block.
#define GW_HEADS 4
#define GW_CW 4
#define GW_WARPS 4
#define GW_F 4

// gw_row loads row hj's heads·c values into r as gat_relation_warp
// holds them: r[h][j] = hj[h·C + lane + 32·j], 0 past the heads or c.
__device__ __forceinline__ void gw_row(float (&r)[GW_HEADS][GW_CW], const float* hj, int H, int C, int lane) {
#pragma unroll
    for (int h = 0; h < GW_HEADS; h++) {
#pragma unroll
        for (int j = 0; j < GW_CW; j++) {
            const int c = lane + 32 * j;
            r[h][j] = (h < H && c < C) ? hj[h * C + c] : 0.f;
        }
    }
}

// gw_sums replaces every v[h] with its sum over the warp (warp_sum's
// butterfly, the heads' steps interleaved: each head's sum is warp_sum's
// bit for bit).
__device__ __forceinline__ void gw_sums(float (&v)[GW_HEADS]) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
#pragma unroll
        for (int h = 0; h < GW_HEADS; h++) v[h] += __shfl_xor_sync(0xffffffff, v[h], o);
    }
}

// last_warp is last_block for a warp that finished group g alone: every
// lane fences its writes, then lane 0 counts the group done; every lane
// learns whether it was the last of total, and the last is fenced again
// before it reads the others' writes.
__device__ __forceinline__ bool last_warp(int* counters, int64_t g, int total) {
    __threadfence();
    __syncwarp();
    int last = 0;
    if ((threadIdx.x & 31) == 0) last = atomicAdd(counters + g, 1) == total - 1;
    last = __shfl_sync(0xffffffff, last, 0);
    __syncwarp();  // orders lane 0's atomic before the other lanes' reads (a shuffle orders no memory)
    __threadfence();
    return last != 0;
}

// gw_edges loads a node's edges p0, …, p0 + n − 1 (n ≤ 32) into the
// lanes, lane e holding edge e's k = edge_at(order, p0 + e) (kl), its source j =
// src[k] (jl) and its attributes attr[k·F + f] (at[f], f < F ≤ GW_F);
// lanes past n hold zeros.
__device__ __forceinline__ void gw_edges(long long& kl, long long& jl, float (&at)[GW_F], const int64_t* order,
                                         const int64_t* src, const float* attr, int64_t p0, int n, int F, int lane) {
    kl = jl = 0;
#pragma unroll
    for (int f = 0; f < GW_F; f++) at[f] = 0.f;
    if (lane < n) {
        kl = edge_at(order, p0 + lane);
        jl = src[kl];
#pragma unroll
        for (int f = 0; f < GW_F; f++) {
            if (f < F) at[f] = attr[kl * F + f];
        }
    }
}

// gw_prefetch asks L1 for source row hj's heads·c floats (a hint: lane
// l touches element 32·l, lane 31 the last), so that gw_row finds them
// there a little later.
__device__ __forceinline__ void gw_prefetch(const float* hj, int hc, int lane) {
    const int at = lane == 31 ? hc - 1 : 32 * lane;
    if (at < hc) asm volatile("prefetch.L1 [%0];" ::"l"(hj + at));  // a generic address
}

// gat_relation_warp is gat_relation with a warp per destination node
// instead of a block: warp w of block x takes nodes x·warps + w, then
// gridDim.x·warps further on, with one barrier (at the start, publishing
// v) and none between nodes or edges. Lane l holds head h's channels c =
// l + 32·j (j < GW_CW) of the node's accumulator and of the edge's source
// row in registers; every lane keeps every head's online softmax (m, s),
// so that what lane 0 of gat_relation's warps computes and shares through
// shared memory each lane computes itself, with the same operations in
// the same order. A node's loads that depend on nothing computed — its
// row pointers, its hd row, its first 32 edges' order, src and attr (one
// edge a lane, shuffled out edge by edge) and its first source row — are
// issued together: for a warp's first node before the block computes v,
// for its next node before this one's output and tail. The next edge's
// source row is prefetched into L1 while this edge's
// logits are summed. Every value is gat_relation's bit for bit: the same
// fma and rounding per element (spelled out in both), the same
// butterflies, the same edge order. Needs heads ≤ GW_HEADS, c ≤
// 32·GW_CW and f ≤ GW_F (Go's gatWarpFits); v takes heads·f floats of
// dynamic shared memory.
__device__ __forceinline__ void gat_relation_warp(float* out, const float* hs, const float* hd, const float* attr,
                                                  const float* we, const float* attSrc, const float* attDst,
                                                  const float* attEdge, const float* bias, const int64_t* src,
                                                  const int64_t* rowPtr, const int64_t* order, const GatGeom& g,
                                                  float* v, const GatTailArgs tail, const bool hasTail) {
    const int H = (int)g.heads, C = (int)g.c, F = (int)g.f, HC = H * C;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
    const float slope = (float)g.slope, alpha = (float)g.alpha;
    const bool accumulate = g.accumulate != 0;
    const int64_t stride = (int64_t)gridDim.x * warps;

    // A node's independent loads (begin): a, b; dterm's per-lane sums;
    // the first chunk of edges and its first source row.
    int64_t a = 0, b = 0;
    float dterm[GW_HEADS], cur[GW_HEADS][GW_CW], at[GW_F];
    long long kl = 0, jl = 0;
    auto begin = [&](int64_t i) {
        a = rowPtr[i];
        b = rowPtr[i + 1];
        const float* hdi = hd + i * g.ldd;
#pragma unroll
        for (int h = 0; h < GW_HEADS; h++) {
            float part = 0.f;
#pragma unroll
            for (int j = 0; j < GW_CW; j++) {
                const int c = lane + 32 * j;
                if (h < H && c < C) part = __fmaf_rn(hdi[h * C + c], attDst[h * C + c], part);
            }
            dterm[h] = part;
        }
        const int n = (int)min((int64_t)32, b - a);
        gw_edges(kl, jl, at, order, src, attr, a, n, F, lane);
        // The first source row, for a node with edges (a relation without
        // any may have no source rows to read).
        if (n > 0) gw_row(cur, hs + __shfl_sync(0xffffffff, jl, 0) * g.lds, H, C, lane);
    };

    int64_t i = (int64_t)blockIdx.x * warps + warp;
    if (i < g.nd) begin(i);
    // v as gat_relation computes it, once per block.
    gat_edge_v(v, attEdge, we, H, C, F);
    __syncthreads();  // v is set; no barrier follows

    for (; i < g.nd; i += stride) {
        float m[GW_HEADS], s[GW_HEADS], acc[GW_HEADS][GW_CW];
#pragma unroll
        for (int h = 0; h < GW_HEADS; h++) {
            m[h] = -INFINITY;
            s[h] = 0.f;
#pragma unroll
            for (int j = 0; j < GW_CW; j++) acc[h][j] = 0.f;
        }
        gw_sums(dterm);

        for (int64_t p0 = a; p0 < b; p0 += 32) {
            const int n = (int)min((int64_t)32, b - p0);
            if (p0 != a) {  // a chunk after the first: its loads now
                gw_edges(kl, jl, at, order, src, attr, p0, n, F, lane);
                gw_row(cur, hs + __shfl_sync(0xffffffff, jl, 0) * g.lds, H, C, lane);
            }
            for (int e = 0; e < n; e++) {
                const long long jn = __shfl_sync(0xffffffff, jl, min(e + 1, n - 1));
                if (e + 1 < n) gw_prefetch(hs + jn * g.lds, HC, lane);
                float ae[GW_F];
#pragma unroll
                for (int f = 0; f < GW_F; f++) ae[f] = f < F ? __shfl_sync(0xffffffff, at[f], e) : 0.f;  // F: the warp's
                float part[GW_HEADS];
#pragma unroll
                for (int h = 0; h < GW_HEADS; h++) {
                    part[h] = 0.f;
#pragma unroll
                    for (int j = 0; j < GW_CW; j++) {
                        const int c = lane + 32 * j;
                        if (h < H && c < C) part[h] = __fmaf_rn(cur[h][j], attSrc[h * C + c], part[h]);
                    }
                }
                gw_sums(part);
#pragma unroll
                for (int h = 0; h < GW_HEADS; h++) {
                    if (h >= H) break;
                    float z = part[h] + dterm[h];
#pragma unroll
                    for (int f = 0; f < GW_F; f++) {
                        if (f < F) z = __fmaf_rn(ae[f], v[h * F + f], z);
                    }
                    const float l = fmaxf(z, slope * z);
                    const float mo = m[h];
                    // gat_relation's rules for NaN and infinite logits.
                    const float mn = (l > mo || l != l) ? l : mo;
                    const float sc = mo == mn ? 1.f : expf(mo - mn);
                    const float w = l == -INFINITY ? 0.f : expf(l - mn);
                    s[h] = __fmaf_rn(s[h], sc, w);
                    m[h] = mn;
#pragma unroll
                    for (int j = 0; j < GW_CW; j++) acc[h][j] = __fmaf_rn(acc[h][j], sc, __fmul_rn(w, cur[h][j]));
                }
                if (e + 1 < n) gw_row(cur, hs + jn * g.lds, H, C, lane);  // from L1, prefetched
            }
        }

        // The next node's loads go out now, to arrive during this
        // node's output and tail (begin overwrites a and b).
        const bool edges = b > a;
        const int64_t next = i + stride;
        if (next < g.nd) begin(next);

        const float inv = 1.f / (float)H;
#pragma unroll
        for (int j = 0; j < GW_CW; j++) {
            const int c = lane + 32 * j;
            if (c >= C) break;
            float r = bias[c];
            if (edges) {
                float t = 0.f;
#pragma unroll
                for (int h = 0; h < GW_HEADS; h++) {
                    if (h >= H) break;
                    t = __fadd_rn(t, __fdiv_rn(acc[h][j], s[h]));
                }
                r = __fmaf_rn(t, inv, r);
            }
            float* o = out + i * C + c;
            const float ar = __fmul_rn(alpha, r);
            *o = accumulate ? __fadd_rn(*o, ar) : ar;
        }
        if (hasTail && last_warp(tail.counters, i, (int)tail.nrel)) gat_tail_sum(tail, i, lane, 32);
    }
}

extern "C" {

// gat_aggregate_f32: one block per destination node i (a block-stride
// loop over the nodes; blockDim.x a multiple of 32, any size), with
// dynamic shared memory of (heads·f + 7·heads + heads·c) floats laid out
// (H = heads, C = c, F = f)
//
//	v [H·F]          v[h,f] = Σ_c attEdge[h,c]·we[h·C+c, f] (per block)
//	dterm [H]        Σ_c hd[i,h,c]·attDst[h,c]
//	m, s [H]         the running maximum and sum of the online softmax
//	sc, wt [2·H]     the edge's rescale and weight per head (two
//	                 buffers, by the edge's parity)
//	acc [H·C]        Σ_k exp(l[k,h] − m[h])·hs[j,h,c] so far
//
// Per incoming edge p (k = edge_at(order, p), j = src[k]) warp w computes the
// logits of heads w, w + warps, …: z = Σ_c hs[j,h,c]·attSrc[h,c] (lanes
// striding over c, then a warp butterfly) + dterm[h] + Σ_f attr[k,f]·
// v[h,f], l = max(z, slope·z); its lane 0 alone keeps head h's m and s
// and publishes the rescale exp(m_old − m_new) and the weight
// exp(l − m_new); after a barrier every thread rescales its own acc
// elements (q = tid, tid + blockDim, …) and adds the weight times
// hs[j, q] (hs's row j starts at hs + j·lds, hd's row i at hd + i·ldd:
// either may be a column block of a wider projection). No barrier
// follows that update: sc and wt alternate between two buffers, and edge
// p + 2 overwrites edge p's only after edge p + 1's barrier, which each
// thread reaches after its reads of edge p. At the end
// r = bias[c] + (Σ_h acc[h,c]/s[h])·(1/H), or bias[c] for a node without
// incoming edges, and out[i,c] = alpha·r, or out[i,c] + alpha·r with
// accumulate (alpha·r rounded to fp32 first). H·C must fit an int (the
// Go side bounds the shared memory far below that).
__global__ void gat_aggregate_f32(float* out, const float* hs, const float* hd, const float* attr, const float* we,
                                  const float* attSrc, const float* attDst, const float* attEdge, const float* bias,
                                  const int64_t* src, const int64_t* rowPtr, const int64_t* order, GatGeom g) {
    extern __shared__ float sh[];
    gat_relation(out, hs, hd, attr, we, attSrc, attDst, attEdge, bias, src, rowPtr, order, g, sh, GatTailArgs{}, false);
}

// gather_mean_f32: out[i,f] = the mean of x[src[edge_at(order, p)], f] over p in
// [rowPtr[i], rowPtr[i+1]), 0 for a node without edges; one thread per
// (i, f), summing in p order from the first value in fp32 and scaling
// by the fp32 1/count: the CPU's IndexSelect and SegmentReduce Mean add
// in the same order, in float64, and divide, so the last bits may differ.
__global__ void gather_mean_f32(float* out, const float* x, const int64_t* src, const int64_t* rowPtr,
                                const int64_t* order, int64_t nd, int64_t fw) {
    GRID_STRIDE(q, nd * fw) {
        int64_t i = q / fw, f = q % fw;
        out[q] = gather_mean_at(x, src, rowPtr, order, fw, i, f);
    }
}

// gat_mean_at is gat_mean_f32's work for relation r in this block
// (documented there), shared with gat_mean_join_f32 so that the two
// compute every mean alike, bit for bit. m is read where it lies in
// parameter space (__grid_constant__); the geometry and the tail's
// arguments are copied out of it, by value, as gat_relation takes them.
__device__ __forceinline__ void gat_mean_at(const GatMulti& m, const int r, const bool W) {
    extern __shared__ float sh[];
    const GatRel& q = m.rel[r];
    GatGeom g;
    g.nd = m.nd;
    g.heads = m.heads;
    g.c = m.c;
    g.f = q.f;
    g.slope = m.slope;
    g.lds = q.lds;
    g.ldd = q.ldd;
    g.alpha = m.alpha;
    g.accumulate = 0;
    const GatTailArgs tail{m.scratch, m.out, m.res, m.counters, m.act, m.nrel, m.nd, m.c};
    float* o = m.scratch + (m.relBase + r) * m.nd * m.c;
    if (W) {
        gat_relation_warp(o, q.hs, q.hd, q.attr, q.we, q.attSrc, q.attDst, q.attEdge, q.bias, q.src, q.rowPtr,
                          q.order, g, sh, tail, m.counters != nullptr);
    } else {
        gat_relation(o, q.hs, q.hd, q.attr, q.we, q.attSrc, q.attDst, q.attEdge, q.bias, q.src, q.rowPtr, q.order, g,
                     sh, tail, m.counters != nullptr);
    }
}

// gat_mean_f32: the relations of a GatMulti side by side (the Go GATMean
// and GATMeanAct): grid (node blocks, nrel), block (x, y) running
// relation y's gat_relation (blocks, threads and shared memory as
// gat_aggregate_f32's, the shared memory sized for the widest relation)
// for nodes x, x + gridDim.x, …, writing alpha·r, rounded, into the
// relation's slice of scratch ([relations, nd, c]: relation relBase + y
// at (relBase + y)·nd·c). The relations run in parallel; with counters
// set (every relation in this one launch, relBase 0) the block that
// finishes a node's last relation adds them in order and writes out
// (gat_tail), else gat_combine_f32 then adds them. Compiled for blocks
// of 128 threads, 8 to a multiprocessor (Go's gatMaxThreads,
// gatMinBlocks): 64 registers a thread instead of 100, so that a
// batch-64 policy's launch runs in one wave.
__global__ void __launch_bounds__(128, 8) gat_mean_f32(const __grid_constant__ GatMulti m) {
    const int r = blockIdx.y;
    if (r >= (int)m.nrel) return;  // the whole block: before any barrier
    gat_mean_at(m, r, false);
}

// gat_mean_warp_f32 is gat_mean_f32 with gat_relation_warp: a warp per
// node, blocks of GW_WARPS warps (grid (⌈nodes / GW_WARPS⌉, nrel)),
// heads·f floats of dynamic shared memory; the same bits. Compiled for 4
// blocks of 128 threads to a multiprocessor (Go's gwMinBlocks).
__global__ void __launch_bounds__(128, 4) gat_mean_warp_f32(const __grid_constant__ GatMulti m) {
    const int r = blockIdx.y;
    if (r >= (int)m.nrel) return;  // the whole block: before any barrier
    gat_mean_at(m, r, true);
}

// GAT_JOIN is the most GATMeans one gat_mean_join_f32 launch runs (Go's
// gatJoin); GatJoin is the launch (Go's gatJoinPack: the count n, then
// yEnd[k], the end of mean k's relations along the grid's y — mean k's
// are [yEnd[k−1], yEnd[k]), from 0 — then each mean's GatMulti).
#define GAT_JOIN 4
struct GatJoin {
    int64_t n;
    int64_t yEnd[GAT_JOIN];
    GatMulti m[GAT_JOIN];
};

// gat_join_params copies what block (x, y) of a GAT join reads of its
// mean m — the header, and relation r as the first relation, relBase
// advanced by r so that its scratch is relation r's — into shared sm
// (threads 0 to 25 of a block of at least 26, then a barrier every
// thread of the block reaches), so
// that gat_mean_at(sm, 0, …) computes what gat_mean_at(m, r, …) does.
// Read through a mean chosen at run time (m = j.m[k]), the parameters
// were held in registers through the node loop and spilled (120 bytes
// a thread in the warp kernel at its 128-register bound, 8 this way);
// from shared memory the compiler reloads them where they are used. (The
// block kernel, gat_mean_join_f32, spills more this way at its 64: it
// reads its parameters as they are.)
__device__ __forceinline__ void gat_join_params(GatMulti& sm, const GatMulti& m, const int r) {
    const int64_t* from = reinterpret_cast<const int64_t*>(&m);
    int64_t* to = reinterpret_cast<int64_t*>(&sm);
    constexpr int hdr = (int)(offsetof(GatMulti, rel) / 8), relw = (int)(sizeof(GatRel) / 8);
    constexpr int base = (int)(offsetof(GatMulti, relBase) / 8);
    const int t = threadIdx.x;
    if (t < hdr) {
        to[t] = from[t] + (t == base ? r : 0);
    } else if (t < hdr + relw) {
        to[t] = from[hdr + r * relw + t - hdr];
    }
    __syncthreads();
}

// gat_mean_join_f32: up to GAT_JOIN independent GATMeans, each of one
// gat_mean_f32 launch that adds its own relations (counters set: the
// tail; kernels.GATMeansJoiner: a heterogeneous GAT layer's node types,
// none reading what another writes), in one launch: block (x, y) runs
// relation y − yEnd[k−1] of mean k for nodes x, x + gridDim.x, … with
// gat_mean_f32's code (gat_mean_at), so every output holds the bits its
// own launch writes. gridDim.x is the widest mean's; a block past a
// mean's nodes has nothing to do. Each mean's scratch and counters are
// its own.
__global__ void __launch_bounds__(128, 8) gat_mean_join_f32(const __grid_constant__ GatJoin j) {
    const int y = blockIdx.y;
    int k = 0;
    while (k + 1 < (int)j.n && y >= j.yEnd[k]) k++;
    const int r = k == 0 ? y : y - (int)j.yEnd[k - 1];
    const GatMulti& m = j.m[k];
    if (r >= (int)m.nrel || (int64_t)blockIdx.x >= m.nd) return;  // the whole block: before any barrier
    gat_mean_at(m, r, false);
}

// gat_mean_join_warp_f32 is gat_mean_join_f32 with gat_relation_warp
// (gat_mean_warp_f32's blocks: gridDim.x the widest mean's ⌈nodes /
// GW_WARPS⌉), its block's parameters read through shared memory
// (gat_join_params); the same bits.
__global__ void __launch_bounds__(128, 4) gat_mean_join_warp_f32(const __grid_constant__ GatJoin j) {
    const int y = blockIdx.y;
    int k = 0;
    while (k + 1 < (int)j.n && y >= j.yEnd[k]) k++;
    const int r = k == 0 ? y : y - (int)j.yEnd[k - 1];
    const GatMulti& m = j.m[k];
    // The whole block, before the barrier: a block past the mean's nodes.
    if (r >= (int)m.nrel || (int64_t)blockIdx.x * (blockDim.x >> 5) >= m.nd) return;
    __shared__ GatMulti sm;
    gat_join_params(sm, m, r);
    gat_mean_at(sm, 0, true);
}

// gat_combine_f32: out[q] = scratch[q], then + scratch[r·n + q] for r =
// 1, …, nrel − 1 in order (__fadd_rn: the sums the per-relation launches
// of gat_aggregate_f32 make, accumulating); with act ≥ 0 then
// unary_f(act, ·) and, with res, + res[q] (the layer's activation and
// residual, as Unary and Binary Add round them).
__global__ void gat_combine_f32(float* out, const float* scratch, int64_t nrel, int64_t n, int act, const float* res) {
    GRID_STRIDE(q, n) {
        float v = scratch[q];
        for (int64_t r = 1; r < nrel; r++) v = __fadd_rn(v, scratch[r * n + q]);
        if (act >= 0) {
            v = unary_f(act, v);
            if (res) v = __fadd_rn(v, res[q]);
        }
        out[q] = v;
    }
}

// gather_concat_f32: the pieces of a GatherCat in one launch (the Go
// GatherConcat, up to GATHER_MAX pieces a launch): one thread per (i, j)
// over the launch's local columns j in [0, width), out[i, col + j − loc]
// of the piece whose [loc, loc + w) holds j: the mean over its CSR
// (gather_mean_f32's sum, bit for bit), its x's row i (kind 1) or 1
// (kind 2); out's rows are ldo elements apart.
__global__ void gather_concat_f32(const __grid_constant__ GatherCat m) {
    GRID_STRIDE(q, m.nd * m.width) {
        const int64_t i = q / m.width, j = q % m.width;
        const GatherPart& g = m.p[gather_part_of(m.p, (int)m.npieces, j)];
        const int64_t f = j - g.loc;
        m.out[i * m.ldo + g.col + f] = gather_part_at(g, i, f);
    }
}

// gather_sum_f32: a GatherSum's terms (kernels.GatherSummer, the Go
// GatherSum, up to GSUM_MAX terms a launch), one thread per element
// (i, f) of out [nd, c]: v starts at 0, or at out[i, f] with accumulate
// (a launch after the first), and adds each term in order (__fadd_rn),
// a gathered one's mean as gather_mean_f32 computes it, another its
// row i (ld 0: a bias); with act ≥ 0 (the last launch) v is then scaled
// (__fmul_rn, unless the scale is 1), passed through unary_f(act, ·)
// and given res[i, f] when res is set, as scale_act_add_f32 rounds
// them.
//
// A thread gathers GSUM_ILP terms at once, so that their chains of
// dependent loads (rowPtr, then per edge order, src and x) are in flight
// together rather than one term's after another's: edges j and j + 1 of
// every term of the group (order, then src, then x, each round's loads
// together), then edges j + 2 and j + 3. Each term is still its mean as
// gather_mean_at computes it (the sum in p order from the first value,
// times 1/count; 0 without edges), and the terms are still added to v
// in order, so the bits are the one-term-at-a-time loop's.
//
// gather_sum_at is the kernel's work for element q; the argument is
// read where it lies in parameter space (__grid_constant__), shared with
// gather_sum_join_f32, so that the two compute every element alike, bit
// for bit.
#define GSUM_ILP 4
__device__ __forceinline__ void gather_sum_at(const GatherSumArgs& m, const int64_t q) {
    {
        const int64_t i = q / m.c, f = q % m.c;
        float v = m.accumulate ? m.out[q] : 0.f;
        const int nt = (int)m.nterms;
        for (int k0 = 0; k0 < nt; k0 += GSUM_ILP) {
            float t[GSUM_ILP];
            int64_t a[GSUM_ILP], b[GSUM_ILP];
#pragma unroll
            for (int u = 0; u < GSUM_ILP; u++) {
                a[u] = 0;
                b[u] = 0;
                t[u] = 0.f;
                if (k0 + u < nt) {
                    const GsumTerm& g = m.t[k0 + u];
                    if (g.src) {
                        a[u] = g.rowPtr[i];
                        b[u] = g.rowPtr[i + 1];
                    } else {
                        t[u] = g.x[i * g.ld + f];
                    }
                }
            }
            int64_t most = 0;
#pragma unroll
            for (int u = 0; u < GSUM_ILP; u++) most = max(most, b[u] - a[u]);
            // Edges j and j + 1 of every term together: their order, then
            // their src, then their x loads in flight at once.
            for (int64_t j = 0; j < most; j += 2) {
                int64_t o[GSUM_ILP][2];
#pragma unroll
                for (int u = 0; u < GSUM_ILP; u++) {
#pragma unroll
                    for (int e = 0; e < 2; e++) o[u][e] = a[u] + j + e < b[u] ? edge_at(m.t[k0 + u].order, a[u] + j + e) : -1;
                }
#pragma unroll
                for (int u = 0; u < GSUM_ILP; u++) {
#pragma unroll
                    for (int e = 0; e < 2; e++) {
                        if (o[u][e] >= 0) o[u][e] = m.t[k0 + u].src[o[u][e]];
                    }
                }
                float x[GSUM_ILP][2];
#pragma unroll
                for (int u = 0; u < GSUM_ILP; u++) {
#pragma unroll
                    for (int e = 0; e < 2; e++) {
                        const GsumTerm& g = m.t[k0 + u];
                        x[u][e] = o[u][e] >= 0 ? g.x[o[u][e] * g.ld + f] : 0.f;
                    }
                }
#pragma unroll
                for (int u = 0; u < GSUM_ILP; u++) {
#pragma unroll
                    for (int e = 0; e < 2; e++) {
                        if (a[u] + j + e < b[u]) t[u] = j + e == 0 ? x[u][e] : t[u] + x[u][e];
                    }
                }
            }
#pragma unroll
            for (int u = 0; u < GSUM_ILP; u++) {
                if (k0 + u < nt) {
                    if (b[u] > a[u]) t[u] = t[u] * (1.f / (float)(b[u] - a[u]));
                    v = __fadd_rn(v, t[u]);
                }
            }
        }
        if (m.act >= 0) {
            if (m.scale != 1.0) v = __fmul_rn(v, (float)m.scale);
            v = unary_f((int)m.act, v);
            if (m.res) v = __fadd_rn(v, m.res[q]);
        }
        m.out[q] = v;
    }
}

__global__ void __launch_bounds__(256, 4) gather_sum_f32(const __grid_constant__ GatherSumArgs m) {
    GRID_STRIDE(q, m.nd * m.c) gather_sum_at(m, q);
}

// GSUM_JOIN is the most GatherSums one gather_sum_join_f32 launch runs
// (Go's gsumJoin); GatherSumJoin is the launch (Go's gsumJoinPack: the
// count n, then end[k], the end of sum k's elements in the joined range
// — sum k's are [end[k−1], end[k]), from 0 — then each sum's
// GatherSumArgs).
#define GSUM_JOIN 4
struct GatherSumJoin {
    int64_t n;
    int64_t end[GSUM_JOIN];
    GatherSumArgs a[GSUM_JOIN];
};

// gather_sum_join_f32: up to GSUM_JOIN independent GatherSums of one
// gather_sum_f32 launch each (kernels.GatherSumsJoiner: a heterogeneous
// layer's node types, none reading what another writes) in one launch,
// one thread per element of the joined range: element q of sum k is
// element q − end[k−1] of its own launch, computed by the same code
// (gather_sum_at), so every output holds the bits its own launch writes.
__global__ void __launch_bounds__(256, 4) gather_sum_join_f32(const __grid_constant__ GatherSumJoin j) {
    GRID_STRIDE(q, j.end[j.n - 1]) {
        int k = 0;
        while (k + 1 < (int)j.n && q >= j.end[k]) k++;
        gather_sum_at(j.a[k], k == 0 ? q : q - j.end[k - 1]);
    }
}

// RH_MAX is the most heads one relu_heads_f32 launch runs (Go's
// rhMax), RH_ROWS the rows a block takes (Go's rhRows) and RH_IN the
// most gathered inputs (GatherIn, common.cuh) a launch reads (Go's rhIn).
// RhHead is one head (Go's rhPack, word for word: x, w1, b1, w2, b2 and
// out, then n rows, k inputs, hd hidden units and o outputs, in — 0: x
// is the input, else RhArgs.in[in − 1] — then join, null or the joined
// output its outputs are also written to, its row stride jld, the head's
// first column jcol and jrows, the head's rows per joined row), RhArgs
// the launch: the head count, then tileEnd[h], the end of head h's row
// tiles along the grid — head h's are [tileEnd[h−1], tileEnd[h]), from
// 0 — then the gathered inputs, then the heads.
#define RH_MAX 16
#define RH_ROWS 8
#define RH_IN 4
struct RhHead {
    const float *x, *w1, *b1, *w2, *b2;
    float* out;
    int64_t n, k, hd, o, in;
    float* join;
    int64_t jld, jcol, jrows;
};
struct RhArgs {
    int64_t nheads;
    int64_t tileEnd[RH_MAX];
    GatherIn in[RH_IN];
    RhHead h[RH_MAX];
};

// rh_store is rh_layer's output of unit u for the block's rows: each
// row's sum over the warp (a butterfly), plus the bias b[u] (b null:
// none), through ReLU when relu (unary_f's: NaN kept), stored by lane 0
// for the rows < rows at dst[r·ld + u].
__device__ __forceinline__ void rh_store(float (&acc)[RH_ROWS], const float* b, int64_t u, bool relu, int rows,
                                         float* dst, int64_t ld, int lane) {
#pragma unroll
    for (int r = 0; r < RH_ROWS; r++) {
        float v = warp_sum(acc[r]);
        if (lane == 0 && r < rows) {
            if (b) v += b[u];
            dst[r * ld + u] = relu ? unary_f(U_RELU, v) : v;
        }
    }
}

// rh_layer is one layer of a relu_heads_f32 block: for every unit u of
// units, the sums Σ_p in[r·width + p]·w[u·width + p] for the block's
// RH_ROWS rows (lanes striding over p, fma in order, then a warp
// butterfly: the order is fixed), stored through rh_store. Warp w takes
// units in pairs, w and w + warps, then w + 2·warps and w + 3·warps, …:
// a pair's weight loads are in flight together and each input value read
// from shared memory feeds both units' sums (every sum is the one a unit
// alone would make, bit for bit).
__device__ __forceinline__ void rh_layer(const float* in, const float* w, const float* b, int64_t width,
                                         int64_t units, bool relu, int rows, float* dst, int64_t ld) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
    for (int64_t u = warp; u < units; u += 2 * warps) {
        const int64_t u2 = u + warps;
        const bool two = u2 < units;  // the same for the whole warp
        float acc[RH_ROWS], acc2[RH_ROWS];
#pragma unroll
        for (int r = 0; r < RH_ROWS; r++) acc[r] = acc2[r] = 0.f;
        const float* wr = w + u * width;
        const float* wr2 = w + (two ? u2 : u) * width;
#pragma unroll 4
        for (int64_t p = lane; p < width; p += 32) {
            const float wv = wr[p], wv2 = wr2[p];
#pragma unroll
            for (int r = 0; r < RH_ROWS; r++) {
                const float x = in[r * width + p];
                acc[r] = fmaf(x, wv, acc[r]);
                acc2[r] = fmaf(x, wv2, acc2[r]);
            }
        }
        rh_store(acc, b, u, relu, rows, dst, ld, lane);
        if (two) rh_store(acc2, b, u2, relu, rows, dst, ld, lane);
    }
}

// relu_heads_f32: small two-layer heads (kernels.ReluHeadser), out =
// relu(x·w1ᵀ + b1)·w2ᵀ + b2 for x [n, k], w1 [hd, k], w2 [o, hd] (b1, b2
// optional), every head of a launch together: block b takes rows t·
// RH_ROWS, … of the head whose tiles hold it (t its tile within the
// head), copies them into dynamic shared memory (zeros past the head's
// rows) — from x, or for a head with a gathered input each element as
// gather_in_at computes it — computes their hidden units into shared memory
// (rh_layer with ReLU), then their outputs into shared memory, and
// copies those to out and, for a head with a join, to its columns of the
// joined output. Dynamic shared memory: RH_ROWS·(max(k, o) + hd) floats
// of the widest head.
__global__ void __launch_bounds__(1024) relu_heads_f32(const __grid_constant__ RhArgs a) {
    extern __shared__ float sh[];
    int64_t t = blockIdx.x;
    int c = 0;
    while (c + 1 < (int)a.nheads && t >= a.tileEnd[c]) c++;
    if (c > 0) t -= a.tileEnd[c - 1];
    const RhHead& q = a.h[c];
    const int64_t r0 = t * RH_ROWS;
    const int rows = (int)min((int64_t)RH_ROWS, q.n - r0);
    float* xs = sh;
    float* hs = sh + RH_ROWS * max(q.k, q.o);  // xs holds a tile's rows, later its outputs
    // Two loops, not one choosing per element: at the kernel's
    // 64-register bound the one loop spills.
    if (q.in > 0) {
        const GatherIn& in = a.in[q.in - 1];
        for (int64_t e = threadIdx.x; e < RH_ROWS * q.k; e += blockDim.x) {
            const int64_t r = e / q.k;
            xs[e] = r < rows ? gather_in_at(in, r0 + r, e % q.k) : 0.f;
        }
    } else {
        for (int64_t e = threadIdx.x; e < RH_ROWS * q.k; e += blockDim.x) {
            const int64_t r = e / q.k;
            xs[e] = r < rows ? q.x[(r0 + r) * q.k + e % q.k] : 0.f;
        }
    }
    __syncthreads();  // the rows are in
    rh_layer(xs, q.w1, q.b1, q.k, q.hd, true, RH_ROWS, hs, q.hd);
    __syncthreads();  // every hidden unit is in, no row read any more
    // The outputs go into shared memory first (xs's place, which holds
    // max(k, o) floats a row), then out and the join take them
    // coalesced, a thread an element.
    rh_layer(hs, q.w2, q.b2, q.hd, q.o, false, rows, xs, q.o);
    __syncthreads();  // every output is in
    for (int64_t e = threadIdx.x; e < rows * q.o; e += blockDim.x) {
        const float v = xs[e];
        q.out[r0 * q.o + e] = v;
        if (q.join) {
            const int64_t R = r0 + e / q.o, u = e % q.o;
            q.join[(R / q.jrows) * q.jld + q.jcol + (R % q.jrows) * q.o + u] = v;
        }
    }
}

}  // extern "C"
