// Row kernels of the Esper CUDA backend: reductions along the last axis,
// softmax and log-softmax with their backward passes, the fused softmax
// cross-entropy, arg-max along an axis and the accuracy counter. x is viewed as [rows, n]; one block of
// ROW_THREADS threads handles a row (gridDim.x = rows), reducing in
// registers, then across warps through shared memory. All arithmetic is
// fp32 (bf16 inputs are widened on load).
#include <cuda_bf16.h>
#include <stdint.h>
#include <math.h>

#define ROW_THREADS 256

__device__ __forceinline__ float ld(const float* p, int64_t i) { return p[i]; }
__device__ __forceinline__ float ld(const __nv_bfloat16* p, int64_t i) { return __bfloat162float(p[i]); }
__device__ __forceinline__ void st(float* p, int64_t i, float v) { p[i] = v; }
__device__ __forceinline__ void st(__nv_bfloat16* p, int64_t i, float v) { p[i] = __float2bfloat16_rn(v); }

// block_sum and block_max reduce v over the block and return the result
// to every thread.
__device__ float block_sum(float v) {
    __shared__ float part[32];
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffff, v, o);
    int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
    __syncthreads();
    if (lane == 0) part[w] = v;
    __syncthreads();
    v = lane < (int)(blockDim.x >> 5) ? part[lane] : 0.f;
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffff, v, o);
    return v;
}

__device__ float block_max(float v) {
    __shared__ float part[32];
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffff, v, o));
    int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
    __syncthreads();
    if (lane == 0) part[w] = v;
    __syncthreads();
    v = lane < (int)(blockDim.x >> 5) ? part[lane] : -INFINITY;
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffff, v, o));
    return v;
}

// Reduction op codes: kernels.ReduceOp's Sum, Mean, Max.
enum { R_SUM = 0, R_MEAN = 1, R_MAX = 2 };

template <typename T>
__device__ void reduce_rows(int op, T* y, const T* x, int64_t n) {
    const T* r = x + (int64_t)blockIdx.x * n;
    float acc = op == R_MAX ? -INFINITY : 0.f;
    bool nan = false;
    for (int64_t j = threadIdx.x; j < n; j += blockDim.x) {
        float v = ld(r, j);
        if (op == R_MAX) {
            nan |= v != v;
            acc = fmaxf(acc, v);
        } else {
            acc += v;
        }
    }
    if (op == R_MAX) {
        acc = block_max(acc);
        nan = block_sum(nan ? 1.f : 0.f) > 0.f;  // max propagates NaN, as torch.amax
        if (nan) acc = NAN;
    } else {
        acc = block_sum(acc);
        if (op == R_MEAN) acc /= (float)n;
    }
    if (threadIdx.x == 0) st(y, blockIdx.x, acc);
}

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

__global__ void reduce_rows_f32(int op, float* y, const float* x, int64_t n) { reduce_rows(op, y, x, n); }
__global__ void reduce_rows_bf16(int op, __nv_bfloat16* y, const __nv_bfloat16* x, int64_t n) { reduce_rows(op, y, x, n); }

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

__global__ void ce_bwd_rows_f32(float* dx, const float* x, const void* t, int t64, const float* dloss, int per_row,
                                const float* count, int mean, int64_t c, float eps, int has_ignore, int64_t ignore) {
    ce_bwd_rows(dx, x, t, t64, dloss, per_row, count, mean, c, eps, has_ignore, ignore);
}
__global__ void ce_bwd_rows_bf16(__nv_bfloat16* dx, const __nv_bfloat16* x, const void* t, int t64,
                                 const float* dloss, int per_row, const float* count, int mean, int64_t c, float eps,
                                 int has_ignore, int64_t ignore) {
    ce_bwd_rows(dx, x, t, t64, dloss, per_row, count, mean, c, eps, has_ignore, ignore);
}

}  // extern "C"
