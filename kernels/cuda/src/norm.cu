// Batch and group normalisation over NCHW (x viewed as [N, C, HW]) and
// layer normalisation over the last n elements of each row, in fp32 and
// bf16, statistics in fp32. Reductions run one block of
// NORM_THREADS threads per channel (batch norm) or per (sample, group)
// (group norm); the elementwise passes are grid-stride loops. Per-channel
// weight gradients are summed over the samples in order, so every result
// is deterministic.
#include <cuda_bf16.h>
#include <stdint.h>
#include <math.h>
#include "common.cuh"

// block_sum reduces v over the block and returns the sum to every thread.

// --- batch norm ---------------------------------------------------------

// bn_stats: block ch writes mean[ch] and rstd[ch]: the batch statistics
// (biased variance, two passes) in training, updating the running ones
// (rm, rv, optional) with momentum and the unbiased variance; the running
// statistics in evaluation.
template <typename T>
__device__ void bn_stats(float* mean, float* rstd, float* rm, float* rv, const T* x, int64_t n, int64_t c, int64_t hw,
                         int training, float momentum, float eps) {
    int64_t ch = blockIdx.x, cnt = n * hw;
    if (!training) {
        if (threadIdx.x == 0) {
            mean[ch] = rm[ch];
            rstd[ch] = 1.f / sqrtf(rv[ch] + eps);
        }
        return;
    }
    float s = 0.f;
    for (int64_t e = threadIdx.x; e < cnt; e += blockDim.x) s += ld(x, ((e / hw) * c + ch) * hw + e % hw);
    float mu = block_sum(s) / (float)cnt;
    float q = 0.f;
    for (int64_t e = threadIdx.x; e < cnt; e += blockDim.x) {
        float d = ld(x, ((e / hw) * c + ch) * hw + e % hw) - mu;
        q += d * d;
    }
    float var = block_sum(q) / (float)cnt;
    if (threadIdx.x == 0) {
        mean[ch] = mu;
        rstd[ch] = 1.f / sqrtf(var + eps);
        if (rm) rm[ch] = (1.f - momentum) * rm[ch] + momentum * mu;
        if (rv) rv[ch] = (1.f - momentum) * rv[ch] + momentum * (cnt > 1 ? var * (float)cnt / (float)(cnt - 1) : var);
    }
}

// bn_apply: y = (x − mean)·rstd·w + b per channel.
template <typename T>
__device__ void bn_apply(T* y, const T* x, const float* mean, const float* rstd, const T* w, const T* b, int64_t c,
                         int64_t hw, int64_t n) {
    GRID_STRIDE(i, n) {
        int64_t ch = (i / hw) % c;
        float v = (ld(x, i) - mean[ch]) * rstd[ch];
        if (w) v *= ld(w, ch);
        if (b) v += ld(b, ch);
        st(y, i, v);
    }
}

// bn_bwd_sums: block ch writes sums[ch] = Σ dy and sums[c + ch] = Σ dy·x̂
// over the batch, and db, dw (optional) from them.
template <typename T>
__device__ void bn_bwd_sums(float* sums, T* dw, T* db, const T* dy, const T* x, const float* mean, const float* rstd,
                            int64_t n, int64_t c, int64_t hw) {
    int64_t ch = blockIdx.x, cnt = n * hw;
    float mu = mean[ch], r = rstd[ch], a = 0.f, b = 0.f;
    for (int64_t e = threadIdx.x; e < cnt; e += blockDim.x) {
        int64_t i = ((e / hw) * c + ch) * hw + e % hw;
        float g = ld(dy, i);
        a += g;
        b += g * (ld(x, i) - mu) * r;
    }
    a = block_sum(a);
    b = block_sum(b);
    if (threadIdx.x == 0) {
        sums[ch] = a;
        sums[c + ch] = b;
        if (db) st(db, ch, a);
        if (dw) st(dw, ch, b);
    }
}

// bn_bwd_dx: dx = w·r·(dy − Σdy/cnt − x̂·Σdy·x̂/cnt) in training, w·r·dy
// in evaluation (the statistics are constants then).
template <typename T>
__device__ void bn_bwd_dx(T* dx, const T* dy, const T* x, const float* mean, const float* rstd, const T* w,
                          const float* sums, int training, int64_t c, int64_t hw, int64_t cnt, int64_t n) {
    GRID_STRIDE(i, n) {
        int64_t ch = (i / hw) % c;
        float r = rstd[ch], wk = w ? ld(w, ch) : 1.f, g = ld(dy, i);
        if (!training) {
            st(dx, i, g * wk * r);
            continue;
        }
        float h = (ld(x, i) - mean[ch]) * r;
        st(dx, i, wk * r * (g - sums[ch] / (float)cnt - h * sums[c + ch] / (float)cnt));
    }
}

// --- group norm ---------------------------------------------------------

// gn_fwd: block it = (sample, group) normalises its cg·hw contiguous
// elements and applies the per-channel w, b; mean and rstd optional.
template <typename T>
__device__ void gn_fwd(T* y, float* mean, float* rstd, const T* x, const T* w, const T* b, int64_t groups, int64_t cg,
                       int64_t hw, float eps) {
    int64_t it = blockIdx.x, size = cg * hw, base = it * size, c0 = (it % groups) * cg;
    float s = 0.f;
    for (int64_t j = threadIdx.x; j < size; j += blockDim.x) s += ld(x, base + j);
    float mu = block_sum(s) / (float)size;
    float q = 0.f;
    for (int64_t j = threadIdx.x; j < size; j += blockDim.x) {
        float d = ld(x, base + j) - mu;
        q += d * d;
    }
    float r = 1.f / sqrtf(block_sum(q) / (float)size + eps);
    for (int64_t j = threadIdx.x; j < size; j += blockDim.x) {
        int64_t ch = c0 + j / hw;
        float v = (ld(x, base + j) - mu) * r;
        if (w) v *= ld(w, ch);
        if (b) v += ld(b, ch);
        st(y, base + j, v);
    }
    if (threadIdx.x == 0) {
        if (mean) mean[it] = mu;
        if (rstd) rstd[it] = r;
    }
}

// gn_bwd: block it = (sample, group) writes the per-(sample, channel)
// sums part[nn·c + ch] = Σ dy, part[N·c + nn·c + ch] = Σ dy·x̂ and, when
// dx is wanted, dx = r·(dy·w − mean(dy·w) − x̂·mean(dy·w·x̂)).
template <typename T>
__device__ void gn_bwd(T* dx, float* part, const T* dy, const T* x, const float* mean, const float* rstd, const T* w,
                       int64_t nsamples, int64_t c, int64_t groups, int64_t cg, int64_t hw) {
    int64_t it = blockIdx.x, size = cg * hw, base = it * size, c0 = (it % groups) * cg, nn = it / groups;
    float mu = mean[it], r = rstd[it], sa = 0.f, sb = 0.f;
    for (int64_t k = 0; k < cg; k++) {
        float a = 0.f, b = 0.f;
        for (int64_t j = threadIdx.x; j < hw; j += blockDim.x) {
            int64_t i = base + k * hw + j;
            float g = ld(dy, i);
            a += g;
            b += g * (ld(x, i) - mu) * r;
        }
        a = block_sum(a);
        b = block_sum(b);
        if (threadIdx.x == 0) {
            part[nn * c + c0 + k] = a;
            part[nsamples * c + nn * c + c0 + k] = b;
        }
        float wk = w ? ld(w, c0 + k) : 1.f;
        sa += a * wk;
        sb += b * wk;
    }
    if (!dx) return;
    sa /= (float)size;
    sb /= (float)size;
    for (int64_t j = threadIdx.x; j < size; j += blockDim.x) {
        int64_t ch = c0 + j / hw;
        float wk = w ? ld(w, ch) : 1.f, h = (ld(x, base + j) - mu) * r;
        st(dx, base + j, r * (ld(dy, base + j) * wk - sa - h * sb));
    }
}

// gn_bwd_dwdb: one thread per channel sums the samples' parts in order.
template <typename T>
__device__ void gn_bwd_dwdb(T* dw, T* db, const float* part, int64_t nsamples, int64_t c) {
    GRID_STRIDE(ch, c) {
        float a = 0.f, b = 0.f;
        for (int64_t i = 0; i < nsamples; i++) {
            a += part[i * c + ch];
            b += part[nsamples * c + i * c + ch];
        }
        if (db) st(db, ch, a);
        if (dw) st(dw, ch, b);
    }
}

// --- layer norm over the last n elements of each row -------------------

// layernorm_fwd: one block per row; mean and rstd = 1/sqrt(var + eps)
// (biased variance, two passes) are saved for the backward pass.
template <typename T>
__device__ void layernorm_fwd(T* y, float* mean, float* rstd, const T* x, const T* w, const T* b, int64_t n,
                              float eps) {
    int64_t base = (int64_t)blockIdx.x * n;
    float s = 0.f;
    for (int64_t j = threadIdx.x; j < n; j += blockDim.x) s += ld(x, base + j);
    float mu = block_sum(s) / (float)n;
    float q = 0.f;
    for (int64_t j = threadIdx.x; j < n; j += blockDim.x) {
        float d = ld(x, base + j) - mu;
        q += d * d;
    }
    float r = rsqrtf(block_sum(q) / (float)n + eps);
    for (int64_t j = threadIdx.x; j < n; j += blockDim.x) {
        float v = (ld(x, base + j) - mu) * r;
        if (w) v *= ld(w, j);
        if (b) v += ld(b, j);
        st(y, base + j, v);
    }
    if (threadIdx.x == 0) {
        mean[blockIdx.x] = mu;
        rstd[blockIdx.x] = r;
    }
}

// layernorm_bwd_dx: dx = r·(g − mean(g) − x̂·mean(g·x̂)), g = dy·w.
template <typename T>
__device__ void layernorm_bwd_dx(T* dx, const T* dy, const T* x, const float* mean, const float* rstd, const T* w,
                                 int64_t n) {
    int64_t base = (int64_t)blockIdx.x * n;
    float mu = mean[blockIdx.x], r = rstd[blockIdx.x];
    float sg = 0.f, sgx = 0.f;
    for (int64_t j = threadIdx.x; j < n; j += blockDim.x) {
        float g = ld(dy, base + j) * (w ? ld(w, j) : 1.f);
        float xh = (ld(x, base + j) - mu) * r;
        sg += g;
        sgx += g * xh;
    }
    sg = block_sum(sg) / (float)n;
    sgx = block_sum(sgx) / (float)n;
    for (int64_t j = threadIdx.x; j < n; j += blockDim.x) {
        float g = ld(dy, base + j) * (w ? ld(w, j) : 1.f);
        float xh = (ld(x, base + j) - mu) * r;
        st(dx, base + j, r * (g - sg - xh * sgx));
    }
}

// layernorm_bwd_dwdb: one thread per column j sums over the rows in
// order (deterministic): dw[j] = Σ dy·x̂, db[j] = Σ dy.
template <typename T>
__device__ void layernorm_bwd_dwdb(T* dw, T* db, const T* dy, const T* x, const float* mean, const float* rstd,
                                   int64_t rows, int64_t n) {
    GRID_STRIDE(j, n) {
        float sw = 0.f, sb = 0.f;
        for (int64_t i = 0; i < rows; i++) {
            float g = ld(dy, i * n + j);
            sw += g * (ld(x, i * n + j) - mean[i]) * rstd[i];
            sb += g;
        }
        if (dw) st(dw, j, sw);
        if (db) st(db, j, sb);
    }
}

extern "C" {

__global__ void bn_stats_f32(float* mean, float* rstd, float* rm, float* rv, const float* x, int64_t n, int64_t c,
                             int64_t hw, int training, float momentum, float eps) {
    bn_stats(mean, rstd, rm, rv, x, n, c, hw, training, momentum, eps);
}
__global__ void bn_stats_bf16(float* mean, float* rstd, float* rm, float* rv, const __nv_bfloat16* x, int64_t n,
                              int64_t c, int64_t hw, int training, float momentum, float eps) {
    bn_stats(mean, rstd, rm, rv, x, n, c, hw, training, momentum, eps);
}
__global__ void bn_apply_f32(float* y, const float* x, const float* mean, const float* rstd, const float* w,
                             const float* b, int64_t c, int64_t hw, int64_t n) {
    bn_apply(y, x, mean, rstd, w, b, c, hw, n);
}
__global__ void bn_apply_bf16(__nv_bfloat16* y, const __nv_bfloat16* x, const float* mean, const float* rstd,
                              const __nv_bfloat16* w, const __nv_bfloat16* b, int64_t c, int64_t hw, int64_t n) {
    bn_apply(y, x, mean, rstd, w, b, c, hw, n);
}
__global__ void bn_bwd_sums_f32(float* sums, float* dw, float* db, const float* dy, const float* x, const float* mean,
                                const float* rstd, int64_t n, int64_t c, int64_t hw) {
    bn_bwd_sums(sums, dw, db, dy, x, mean, rstd, n, c, hw);
}
__global__ void bn_bwd_sums_bf16(float* sums, __nv_bfloat16* dw, __nv_bfloat16* db, const __nv_bfloat16* dy,
                                 const __nv_bfloat16* x, const float* mean, const float* rstd, int64_t n, int64_t c,
                                 int64_t hw) {
    bn_bwd_sums(sums, dw, db, dy, x, mean, rstd, n, c, hw);
}
__global__ void bn_bwd_dx_f32(float* dx, const float* dy, const float* x, const float* mean, const float* rstd,
                              const float* w, const float* sums, int training, int64_t c, int64_t hw, int64_t cnt,
                              int64_t n) {
    bn_bwd_dx(dx, dy, x, mean, rstd, w, sums, training, c, hw, cnt, n);
}
__global__ void bn_bwd_dx_bf16(__nv_bfloat16* dx, const __nv_bfloat16* dy, const __nv_bfloat16* x, const float* mean,
                               const float* rstd, const __nv_bfloat16* w, const float* sums, int training, int64_t c,
                               int64_t hw, int64_t cnt, int64_t n) {
    bn_bwd_dx(dx, dy, x, mean, rstd, w, sums, training, c, hw, cnt, n);
}

__global__ void gn_fwd_f32(float* y, float* mean, float* rstd, const float* x, const float* w, const float* b,
                           int64_t groups, int64_t cg, int64_t hw, float eps) {
    gn_fwd(y, mean, rstd, x, w, b, groups, cg, hw, eps);
}
__global__ void gn_fwd_bf16(__nv_bfloat16* y, float* mean, float* rstd, const __nv_bfloat16* x,
                            const __nv_bfloat16* w, const __nv_bfloat16* b, int64_t groups, int64_t cg, int64_t hw,
                            float eps) {
    gn_fwd(y, mean, rstd, x, w, b, groups, cg, hw, eps);
}
__global__ void gn_bwd_f32(float* dx, float* part, const float* dy, const float* x, const float* mean,
                           const float* rstd, const float* w, int64_t nsamples, int64_t c, int64_t groups, int64_t cg,
                           int64_t hw) {
    gn_bwd(dx, part, dy, x, mean, rstd, w, nsamples, c, groups, cg, hw);
}
__global__ void gn_bwd_bf16(__nv_bfloat16* dx, float* part, const __nv_bfloat16* dy, const __nv_bfloat16* x,
                            const float* mean, const float* rstd, const __nv_bfloat16* w, int64_t nsamples, int64_t c,
                            int64_t groups, int64_t cg, int64_t hw) {
    gn_bwd(dx, part, dy, x, mean, rstd, w, nsamples, c, groups, cg, hw);
}
__global__ void gn_bwd_dwdb_f32(float* dw, float* db, const float* part, int64_t nsamples, int64_t c) {
    gn_bwd_dwdb(dw, db, part, nsamples, c);
}
__global__ void gn_bwd_dwdb_bf16(__nv_bfloat16* dw, __nv_bfloat16* db, const float* part, int64_t nsamples,
                                 int64_t c) {
    gn_bwd_dwdb(dw, db, part, nsamples, c);
}


__global__ void layernorm_fwd_f32(float* y, float* mean, float* rstd, const float* x, const float* w, const float* b,
                                  int64_t n, float eps) {
    layernorm_fwd(y, mean, rstd, x, w, b, n, eps);
}
__global__ void layernorm_fwd_bf16(__nv_bfloat16* y, float* mean, float* rstd, const __nv_bfloat16* x,
                                   const __nv_bfloat16* w, const __nv_bfloat16* b, int64_t n, float eps) {
    layernorm_fwd(y, mean, rstd, x, w, b, n, eps);
}
__global__ void layernorm_bwd_dx_f32(float* dx, const float* dy, const float* x, const float* mean, const float* rstd,
                                     const float* w, int64_t n) {
    layernorm_bwd_dx(dx, dy, x, mean, rstd, w, n);
}
__global__ void layernorm_bwd_dx_bf16(__nv_bfloat16* dx, const __nv_bfloat16* dy, const __nv_bfloat16* x,
                                      const float* mean, const float* rstd, const __nv_bfloat16* w, int64_t n) {
    layernorm_bwd_dx(dx, dy, x, mean, rstd, w, n);
}
__global__ void layernorm_bwd_dwdb_f32(float* dw, float* db, const float* dy, const float* x, const float* mean,
                                       const float* rstd, int64_t rows, int64_t n) {
    layernorm_bwd_dwdb(dw, db, dy, x, mean, rstd, rows, n);
}
__global__ void layernorm_bwd_dwdb_bf16(__nv_bfloat16* dw, __nv_bfloat16* db, const __nv_bfloat16* dy,
                                        const __nv_bfloat16* x, const float* mean, const float* rstd, int64_t rows,
                                        int64_t n) {
    layernorm_bwd_dwdb(dw, db, dy, x, mean, rstd, rows, n);
}

}  // extern "C"
