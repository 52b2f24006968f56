// Softmax kernels of the Esper CUDA backend: softmax and log-softmax
// with their backward passes and the fused softmax cross-entropy, with x
// viewed as [rows, n] and one block of ROW_THREADS threads per row
// (gridDim.x = rows), reducing in registers, then across warps through
// shared memory; and softmax and log-softmax along a middle axis of x
// viewed as [outer, n, inner], one thread per line. Arithmetic is fp32
// (bf16 and fp16 inputs widened on load).
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <stdint.h>
#include <math.h>
#include "common.cuh"

#define ROW_THREADS 256

// block_sum and block_max (common.cuh) reduce v over the block and return
// the result to every thread.

template <typename T>
__device__ void softmax_rows(int log, T* y, const T* x, int64_t n) {
    const T* r = x + (int64_t)blockIdx.x * n;
    T* out = y + (int64_t)blockIdx.x * n;
    float m = -INFINITY;
    for (int64_t j = threadIdx.x; j < n; j += blockDim.x) m = fmaxf(m, ld(r, j));
    m = block_max(m);
    float s = 0.f;
    for (int64_t j = threadIdx.x; j < n; j += blockDim.x) s += expf(ld(r, j) - m);
    s = block_sum(s);
    float ls = logf(s), inv = 1.f / s;
    for (int64_t j = threadIdx.x; j < n; j += blockDim.x) {
        float v = ld(r, j) - m;
        st(out, j, log ? v - ls : expf(v) * inv);
    }
}

// softmax_bwd_rows: dx = y·(dy − Σ y·dy) (softmax) or dx = dy − e^y·Σdy
// (log-softmax, y its output).
template <typename T>
__device__ void softmax_bwd_rows(int log, T* dx, const T* y, const T* dy, int64_t n) {
    int64_t base = (int64_t)blockIdx.x * n;
    float s = 0.f;
    for (int64_t j = threadIdx.x; j < n; j += blockDim.x) s += log ? ld(dy, base + j) : ld(y, base + j) * ld(dy, base + j);
    s = block_sum(s);
    for (int64_t j = threadIdx.x; j < n; j += blockDim.x) {
        float yv = ld(y, base + j), g = ld(dy, base + j);
        st(dx, base + j, log ? g - expf(yv) * s : yv * (g - s));
    }
}

// ce_target reads target i (int64 when t64, else int32).
__device__ __forceinline__ int64_t ce_target(const void* t, int t64, int64_t i) {
    return t64 ? ((const int64_t*)t)[i] : (int64_t)((const int32_t*)t)[i];
}

// ce_loss is row r's loss from its maximum m, Σ exp(x − m) s and Σ x sx:
// (1−ε)(lse − x_t) + ε(lse − mean x), 0 for an ignored row, NaN for a
// target outside [0, c). Without smoothing (ε = 0) the mean's term is
// left out, as the CPU leaves it out: 0·(lse − mean x) would be NaN for
// a row holding −inf off the target, or whose Σ x overflows, where the
// loss itself is finite.
template <typename T>
__device__ __forceinline__ float ce_loss(const T* r, int64_t tg, int64_t c, bool ignored, float m, float s, float sx,
                                         float eps) {
    if (ignored) return 0.f;
    if (tg < 0 || tg >= c) return NAN;
    // Rounded step by step (_rn: never contracted to an fma), so that
    // every kernel inlining it gives the same bits (linear_ce_sgd_f32 and
    // linear_ce_small_f32 among them: nvcc contracts by context).
    float lse = __fadd_rn(m, logf(s));
    float l = __fmul_rn(1.f - eps, __fsub_rn(lse, ld(r, tg)));
    if (eps != 0.f) l = __fadd_rn(l, __fmul_rn(eps, __fsub_rn(lse, __fdiv_rn(sx, (float)c))));
    return l;
}

// ce_rows writes per-row losses (ce_loss) and kept flags.
template <typename T>
__device__ void ce_rows(float* per, float* kept, const T* x, const void* t, int t64, int64_t c, float eps,
                        int has_ignore, int64_t ignore) {
    int64_t i = blockIdx.x;
    const T* r = x + i * c;
    int64_t tg = ce_target(t, t64, i);
    bool ignored = has_ignore && tg == ignore;
    float m = -INFINITY, sx = 0.f;
    for (int64_t j = threadIdx.x; j < c; j += blockDim.x) {
        float v = ld(r, j);
        m = fmaxf(m, v);
        sx += v;
    }
    m = block_max(m);
    sx = block_sum(sx);
    float s = 0.f;
    for (int64_t j = threadIdx.x; j < c; j += blockDim.x) s += expf(ld(r, j) - m);
    s = block_sum(s);
    if (threadIdx.x == 0) {
        per[i] = ce_loss(r, tg, c, ignored, m, s, sx, eps);
        kept[i] = ignored ? 0.f : 1.f;
    }
}

// ce_bwd_rows: dlogits[i, j] = g_i · (softmax_ij − (1−ε)[j = t_i] − ε/c),
// g_i = dloss[i] (reduction none), dloss (sum) or dloss/count (mean);
// zero for an ignored row. count is Σ kept (ce_count_kept), or null when
// no target can be ignored: then every row counts and the divisor is
// rows.
template <typename T>
__device__ void ce_bwd_rows(T* dx, const T* x, const void* t, int t64, const float* dloss, int per_row,
                            const float* count, float rows, int mean, int64_t c, float eps, int has_ignore,
                            int64_t ignore) {
    int64_t i = blockIdx.x;
    const T* r = x + i * c;
    T* d = dx + i * c;
    int64_t tg = ce_target(t, t64, i);
    bool ignored = has_ignore && tg == ignore;
    float g = per_row ? dloss[i] : dloss[0];
    if (mean) g /= count ? *count : rows;
    float m = -INFINITY;
    for (int64_t j = threadIdx.x; j < c; j += blockDim.x) m = fmaxf(m, ld(r, j));
    m = block_max(m);
    float s = 0.f;
    for (int64_t j = threadIdx.x; j < c; j += blockDim.x) s += expf(ld(r, j) - m);
    s = block_sum(s);
    float inv = 1.f / s;
    for (int64_t j = threadIdx.x; j < c; j += blockDim.x) {
        float v = ignored ? 0.f : g * (expf(ld(r, j) - m) * inv - (j == tg ? 1.f - eps : 0.f) - eps / (float)c);
        st(d, j, v);
    }
}

// ce_warp_sum and ce_warp_max reduce v over a warp (every lane gets the
// result).
__device__ __forceinline__ float ce_warp_sum(float v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffff, v, o);
    return v;
}
__device__ __forceinline__ float ce_warp_max(float v) {
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffff, v, o));
    return v;
}

// ce_small is the whole forward of a cross-entropy over a few rows in one
// launch (a trainer's small batches): one block, warp w taking rows w,
// w + warps, …, each row's loss as ce_rows computes it (ce_loss);
// loss[0] = Σ of the losses, or their mean over the kept rows. With
// lsum and acc (ce_small_count, kernels.CrossEntropyCounter) it also
// keeps a trainer's running metrics: lsum[0] += loss[0], and acc[i] += 1
// for each row whose first maximum (NaN counting as the maximum, as
// count_correct_rows finds it) is its target. With dx (ce_small_count_grad,
// kernels.CrossEntropyGradCounter) it then writes the gradient for a
// dloss of one, as ce_bwd_rows would: dx[i, j] = g·(softmax_ij −
// (1−ε)[j = t_i] − ε/c), g = 1, or 1/kept for the mean; 0 on an ignored
// row.
template <typename T>
__device__ void ce_small(float* loss, const T* x, const void* t, int t64, int64_t n, int64_t c, float eps,
                         int has_ignore, int64_t ignore, int mean, float* lsum = nullptr, float* acc = nullptr,
                         T* dx = nullptr) {
    __shared__ float wsum[32], wkept[32], gsh;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
    float tot = 0.f, kept = 0.f;
    for (int64_t i = warp; i < n; i += warps) {
        const T* r = x + i * c;
        int64_t tg = ce_target(t, t64, i);
        bool ignored = has_ignore && tg == ignore;
        float m = -INFINITY, sx = 0.f, bv = -INFINITY;
        int64_t bi = INT64_MAX;
        for (int64_t j = lane; j < c; j += 32) {
            float v = ld(r, j);
            m = fmaxf(m, v);
            sx += v;
            if (acc && better(v, j, bv, bi)) bv = v, bi = j;
        }
        m = ce_warp_max(m);
        sx = ce_warp_sum(sx);
        float s = 0.f;
        for (int64_t j = lane; j < c; j += 32) s += expf(ld(r, j) - m);
        s = ce_warp_sum(s);
        tot += ce_loss(r, tg, c, ignored, m, s, sx, eps);  // the same in every lane of the warp
        kept += ignored ? 0.f : 1.f;
        if (acc) {
            for (int o = 16; o > 0; o >>= 1) {
                float ov = __shfl_xor_sync(0xffffffff, bv, o);
                int64_t oi = __shfl_xor_sync(0xffffffff, bi, o);
                if (better(ov, oi, bv, bi)) bv = ov, bi = oi;
            }
            if (lane == 0 && bi == tg) acc[i] += 1.f;
        }
    }
    if (lane == 0) {
        wsum[warp] = tot;
        wkept[warp] = kept;
    }
    __syncthreads();
    if (threadIdx.x == 0) {
        float a = 0.f, k = 0.f;
        for (int w = 0; w < warps; w++) {
            a += wsum[w];
            k += wkept[w];
        }
        const float l = mean ? a / k : a;
        loss[0] = l;
        if (lsum) lsum[0] = lsum[0] + l;
        float g = 1.f;
        if (mean) g /= k;
        gsh = g;
    }
    if (!dx) return;
    __syncthreads();
    const float g = gsh;
    for (int64_t i = warp; i < n; i += warps) {
        const T* r = x + i * c;
        T* d = dx + i * c;
        int64_t tg = ce_target(t, t64, i);
        bool ignored = has_ignore && tg == ignore;
        float m = -INFINITY;
        for (int64_t j = lane; j < c; j += 32) m = fmaxf(m, ld(r, j));
        m = ce_warp_max(m);
        float s = 0.f;
        for (int64_t j = lane; j < c; j += 32) s += expf(ld(r, j) - m);
        s = ce_warp_sum(s);
        float inv = 1.f / s;
        for (int64_t j = lane; j < c; j += 32) {
            // Rounded step by step, as ce_loss (the same bits in every
            // kernel that inlines it).
            float p = __fsub_rn(__fmul_rn(expf(ld(r, j) - m), inv), j == tg ? 1.f - eps : 0.f);
            float v = ignored ? 0.f : __fmul_rn(g, __fsub_rn(p, __fdiv_rn(eps, (float)c)));
            st(d, j, v);
        }
    }
}

// --- along any axis: x viewed as [outer, n, inner] ----------------------

// softmax_axis: softmax (or log-softmax) of each line (o, :, i), one
// thread per line; the CPU's convention for an all −inf line (NaN).
template <typename T>
__device__ void softmax_axis(int log, T* y, const T* x, int64_t outer, int64_t n, int64_t inner) {
    for (int64_t r = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; r < outer * inner;
         r += (int64_t)blockDim.x * gridDim.x) {
        int64_t b = (r / inner) * n * inner + r % inner;
        float m = -INFINITY;
        for (int64_t k = 0; k < n; k++) {
            float v = ld(x, b + k * inner);
            if (v > m || v != v) m = v;
        }
        if (m == -INFINITY) m = 0.f;
        float s = 0.f;
        for (int64_t k = 0; k < n; k++) s += expf(ld(x, b + k * inner) - m);
        float ls = m + logf(s), inv = 1.f / s;
        for (int64_t k = 0; k < n; k++) {
            float v = ld(x, b + k * inner);
            st(y, b + k * inner, log ? v - ls : expf(v - m) * inv);
        }
    }
}

// softmax_bwd_axis is softmax_bwd_rows along a middle axis.
template <typename T>
__device__ void softmax_bwd_axis(int log, T* dx, const T* y, const T* dy, int64_t outer, int64_t n, int64_t inner) {
    for (int64_t r = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; r < outer * inner;
         r += (int64_t)blockDim.x * gridDim.x) {
        int64_t b = (r / inner) * n * inner + r % inner;
        float s = 0.f;
        for (int64_t k = 0; k < n; k++) {
            int64_t j = b + k * inner;
            s += log ? ld(dy, j) : ld(y, j) * ld(dy, j);
        }
        for (int64_t k = 0; k < n; k++) {
            int64_t j = b + k * inner;
            float yv = ld(y, j), g = ld(dy, j);
            st(dx, j, log ? g - expf(yv) * s : yv * (g - s));
        }
    }
}

extern "C" {

__global__ void softmax_rows_f32(int log, float* y, const float* x, int64_t n) { softmax_rows(log, y, x, n); }
__global__ void softmax_rows_bf16(int log, __nv_bfloat16* y, const __nv_bfloat16* x, int64_t n) { softmax_rows(log, y, x, n); }

__global__ void softmax_bwd_rows_f32(int log, float* dx, const float* y, const float* dy, int64_t n) {
    softmax_bwd_rows(log, dx, y, dy, n);
}
__global__ void softmax_bwd_rows_bf16(int log, __nv_bfloat16* dx, const __nv_bfloat16* y, const __nv_bfloat16* dy,
                                      int64_t n) {
    softmax_bwd_rows(log, dx, y, dy, n);
}

__global__ void ce_rows_f32(float* per, float* kept, const float* x, const void* t, int t64, int64_t c, float eps,
                            int has_ignore, int64_t ignore) {
    ce_rows(per, kept, x, t, t64, c, eps, has_ignore, ignore);
}
__global__ void ce_rows_bf16(float* per, float* kept, const __nv_bfloat16* x, const void* t, int t64, int64_t c,
                             float eps, int has_ignore, int64_t ignore) {
    ce_rows(per, kept, x, t, t64, c, eps, has_ignore, ignore);
}

// ce_finish reduces the per-row losses into the loss itself: loss[0] =
// Σ per (or its mean over the kept rows; one block of ROW_THREADS
// threads).
__global__ void ce_finish(float* loss, const float* per, const float* kept, int64_t n, int mean) {
    float s = 0.f, k = 0.f;
    for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
        s += per[i];
        k += kept[i];
    }
    s = block_sum(s);
    k = block_sum(k);
    if (threadIdx.x == 0) loss[0] = mean ? s / k : s;
}

// ce_count_kept writes the number of targets that are not ignored to
// out[0] (one block of ROW_THREADS threads): the divisor of the mean
// reduction, which the backward pass needs without the forward's losses.
__global__ void ce_count_kept(float* out, const void* t, int t64, int64_t n, int has_ignore, int64_t ignore) {
    float k = 0.f;
    for (int64_t i = threadIdx.x; i < n; i += blockDim.x) k += (has_ignore && ce_target(t, t64, i) == ignore) ? 0.f : 1.f;
    k = block_sum(k);
    if (threadIdx.x == 0) out[0] = k;
}

__global__ void ce_bwd_rows_f32(float* dx, const float* x, const void* t, int t64, const float* dloss, int per_row,
                                const float* count, float rows, int mean, int64_t c, float eps, int has_ignore,
                                int64_t ignore) {
    ce_bwd_rows(dx, x, t, t64, dloss, per_row, count, rows, mean, c, eps, has_ignore, ignore);
}
__global__ void ce_bwd_rows_bf16(__nv_bfloat16* dx, const __nv_bfloat16* x, const void* t, int t64,
                                 const float* dloss, int per_row, const float* count, float rows, int mean,
                                 int64_t c, float eps, int has_ignore, int64_t ignore) {
    ce_bwd_rows(dx, x, t, t64, dloss, per_row, count, rows, mean, c, eps, has_ignore, ignore);
}

#define SOFTMAX_AXIS_KERNELS(SUF, T)                                                                           \
    __global__ void softmax_axis_##SUF(int log, T* y, const T* x, int64_t outer, int64_t n, int64_t inner) {   \
        softmax_axis(log, y, x, outer, n, inner);                                                              \
    }                                                                                                          \
    __global__ void softmax_bwd_axis_##SUF(int log, T* dx, const T* y, const T* dy, int64_t outer, int64_t n,  \
                                           int64_t inner) {                                                    \
        softmax_bwd_axis(log, dx, y, dy, outer, n, inner);                                                     \
    }
SOFTMAX_AXIS_KERNELS(f32, float)
SOFTMAX_AXIS_KERNELS(bf16, __nv_bfloat16)

// fp16 (appended so that the entry points above keep their code and labels).
__global__ void softmax_rows_f16(int log, __half* y, const __half* x, int64_t n) { softmax_rows(log, y, x, n); }
__global__ void softmax_bwd_rows_f16(int log, __half* dx, const __half* y, const __half* dy, int64_t n) {
    softmax_bwd_rows(log, dx, y, dy, n);
}
__global__ void ce_rows_f16(float* per, float* kept, const __half* x, const void* t, int t64, int64_t c, float eps,
                            int has_ignore, int64_t ignore) {
    ce_rows(per, kept, x, t, t64, c, eps, has_ignore, ignore);
}
__global__ void ce_bwd_rows_f16(__half* dx, const __half* x, const void* t, int t64, const float* dloss, int per_row,
                                const float* count, float rows, int mean, int64_t c, float eps, int has_ignore,
                                int64_t ignore) {
    ce_bwd_rows(dx, x, t, t64, dloss, per_row, count, rows, mean, c, eps, has_ignore, ignore);
}
SOFTMAX_AXIS_KERNELS(f16, __half)


// The one-launch forward of a cross-entropy over a few rows (ce_small).
// These run up to 1024 threads a block (ceSmallThreads): the launch
// bounds hold ptxas to the 64 registers a thread that allows.
__global__ void __launch_bounds__(1024, 1) ce_small_f32(float* loss, const float* x, const void* t, int t64, int64_t n, int64_t c, float eps,
                             int has_ignore, int64_t ignore, int mean) {
    ce_small(loss, x, t, t64, n, c, eps, has_ignore, ignore, mean);
}
__global__ void __launch_bounds__(1024, 1) ce_small_bf16(float* loss, const __nv_bfloat16* x, const void* t, int t64, int64_t n, int64_t c,
                              float eps, int has_ignore, int64_t ignore, int mean) {
    ce_small(loss, x, t, t64, n, c, eps, has_ignore, ignore, mean);
}
__global__ void __launch_bounds__(1024, 1) ce_small_f16(float* loss, const __half* x, const void* t, int t64, int64_t n, int64_t c, float eps,
                             int has_ignore, int64_t ignore, int mean) {
    ce_small(loss, x, t, t64, n, c, eps, has_ignore, ignore, mean);
}

// ce_small with a trainer's running metrics (kernels.CrossEntropyCounter).
__global__ void __launch_bounds__(1024, 1) ce_small_count_f32(float* loss, const float* x, const void* t, int t64, int64_t n, int64_t c,
                                   float eps, int has_ignore, int64_t ignore, int mean, float* lsum, float* acc) {
    ce_small(loss, x, t, t64, n, c, eps, has_ignore, ignore, mean, lsum, acc);
}
__global__ void __launch_bounds__(1024, 1) ce_small_count_bf16(float* loss, const __nv_bfloat16* x, const void* t, int t64, int64_t n, int64_t c,
                                    float eps, int has_ignore, int64_t ignore, int mean, float* lsum, float* acc) {
    ce_small(loss, x, t, t64, n, c, eps, has_ignore, ignore, mean, lsum, acc);
}
__global__ void __launch_bounds__(1024, 1) ce_small_count_f16(float* loss, const __half* x, const void* t, int t64, int64_t n, int64_t c,
                                   float eps, int has_ignore, int64_t ignore, int mean, float* lsum, float* acc) {
    ce_small(loss, x, t, t64, n, c, eps, has_ignore, ignore, mean, lsum, acc);
}

// ce_small_count with the logits' gradient for a dloss of one
// (kernels.CrossEntropyGradCounter).
__global__ void __launch_bounds__(1024, 1) ce_small_count_grad_f32(float* loss, const float* x, const void* t, int t64, int64_t n, int64_t c,
                                        float eps, int has_ignore, int64_t ignore, int mean, float* lsum, float* acc,
                                        float* dx) {
    ce_small(loss, x, t, t64, n, c, eps, has_ignore, ignore, mean, lsum, acc, dx);
}
__global__ void __launch_bounds__(1024, 1) ce_small_count_grad_bf16(float* loss, const __nv_bfloat16* x, const void* t, int t64, int64_t n,
                                         int64_t c, float eps, int has_ignore, int64_t ignore, int mean, float* lsum,
                                         float* acc, __nv_bfloat16* dx) {
    ce_small(loss, x, t, t64, n, c, eps, has_ignore, ignore, mean, lsum, acc, dx);
}
__global__ void __launch_bounds__(1024, 1) ce_small_count_grad_f16(float* loss, const __half* x, const void* t, int t64, int64_t n, int64_t c,
                                        float eps, int has_ignore, int64_t ignore, int mean, float* lsum, float* acc,
                                        __half* dx) {
    ce_small(loss, x, t, t64, n, c, eps, has_ignore, ignore, mean, lsum, acc, dx);
}

// linear_ce_small_block is a linear classifier head and its counted
// cross-entropy in one block: logits[i, j] = Σ_q x[i, q]·w[j, q] (q in
// order, fma in fp32, as gemm_small_f32 sums for K ≤ 32) + b[j] (b
// optional), written by the block over x [m, k] and w [n, k]; then, once
// every logit is written, ce_small_count(_grad) over them (dx optional).
// flags packs ce_small's t64 (bit 0), has_ignore (bit 1) and mean (bit 2).
__device__ __forceinline__ void linear_ce_small_block(float* logits, float* loss, const float* x, const float* w,
                                                      const float* b, const void* t, int64_t m, int64_t n, int64_t k,
                                                      float eps, int64_t ignore, int flags, float* lsum, float* acc,
                                                      float* dx) {
    const int t64 = flags & 1, has_ignore = (flags >> 1) & 1, mean = (flags >> 2) & 1;
    for (int64_t e = threadIdx.x; e < m * n; e += blockDim.x) {
        int64_t i = e / n, j = e % n;
        float v = 0.f;
        for (int64_t q = 0; q < k; q++) v = fmaf(x[i * k + q], w[j * k + q], v);
        if (b) v += b[j];
        logits[e] = v;
    }
    __syncthreads();  // the block's writes of logits are visible to it
    ce_small(loss, (const float*)logits, t, t64, m, n, eps, has_ignore, ignore, mean, lsum, acc, dx);
}

// linear_ce_small_f32 is linear_ce_small_block in one launch of one
// block (kernels.LinearCrossEntropyCounter). A launch takes at most 16
// arguments, hence the packed flags.
__global__ void __launch_bounds__(1024, 1) linear_ce_small_f32(float* logits, float* loss, const float* x,
                                                               const float* w, const float* b, const void* t,
                                                               int64_t m, int64_t n, int64_t k, float eps,
                                                               int64_t ignore, int flags, float* lsum, float* acc,
                                                               float* dx) {
    linear_ce_small_block(logits, loss, x, w, b, t, m, n, k, eps, ignore, flags, lsum, acc, dx);
}

// LinearCESmall is linear_ce_small_f32's arguments as one struct (Go's
// linearCESmallArgs, word for word): a block_seq_f32 step, and the head
// of LinearCESGD.
struct LinearCESmall {
    float *logits, *loss;
    const float *x, *w, *b;
    const void* t;
    int64_t m, n, k;
    float eps;
    int flags;
    int64_t ignore;
    float *lsum, *acc, *dx;
};

// linear_ce_small_step is linear_ce_small_block over a LinearCESmall.
__device__ __forceinline__ void linear_ce_small_step(const LinearCESmall& l) {
    linear_ce_small_block(l.logits, l.loss, l.x, l.w, l.b, l.t, l.m, l.n, l.k, l.eps, l.ignore, l.flags, l.lsum, l.acc,
                          l.dx);
}

// LinearCESGD is linear_ce_sgd_f32's argument block (Go's
// linearCESGDArgs, word for word): linear_ce_small_f32's arguments (dx
// required), the gradients gw and gb (gb null without a bias), and
// sgd_inc_f32's over the arena p, g, mom (null without momentum) of np
// elements, which holds w and b.
struct LinearCESGD {
    LinearCESmall l;
    float *gw, *gb;
    float *p, *g, *mom;
    double* hyper;
    float mu, damp, wd;
    int nesterov, maximize, zero;
    int64_t np;
};

// linear_ce_sgd_block is linear_ce_sgd_f32's body (below).
__device__ __forceinline__ void linear_ce_sgd_block(const LinearCESGD& a) {
    const LinearCESmall& l = a.l;
    linear_ce_small_step(l);
    __syncthreads();  // every dlogit written
    const int64_t grads = l.n * l.k + (a.gb ? l.n : 0);
    for (int64_t e = threadIdx.x; e < grads; e += blockDim.x) linear_grad_at(a.gw, a.gb, l.dx, l.x, l.m, l.n, l.k, e);
    __syncthreads();  // every gradient added
    sgd_inc_block(a.p, a.g, a.mom, a.hyper, nullptr, a.mu, a.damp, a.wd, a.nesterov, a.maximize, a.zero, a.np);
}

// linear_ce_sgd_f32 is a small linear classifier's whole SGD training
// step in one launch of one block (kernels.LinearCESGDStepper):
// linear_ce_small_f32, linear_grad_add_f32 and sgd_inc_f32 in turn, each
// the same code as its own launch (so the same bits), with a barrier
// between them: the gradients read every dlogit, the step every gradient.
__global__ void __launch_bounds__(1024, 1) linear_ce_sgd_f32(LinearCESGD a) { linear_ce_sgd_block(a); }

// BLOCK_SEQ_WORDS is the size of BlockSeq's step list in 8-byte words
// (Go's blockSeqWords): with its count, 4 KiB, the most parameter space
// a launch takes.
#define BLOCK_SEQ_WORDS 511

// BlockSeq is block_seq_f32's argument (Go's blockSeq.words): n steps,
// each a header word (its kind in the low half, its argument words in
// the high half) and then its arguments.
struct BlockSeq {
    int64_t n;
    uint64_t w[BLOCK_SEQ_WORDS];
};

// Step kinds of a BlockSeq (Go's seqLinearCESGD, seqLinearCESmall,
// seqZero).
#define SEQ_LINEAR_CE_SGD 1
#define SEQ_LINEAR_CE_SMALL 2
#define SEQ_ZERO 3

// block_seq_f32 runs a sequence of one-block launches in one block, in
// order, with a barrier after each (kernels.BlockSequencer): each step
// is the code of its own launch — linear_ce_sgd_f32, linear_ce_small_f32,
// or a zeroing of 4-byte words (its arguments: the range count, then
// each range's address and word count) — launched with the block size
// that launch takes, so it writes the same bits, and the barrier makes
// its writes visible to the next step as the end of a launch would. The
// argument stays in parameter space (__grid_constant__): the steps are
// read where they are, not copied per thread.
__global__ void __launch_bounds__(1024, 1) block_seq_f32(const __grid_constant__ BlockSeq s) {
    int64_t at = 0;
    for (int64_t i = 0; i < s.n; i++) {
        const uint64_t head = s.w[at];
        const int kind = (int)(head & 0xffffffffu);
        const int64_t words = (int64_t)(head >> 32);
        const uint64_t* a = &s.w[at + 1];
        switch (kind) {
            case SEQ_LINEAR_CE_SGD:
                linear_ce_sgd_block(*(const LinearCESGD*)a);
                break;
            case SEQ_LINEAR_CE_SMALL:
                linear_ce_small_step(*(const LinearCESmall*)a);
                break;
            case SEQ_ZERO:
                for (uint64_t r = 0; r < a[0]; r++) {
                    uint32_t* p = (uint32_t*)a[1 + 2 * r];
                    const int64_t nw = (int64_t)a[2 + 2 * r];
                    for (int64_t e = threadIdx.x; e < nw; e += blockDim.x) p[e] = 0u;
                }
                break;
        }
        __syncthreads();  // the step's writes visible to the next, as at a launch's end
        at += 1 + words;
    }
}

}  // extern "C"
