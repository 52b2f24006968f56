// Reduction kernels of the Esper CUDA backend: the reduction of x viewed
// as [outer, n, inner] over its middle axis (every kernels.ReduceOp; sums
// and the log-sum-exp accumulate in fp64, as the CPU backend does), the
// arg-max along an axis and the accuracy counter built on it. Long lines
// along the last axis take one block of ROW_THREADS threads each
// (gridDim.x = lines), reducing in registers, then across warps through
// shared memory; lines along a middle axis one thread each.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <stdint.h>
#include <math.h>
#include "common.cuh"

#define ROW_THREADS 256

// target_at reads target i (int64 when t64, else int32).
__device__ __forceinline__ int64_t target_at(const void* t, int t64, int64_t i) {
    return t64 ? ((const int64_t*)t)[i] : (int64_t)((const int32_t*)t)[i];
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
    if (threadIdx.x == 0 && k == target_at(t, t64, r)) acc[r] += 1.f;
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

// fold_result finishes a line of n values in R (float, or double for
// the fp64 kernels).
template <typename R>
__device__ __forceinline__ R fold_result(int op, Fold f, int64_t n) {
    if (f.nan && op != RA_SUM && op != RA_MEAN) return (R)NAN;
    switch (op) {
    case RA_MEAN: return (R)(f.acc / (double)n);
    case RA_LSE:
        if (f.acc == -INFINITY || f.acc == INFINITY) return (R)f.acc;
        return (R)(f.acc + log(f.aux));
    }
    return (R)f.acc;
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
    if (threadIdx.x == 0) st(y, r, fold_result<typename Compute<T>::type>(op, part[0], n));
}

template <typename T>
__device__ void reduce_axis_thread(int op, T* y, const T* x, int64_t outer, int64_t n, int64_t inner) {
    for (int64_t r = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; r < outer * inner;
         r += (int64_t)blockDim.x * gridDim.x) {
        int64_t o = r / inner, i = r % inner;
        const T* base = x + o * n * inner + i;
        Fold f = fold_init(op);
        for (int64_t k = 0; k < n; k++) fold_add(op, f, ld(base, k * inner));
        st(y, r, fold_result<typename Compute<T>::type>(op, f, n));
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

#define REDUCE_AXIS_KERNELS(SUF, T)                                                                            \
    __global__ void reduce_axis_block_##SUF(int op, T* y, const T* x, int64_t n, int64_t inner) {              \
        reduce_axis_block(op, y, x, n, inner);                                                                 \
    }                                                                                                          \
    __global__ void reduce_axis_thread_##SUF(int op, T* y, const T* x, int64_t outer, int64_t n, int64_t inner) {\
        reduce_axis_thread(op, y, x, outer, n, inner);                                                         \
    }
REDUCE_AXIS_KERNELS(f32, float)
REDUCE_AXIS_KERNELS(bf16, __nv_bfloat16)

// fp16 (appended so that the entry points above keep their code and labels).
__global__ void argmax_rows_f16(int64_t* dst, const __half* x, int64_t n, int64_t inner) {
    argmax_rows(dst, x, n, inner);
}
__global__ void count_correct_rows_f16(float* acc, const __half* x, const void* t, int t64, int64_t c) {
    count_correct_rows(acc, x, t, t64, c);
}
REDUCE_AXIS_KERNELS(f16, __half)

// fp64 (appended so that the entry points above keep their code).
REDUCE_AXIS_KERNELS(f64, double)

}  // extern "C"
