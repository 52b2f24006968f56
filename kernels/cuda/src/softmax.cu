// Row kernels of the Esper CUDA backend: softmax and log-softmax with
// their backward passes, the fused softmax cross-entropy, arg-max and the
// accuracy counter, with x viewed as [rows, n] and one block of
// ROW_THREADS threads per row (gridDim.x = rows), reducing in registers,
// then across warps through shared memory; and the forms along any axis
// of x viewed as [outer, n, inner] (the reduction over any axes, softmax
// and log-softmax along a middle axis). Arithmetic is fp32 (bf16 inputs
// widened on load) except where a kernel says it accumulates in fp64.
#include <cuda_bf16.h>
#include <stdint.h>
#include <math.h>
#include "common.cuh"

#define ROW_THREADS 256

// block_sum and block_max reduce v over the block and return the result
// to every thread.

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

// ce_rows writes per-row losses (0 for an ignored row, NaN for a target
// outside [0, c)) and kept flags: loss = (1−ε)(lse − x_t) + ε(lse − mean x).
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
        float loss;
        if (ignored) {
            loss = 0.f;
        } else if (tg < 0 || tg >= c) {
            loss = NAN;
        } else {
            float lse = m + logf(s);
            loss = (1.f - eps) * (lse - ld(r, tg)) + eps * (lse - sx / (float)c);
        }
        per[i] = loss;
        kept[i] = ignored ? 0.f : 1.f;
    }
}

// ce_bwd_rows: dlogits[i, j] = g_i · (softmax_ij − (1−ε)[j = t_i] − ε/c),
// g_i = dloss[i] (reduction none), dloss (sum) or dloss/count (mean);
// zero for an ignored row. count is Σ kept, from the forward pass.
template <typename T>
__device__ void ce_bwd_rows(T* dx, const T* x, const void* t, int t64, const float* dloss, int per_row,
                            const float* count, int mean, int64_t c, float eps, int has_ignore, int64_t ignore) {
    int64_t i = blockIdx.x;
    const T* r = x + i * c;
    T* d = dx + i * c;
    int64_t tg = ce_target(t, t64, i);
    bool ignored = has_ignore && tg == ignore;
    float g = per_row ? dloss[i] : dloss[0];
    if (mean) g /= *count;
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

// better reports whether candidate (v, i) beats (bv, bi) for the first
// maximum with NaN counting as the maximum (the CPU's argMaxLine): the
// first NaN wins, else the larger value, ties to the smaller index.
__device__ __forceinline__ bool better(float v, int64_t i, float bv, int64_t bi) {
    bool vn = v != v, bn = bv != bv;
    if (vn != bn) return vn;
    if (vn || v == bv) return i < bi;
    return v > bv;
}

// block_argmax reduces (v, i) over the block; every thread gets the result.
__device__ void block_argmax(float& v, int64_t& i) {
    __shared__ float pv[32];
    __shared__ int64_t pi[32];
    for (int o = 16; o > 0; o >>= 1) {
        float ov = __shfl_xor_sync(0xffffffff, v, o);
        int64_t oi = __shfl_xor_sync(0xffffffff, i, o);
        if (better(ov, oi, v, i)) v = ov, i = oi;
    }
    int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
    __syncthreads();
    if (lane == 0) pv[w] = v, pi[w] = i;
    __syncthreads();
    bool have = lane < (int)(blockDim.x >> 5);
    v = have ? pv[lane] : -INFINITY;
    i = have ? pi[lane] : INT64_MAX;
    for (int o = 16; o > 0; o >>= 1) {
        float ov = __shfl_xor_sync(0xffffffff, v, o);
        int64_t oi = __shfl_xor_sync(0xffffffff, i, o);
        if (better(ov, oi, v, i)) v = ov, i = oi;
    }
}

// line_argmax is the index of the first maximum of the n values at
// x[base + k·stride] (one block).
template <typename T>
__device__ int64_t line_argmax(const T* x, int64_t base, int64_t n, int64_t stride) {
    float bv = -INFINITY;
    int64_t bi = INT64_MAX;
    for (int64_t k = threadIdx.x; k < n; k += blockDim.x) {
        float v = ld(x, base + k * stride);
        if (better(v, k, bv, bi)) bv = v, bi = k;
    }
    block_argmax(bv, bi);
    return bi;
}

// argmax_rows: x viewed as [outer, n, inner]; block r handles the line
// (r / inner, :, r % inner) and writes its arg-max to dst[r].
template <typename T>
__device__ void argmax_rows(int64_t* dst, const T* x, int64_t n, int64_t inner) {
    int64_t r = blockIdx.x, o = r / inner, i = r % inner;
    int64_t k = line_argmax(x, o * n * inner + i, n, inner);
    if (threadIdx.x == 0) dst[r] = k;
}

// count_correct_rows: acc[r] += 1 when row r of x [rows, c] has its
// first maximum at target[r].
template <typename T>
__device__ void count_correct_rows(float* acc, const T* x, const void* t, int t64, int64_t c) {
    int64_t r = blockIdx.x;
    int64_t k = line_argmax(x, r * c, c, 1);
    if (threadIdx.x == 0 && k == ce_target(t, t64, r)) acc[r] += 1.f;
}

// --- along any axis: x viewed as [outer, n, inner] ----------------------

// Reduction op codes of reduce_axis: kernels.ReduceOp's values.
enum { RA_SUM = 0, RA_MEAN, RA_MAX, RA_MIN, RA_LSE };

// Fold is a running reduction of one line: sums and the log-sum-exp
// accumulate in fp64 (the CPU backend does), max and min let NaN win.
struct Fold {
    double acc, aux;
    bool nan;
};

__device__ __forceinline__ Fold fold_init(int op) {
    Fold f;
    f.acc = op == RA_MAX || op == RA_LSE ? -INFINITY : (op == RA_MIN ? INFINITY : 0.0);
    f.aux = 0.0;
    f.nan = false;
    return f;
}

// fold_add adds one value; the log-sum-exp keeps (max, Σ e^(x−max)).
__device__ __forceinline__ void fold_add(int op, Fold& f, double v) {
    switch (op) {
    case RA_SUM:
    case RA_MEAN: f.acc += v; break;
    case RA_MAX:
        f.nan |= v != v;
        if (v > f.acc) f.acc = v;
        break;
    case RA_MIN:
        f.nan |= v != v;
        if (v < f.acc) f.acc = v;
        break;
    case RA_LSE:
        if (v != v) {
            f.nan = true;
        } else if (v > f.acc) {
            f.aux = (f.acc == -INFINITY ? 0.0 : f.aux * exp(f.acc - v)) + 1.0;
            f.acc = v;
        } else if (v != -INFINITY) {
            f.aux += exp(v - f.acc);
        }
        break;
    }
}

// fold_merge combines two partial folds of one line.
__device__ __forceinline__ Fold fold_merge(int op, Fold a, Fold b) {
    a.nan |= b.nan;
    switch (op) {
    case RA_SUM:
    case RA_MEAN: a.acc += b.acc; break;
    case RA_MAX: a.acc = b.acc > a.acc ? b.acc : a.acc; break;
    case RA_MIN: a.acc = b.acc < a.acc ? b.acc : a.acc; break;
    case RA_LSE:
        if (b.acc == -INFINITY) break;
        if (a.acc == -INFINITY) {
            a.acc = b.acc, a.aux = b.aux;
        } else if (b.acc > a.acc) {
            a.aux = a.aux * exp(a.acc - b.acc) + b.aux, a.acc = b.acc;
        } else {
            a.aux += b.aux * exp(b.acc - a.acc);
        }
        break;
    }
    return a;
}

// fold_result finishes a line of n values.
__device__ __forceinline__ float fold_result(int op, Fold f, int64_t n) {
    if (f.nan && op != RA_SUM && op != RA_MEAN) return NAN;
    switch (op) {
    case RA_MEAN: return (float)(f.acc / (double)n);
    case RA_LSE:
        if (f.acc == -INFINITY || f.acc == INFINITY) return (float)f.acc;
        return (float)(f.acc + log(f.aux));
    }
    return (float)f.acc;
}

// reduce_axis_block: one block per line (inner = 1 in practice, long
// lines); reduce_axis_thread: one thread per line, threads of a warp on
// neighbouring inner positions (coalesced).
template <typename T>
__device__ void reduce_axis_block(int op, T* y, const T* x, int64_t n, int64_t inner) {
    __shared__ Fold part[ROW_THREADS];
    int64_t r = blockIdx.x, o = r / inner, i = r % inner;
    const T* base = x + o * n * inner + i;
    Fold f = fold_init(op);
    for (int64_t k = threadIdx.x; k < n; k += blockDim.x) fold_add(op, f, ld(base, k * inner));
    part[threadIdx.x] = f;
    __syncthreads();
    for (int s = blockDim.x / 2; s > 0; s >>= 1) {  // a fixed tree: deterministic
        if ((int)threadIdx.x < s) part[threadIdx.x] = fold_merge(op, part[threadIdx.x], part[threadIdx.x + s]);
        __syncthreads();
    }
    if (threadIdx.x == 0) st(y, r, fold_result(op, part[0], n));
}

template <typename T>
__device__ void reduce_axis_thread(int op, T* y, const T* x, int64_t outer, int64_t n, int64_t inner) {
    for (int64_t r = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; r < outer * inner;
         r += (int64_t)blockDim.x * gridDim.x) {
        int64_t o = r / inner, i = r % inner;
        const T* base = x + o * n * inner + i;
        Fold f = fold_init(op);
        for (int64_t k = 0; k < n; k++) fold_add(op, f, ld(base, k * inner));
        st(y, r, fold_result(op, f, n));
    }
}

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

__global__ void argmax_rows_f32(int64_t* dst, const float* x, int64_t n, int64_t inner) {
    argmax_rows(dst, x, n, inner);
}
__global__ void argmax_rows_bf16(int64_t* dst, const __nv_bfloat16* x, int64_t n, int64_t inner) {
    argmax_rows(dst, x, n, inner);
}
__global__ void count_correct_rows_f32(float* acc, const float* x, const void* t, int t64, int64_t c) {
    count_correct_rows(acc, x, t, t64, c);
}
__global__ void count_correct_rows_bf16(float* acc, const __nv_bfloat16* x, const void* t, int t64, int64_t c) {
    count_correct_rows(acc, x, t, t64, c);
}


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

// ce_finish reduces the per-row losses: out[0] = Σ per (or its mean over
// the kept rows), out[1] = Σ kept (one block of ROW_THREADS threads).
__global__ void ce_finish(float* out, const float* per, const float* kept, int64_t n, int mean) {
    float s = 0.f, k = 0.f;
    for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
        s += per[i];
        k += kept[i];
    }
    s = block_sum(s);
    k = block_sum(k);
    if (threadIdx.x == 0) {
        out[0] = mean ? s / k : s;
        out[1] = k;
    }
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
                                const float* count, int mean, int64_t c, float eps, int has_ignore, int64_t ignore) {
    ce_bwd_rows(dx, x, t, t64, dloss, per_row, count, mean, c, eps, has_ignore, ignore);
}
__global__ void ce_bwd_rows_bf16(__nv_bfloat16* dx, const __nv_bfloat16* x, const void* t, int t64,
                                 const float* dloss, int per_row, const float* count, int mean, int64_t c, float eps,
                                 int has_ignore, int64_t ignore) {
    ce_bwd_rows(dx, x, t, t64, dloss, per_row, count, mean, c, eps, has_ignore, ignore);
}

#define AXIS_KERNELS(SUF, T)                                                                                   \
    __global__ void reduce_axis_block_##SUF(int op, T* y, const T* x, int64_t n, int64_t inner) {                 \
        reduce_axis_block(op, y, x, n, inner);                                                                 \
    }                                                                                                          \
    __global__ void reduce_axis_thread_##SUF(int op, T* y, const T* x, int64_t outer, int64_t n, int64_t inner) { \
        reduce_axis_thread(op, y, x, outer, n, inner);                                                         \
    }                                                                                                          \
    __global__ void softmax_axis_##SUF(int log, T* y, const T* x, int64_t outer, int64_t n, int64_t inner) {      \
        softmax_axis(log, y, x, outer, n, inner);                                                              \
    }                                                                                                          \
    __global__ void softmax_bwd_axis_##SUF(int log, T* dx, const T* y, const T* dy, int64_t outer, int64_t n,     \
                                           int64_t inner) {                                                    \
        softmax_bwd_axis(log, dx, y, dy, outer, n, inner);                                                     \
    }
AXIS_KERNELS(f32, float)
AXIS_KERNELS(bf16, __nv_bfloat16)

}  // extern "C"
