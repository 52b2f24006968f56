// The backward of a GATMean (kernels.GATMeanGradder), F32: a heterogeneous
// GAT layer trained with its forward fused. See graph.cu for the forward.
#include "common.cuh"

// GG_MAX_RELS is the most relations one gat_mean_grad_f32 launch takes
// (Go's ggMaxRels). GgRel is one relation (Go's ggRel, word for word:
// seven operand pointers, three index pointers, six gradient pointers —
// null: not wanted, dv the relation's [H·F] scratch, never null — then
// hs's and hd's row strides and attr's width F); GgArgs the launch (Go's
// ggPack: g, then nrel, nd, heads, c, slope and alpha, then the
// relations).
#define GG_MAX_RELS 8
struct GgRel {
    const float *hs, *hd, *attr, *we, *attSrc, *attDst, *attEdge;
    const int64_t *src, *rowPtr, *order;
    float *dHs, *dHd, *dAttSrc, *dAttDst, *dBias, *dv;
    int64_t lds, ldd, f;
};
struct GgArgs {
    const float* g;
    int64_t nrel, nd, heads, c;
    double slope, alpha;
    GgRel rel[GG_MAX_RELS];
};

// gg_warp_sum returns the sum of v over the warp's lanes to every lane.
__device__ __forceinline__ float gg_warp_sum(float v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffff, v, o);
    return v;
}

// gg_leaky_grad is the derivative of max(z, slope·z): 1 where z wins,
// slope where slope·z does, (1 + slope)/2 at a tie (autograd's Maximum
// splits a tie evenly).
__device__ __forceinline__ float gg_leaky_grad(float z, float slope) {
    const float s = slope * z;
    if (z > s) return 1.f;
    if (z < s) return slope;
    return 0.5f * (1.f + slope);
}

extern "C" {

// gat_mean_grad_f32: grid (node blocks, relations), blocks of a multiple
// of 32 threads; block (x, y) runs relation y for nodes x, x + gridDim.x,
// …. Per node i, with ga = alpha·g[i, :] (alpha = 1/R): ga is added to
// dBias; then warp w takes heads w, w + warps, …, and for its head h
// goes three times over i's incoming edges p (k = edge_at(order, p), j = src[k])
// computing z = Σ_c hs[j,h,c]·attSrc[h,c] + Σ_c hd[i,h,c]·attDst[h,c] +
// Σ_f attr[k,f]·v[h,f] (v = attEdge folded into we, per block) and
// l = max(z, slope·z): first the maximum m of l, then e = exp(l − m),
// their sum s and u = Σ_p e·dα with dα = (1/H)·Σ_c ga[c]·hs[j,h,c], then
// α = e/s, dz = α·(dα − u/s)·leaky'(z), adding α·ga/H + dz·attSrc[h, :]
// into dHs[j, h, :] (atomics: sources are shared between nodes),
// dz·hs[j, h, :] into dAttSrc, dz·hd[i, h, :] into dAttDst and dz·attr[k,
// :] into dv (per block in shared memory, then one atomic add each), and
// dz·attDst[h, :] into dHd[i, h, :], which the node's block writes alone
// (zeros for a node without edges). dHs, dAttSrc, dAttDst, dBias and dv
// must be zeroed before the launch; gat_grad_edge_f32 then turns dv into
// the gradients of attEdge and we. Dynamic shared memory: 2·H·F + C +
// 3·H·C floats.
__global__ void __launch_bounds__(128) gat_mean_grad_f32(const __grid_constant__ GgArgs a) {
    extern __shared__ float sh[];
    const int r = blockIdx.y;
    if (r >= (int)a.nrel) return;  // the whole block: before any barrier
    const GgRel& q = a.rel[r];
    const int H = (int)a.heads, C = (int)a.c, F = (int)q.f, HC = H * C;
    float* v = sh;              // [H·F]
    float* ga = v + H * F;      // [C]
    float* dhd = ga + C;        // [H·C]
    float* das = dhd + HC;      // [H·C]
    float* dad = das + HC;      // [H·C]
    float* dvs = dad + HC;      // [H·F]
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, warps = blockDim.x >> 5;
    const float slope = (float)a.slope, alpha = (float)a.alpha, invH = 1.f / (float)H;

    for (int t = warp; t < H * F; t += warps) {
        const int h = t / F, f = t % F;
        float part = 0.f;
        for (int c = lane; c < C; c += 32) part += q.attEdge[h * C + c] * q.we[((int64_t)h * C + c) * F + f];
        part = gg_warp_sum(part);
        if (lane == 0) v[t] = part;
    }
    for (int t = tid; t < HC; t += blockDim.x) das[t] = dad[t] = 0.f;
    for (int t = tid; t < H * F; t += blockDim.x) dvs[t] = 0.f;
    __syncthreads();  // v set, the block's sums zeroed

    for (int64_t i = blockIdx.x; i < a.nd; i += gridDim.x) {
        for (int c = tid; c < C; c += blockDim.x) {
            const float x = alpha * a.g[i * C + c];
            ga[c] = x;
            if (q.dBias) atomicAdd(q.dBias + c, x);
        }
        for (int t = tid; t < HC; t += blockDim.x) dhd[t] = 0.f;
        __syncthreads();  // ga and dhd set
        const int64_t p0 = q.rowPtr[i], p1 = q.rowPtr[i + 1];
        for (int h = warp; h < H && p1 > p0; h += warps) {
            const float* hdi = q.hd + i * q.ldd + (int64_t)h * C;
            float dterm = 0.f;
            for (int c = lane; c < C; c += 32) dterm += hdi[c] * q.attDst[h * C + c];
            dterm = gg_warp_sum(dterm);
            // z of edge p, on every lane.
            auto logit = [&](int64_t p, const float** hj, int64_t* k) {
                *k = edge_at(q.order, p);
                *hj = q.hs + q.src[*k] * q.lds + (int64_t)h * C;
                float part = 0.f;
                for (int c = lane; c < C; c += 32) part += (*hj)[c] * q.attSrc[h * C + c];
                float z = gg_warp_sum(part) + dterm;
                for (int f = 0; f < F; f++) z += q.attr[*k * F + f] * v[h * F + f];
                return z;
            };
            float m = -INFINITY;
            for (int64_t p = p0; p < p1; p++) {
                const float* hj;
                int64_t k;
                const float z = logit(p, &hj, &k);
                m = fmaxf(m, fmaxf(z, slope * z));
            }
            float s = 0.f, u = 0.f;
            for (int64_t p = p0; p < p1; p++) {
                const float* hj;
                int64_t k;
                const float z = logit(p, &hj, &k);
                const float e = expf(fmaxf(z, slope * z) - m);
                float part = 0.f;
                for (int c = lane; c < C; c += 32) part += ga[c] * hj[c];
                s += e;
                u += e * gg_warp_sum(part) * invH;
            }
            const float t = u / s;
            for (int64_t p = p0; p < p1; p++) {
                const float* hj;
                int64_t k;
                const float z = logit(p, &hj, &k);
                const float al = expf(fmaxf(z, slope * z) - m) / s;
                float part = 0.f;
                for (int c = lane; c < C; c += 32) part += ga[c] * hj[c];
                const float dal = gg_warp_sum(part) * invH;
                const float dz = al * (dal - t) * gg_leaky_grad(z, slope);
                const int64_t j = q.src[k];
                for (int c = lane; c < C; c += 32) {
                    const int o = h * C + c;
                    if (q.dHs) atomicAdd(q.dHs + j * HC + o, al * ga[c] * invH + dz * q.attSrc[o]);
                    das[o] += dz * hj[c];
                    dad[o] += dz * hdi[c];
                    dhd[o] += dz * q.attDst[o];
                }
                if (lane < F) dvs[h * F + lane] += dz * q.attr[k * F + lane];
                for (int f = lane + 32; f < F; f += 32) dvs[h * F + f] += dz * q.attr[k * F + f];
            }
        }
        __syncthreads();  // the node's dhd is complete
        if (q.dHd)
            for (int t = tid; t < HC; t += blockDim.x) q.dHd[i * HC + t] = dhd[t];
        __syncthreads();  // ga and dhd free for the next node
    }
    for (int t = tid; t < HC; t += blockDim.x) {
        if (q.dAttSrc) atomicAdd(q.dAttSrc + t, das[t]);
        if (q.dAttDst) atomicAdd(q.dAttDst + t, dad[t]);
    }
    for (int t = tid; t < H * F; t += blockDim.x) atomicAdd(q.dv + t, dvs[t]);
}

// gat_grad_edge_f32: one relation's gradients of attEdge and we from its
// dv [H·F] (gat_mean_grad_f32's): dAttEdge[h·C+c] = Σ_f dv[h,f]·we[h·C+c,
// f] and dWe[h·C+c, f] = attEdge[h·C+c]·dv[h,f] (either null: not
// wanted), a thread per (h, c).
__global__ void gat_grad_edge_f32(float* dAttEdge, float* dWe, const float* dv, const float* attEdge, const float* we,
                                  int64_t heads, int64_t c, int64_t f) {
    GRID_STRIDE(o, heads * c) {
        const int64_t h = o / c;
        float t = 0.f;
        for (int64_t k = 0; k < f; k++) {
            const float d = dv[h * f + k];
            t += d * we[o * f + k];
            if (dWe) dWe[o * f + k] = attEdge[o] * d;
        }
        if (dAttEdge) dAttEdge[o] = t;
    }
}

// gather_mean_grad_f32: the backward of gather_mean_f32
// (kernels.GatherMeanGradder), a thread per (destination i, column f):
// g[i, f]/n_i added with an atomic into dx[src[edge_at(order, p)], f] for each of
// i's n_i incoming edges p. dx must be zeroed before the launch.
__global__ void gather_mean_grad_f32(float* dx, const float* g, const int64_t* src, const int64_t* rowPtr,
                                     const int64_t* order, int64_t nd, int64_t fw) {
    GRID_STRIDE(q, nd * fw) {
        const int64_t i = q / fw, f = q % fw;
        const int64_t a = rowPtr[i], b = rowPtr[i + 1];
        if (b <= a) continue;
        const float v = g[q] * (1.f / (float)(b - a));
        for (int64_t p = a; p < b; p++) atomicAdd(dx + src[edge_at(order, p)] * fw + f, v);
    }
}

}  // extern "C"
