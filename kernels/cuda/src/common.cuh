// Shared by every kernel file of the Esper CUDA backend (each .cu is its
// own module; this header is compiled into each). mkptx.sh hashes it with
// each source, so an edit here makes TestPTXUpToDate ask for make ptx.
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <math.h>
#include <stdint.h>

// GRID_STRIDE loops i over [0, n) across the whole grid, so any launch
// shape covers any n; the Go side picks the shape.
#define GRID_STRIDE(i, n) \
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < (n); \
         i += (int64_t)blockDim.x * gridDim.x)

// ld and st read and write fp32, bf16 or fp16 elements as fp32 (the half
// types rounded to nearest even on store, as tensor.F32ToBF16 and
// tensor.F32ToF16 round).
__device__ __forceinline__ float ld(const float* p, int64_t i) { return p[i]; }
__device__ __forceinline__ float ld(const __nv_bfloat16* p, int64_t i) { return __bfloat162float(p[i]); }
__device__ __forceinline__ float ld(const __half* p, int64_t i) { return __half2float(p[i]); }
__device__ __forceinline__ void st(float* p, int64_t i, float v) { p[i] = v; }
__device__ __forceinline__ void st(__nv_bfloat16* p, int64_t i, float v) { p[i] = __float2bfloat16_rn(v); }
__device__ __forceinline__ void st(__half* p, int64_t i, float v) { p[i] = __float2half_rn(v); }
// fp64 elements are read and written as double (the kernels with an fp64
// variant compute in Compute<T>::type: float for the three float types,
// double for double).
__device__ __forceinline__ double ld(const double* p, int64_t i) { return p[i]; }
__device__ __forceinline__ void st(double* p, int64_t i, double v) { p[i] = v; }
template <typename T>
struct Compute {
    typedef float type;
};
template <>
struct Compute<double> {
    typedef double type;
};

// ld_side reads element i of a side operand (a bias, a scale, a shift)
// whose dtype is given at run time: code 0 fp32, 1 bf16, 2 fp16 (the Go
// sideCode). The fp16 entry points take it; the fp32 and bf16 ones keep
// their own two-way flag.
__device__ __forceinline__ float ld_side(const void* p, int code, int64_t i) {
    switch (code) {
    case 1: return __bfloat162float(((const __nv_bfloat16*)p)[i]);
    case 2: return __half2float(((const __half*)p)[i]);
    }
    return ((const float*)p)[i];
}

// block_sum and block_max reduce v over the block (blockDim.x a multiple
// of 32) and return the result to every thread. block_sum_t is the sum
// in any type: block_sum in fp32, block_sum_d in fp64 (sums of squares
// that must neither overflow nor underflow where fp32 would: ForeachNorm
// and the clip).
template <typename T>
__device__ __forceinline__ T block_sum_t(T v) {
    __shared__ T part[32];
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffff, v, o);
    int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
    __syncthreads();
    if (lane == 0) part[w] = v;
    __syncthreads();
    v = lane < (int)(blockDim.x >> 5) ? part[lane] : (T)0;
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffff, v, o);
    return v;
}
__device__ float block_sum(float v) { return block_sum_t<float>(v); }
__device__ double block_sum_d(double v) { return block_sum_t<double>(v); }

// last_block is the counting step of a launch that finishes its own
// reduction (gat_mean_f32's tail, batch norm's partials, the direct
// weight gradient): once the calling block's writes for group g are
// fenced (visible device-wide) it counts them done in counters[g] and
// reports, to every thread of the block, whether it was the last of the
// total blocks that write group g; the last one, fenced again, can read
// the others' writes (from L2: __ldcg) and must set counters[g] back to
// 0 for the next launch. Every thread of the block must call it.
__device__ __forceinline__ bool last_block(int* counters, int64_t g, int total) {
    __shared__ int last;
    __threadfence();
    __syncthreads();
    if (threadIdx.x == 0) last = atomicAdd(counters + g, 1) == total - 1;
    __syncthreads();
    const bool l = last;
    __threadfence();
    return l;
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

// acc_add is p[i] + v as Binary Add computes it when v was first stored
// as a T: v rounded to T, then the two added in fp32 (the caller stores
// the sum, rounding it once more). The accumulating kernels of
// kernels.ParamGradAccumulator write with it, so that they equal the
// overwriting kernel followed by Binary Add bit for bit.
template <typename T>
__device__ __forceinline__ float acc_add(const T* p, int64_t i, float v) {
    T r;
    st(&r, 0, v);
    return ld(p, i) + ld(&r, 0);
}

// better reports whether candidate (v, i) beats (bv, bi) for the first
// maximum with NaN counting as the maximum (the CPU's argMaxLine): the
// first NaN wins, else the larger value, ties to the smaller index
// (reduce.cu's arg-max and accuracy counter, softmax.cu's ce_small).
__device__ __forceinline__ bool better(float v, int64_t i, float bv, int64_t bi) {
    bool vn = v != v, bn = bv != bv;
    if (vn != bn) return vn;
    if (vn || v == bv) return i < bi;
    return v > bv;
}

// Unary op codes: kernels.UnaryOp's values, in its order; unary_f is the
// op (elementwise.cu's unary kernels, matmul.cu's epilogue activation).
enum { U_NEG = 0, U_ABS, U_EXP, U_LOG, U_SQRT, U_RSQRT, U_SQUARE, U_RECIP, U_SIGN, U_RELU, U_GELU_TANH, U_GELU_ERF,
       U_SILU, U_SIGMOID, U_TANH, U_SOFTPLUS };

__device__ __forceinline__ float unary_f(int op, float x) {
    switch (op) {
    case U_NEG: return -x;
    case U_ABS: return fabsf(x);
    case U_EXP: return expf(x);
    case U_LOG: return logf(x);
    case U_SQRT: return sqrtf(x);
    case U_RSQRT: return rsqrtf(x);
    case U_SQUARE: return x * x;
    case U_RECIP: return 1.f / x;
    case U_SIGN: return x > 0.f ? 1.f : (x < 0.f ? -1.f : x);  // ±0 and NaN stay, as on the CPU
    case U_RELU: return (x > 0.f || x != x) ? x : 0.f;        // NaN stays, as the CPU's max(x, 0)
    case U_GELU_TANH: {
        const float k = 0.7978845608028654f;  // sqrt(2/pi)
        return 0.5f * x * (1.f + tanhf(k * (x + 0.044715f * x * x * x)));
    }
    case U_GELU_ERF: return 0.5f * x * (1.f + erff(x * 0.7071067811865476f));
    case U_SILU: return x / (1.f + expf(-x));
    case U_SIGMOID: return 1.f / (1.f + expf(-x));
    case U_TANH: return tanhf(x);
    case U_SOFTPLUS: return x > 20.f ? x : log1pf(expf(x));  // linear above 20, as PyTorch
    }
    return x;
}

// --- shared by the optimizer steps and the fused linear step ----------

// The arena steps stream p, g and the state once per step (optim.cu says
// more); linear_ce_sgd_f32 (softmax.cu) runs the same step after its
// forward and backward, so the code lives here.

// aligned16 reports whether p may be read and written as float4.
__device__ __forceinline__ bool aligned16(const void* p) { return ((uintptr_t)p & 15) == 0; }

// sgd_elem is sgd_f32's update of one element: p and, with momentum
// (MOM), its buffer m, in place. Every product and sum is rounded on its
// own (_rn: never contracted to an fma), in the CPU's order, so that the
// step is the same bits in every kernel that inlines it (nvcc contracts
// by context otherwise) and the CPU's.
template <bool MOM>
__device__ __forceinline__ void sgd_elem(float& p, float g, float& m, float lr, float mu, float damp, float wd,
                                         int first, int nesterov, int maximize) {
    float d = maximize ? -g : g;
    if (wd != 0.f) d = __fadd_rn(d, __fmul_rn(wd, p));
    if (MOM) {
        float b = first ? d : __fadd_rn(__fmul_rn(mu, m), __fmul_rn(damp, d));
        m = b;
        d = nesterov ? __fadd_rn(d, __fmul_rn(mu, b)) : b;
    }
    p = __fsub_rn(p, __fmul_rn(lr, d));
}

// sgd_apply runs sgd_elem over n elements across the grid: float4 where
// p, g (and m) are aligned, scalar for the rest. With zero it writes 0
// over each gradient element it read (SGDOptions.ZeroGrad).
template <bool MOM>
__device__ __forceinline__ void sgd_apply(float* p, float* g, float* m, float lr, float mu, float damp, float wd,
                                          int first, int nesterov, int maximize, int zero, int64_t n) {
    int64_t done = 0;
    if (aligned16(p) && aligned16(g) && (!MOM || aligned16(m))) {
        int64_t n4 = n >> 2;
        float4* p4 = (float4*)p;
        float4* g4 = (float4*)g;
        float4* m4 = (float4*)m;
        GRID_STRIDE(i, n4) {
            float4 pv = p4[i], gv = g4[i];
            float4 mv = make_float4(0.f, 0.f, 0.f, 0.f);
            if (MOM) mv = m4[i];
            sgd_elem<MOM>(pv.x, gv.x, mv.x, lr, mu, damp, wd, first, nesterov, maximize);
            sgd_elem<MOM>(pv.y, gv.y, mv.y, lr, mu, damp, wd, first, nesterov, maximize);
            sgd_elem<MOM>(pv.z, gv.z, mv.z, lr, mu, damp, wd, first, nesterov, maximize);
            sgd_elem<MOM>(pv.w, gv.w, mv.w, lr, mu, damp, wd, first, nesterov, maximize);
            if (MOM) m4[i] = mv;
            p4[i] = pv;
            if (zero) g4[i] = make_float4(0.f, 0.f, 0.f, 0.f);
        }
        done = n4 << 2;
    }
    for (int64_t i = done + (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (int64_t)blockDim.x * gridDim.x) {
        float pi = p[i], mi = 0.f;
        if (MOM) mi = m[i];
        sgd_elem<MOM>(pi, g[i], mi, lr, mu, damp, wd, first, nesterov, maximize);
        if (MOM) m[i] = mi;
        p[i] = pi;
        if (zero) g[i] = 0.f;
    }
}

// sgd_zero_grad is what a step skipped on found_inf leaves with zero: the
// gradient zeroed.
__device__ __forceinline__ void sgd_zero_grad(float* g, int64_t n) {
    GRID_STRIDE(i, n) g[i] = 0.f;
}

// sgd_inc_block is sgd_inc_f32's body (one block): increment of the fp64
// step hyper[1] and sgd_f32 in one launch. Every thread computes the new
// step from the old before the barrier, and thread 0 writes it back after
// it, so no thread reads a step already counted. Skipped whole when
// *found_inf is non-zero, as both are.
__device__ __forceinline__ void sgd_inc_block(float* p, float* g, float* m, double* hyper, const float* found_inf,
                                              float mu, float damp, float wd, int nesterov, int maximize, int zero,
                                              int64_t n) {
    if (found_inf != nullptr && *found_inf != 0.f) {
        if (zero) sgd_zero_grad(g, n);
        return;
    }
    const double step = hyper[1] + 1.0;
    const float lr = (float)hyper[0];
    const int first = step <= 1.0;
    __syncthreads();  // every thread has read the old step
    if (threadIdx.x == 0) hyper[1] = step;
    if (m != nullptr) {
        sgd_apply<true>(p, g, m, lr, mu, damp, wd, first, nesterov, maximize, zero, n);
    } else {
        sgd_apply<false>(p, g, m, lr, mu, damp, wd, first, nesterov, maximize, zero, n);
    }
}

// linear_grad_at is linear_grad_add_f32's output e (matmul.cu): e < n·k
// adds dw[j, p] += Σ_i g[i, j]·x[i, p] (j = e / k, p = e % k; the rows
// in order, fma in fp32), else db[e − n·k] += Σ_i g[i, e − n·k] summed in
// fp64 and rounded once to fp32.
__device__ __forceinline__ void linear_grad_at(float* dw, float* db, const float* g, const float* x, int64_t m,
                                               int64_t n, int64_t k, int64_t e) {
    const int64_t nk = n * k;
    if (e < nk) {
        int64_t j = e / k, p = e % k;
        float v = 0.f;
        for (int64_t i = 0; i < m; i++) v = fmaf(g[i * n + j], x[i * k + p], v);
        dw[e] = __fadd_rn(dw[e], v);
    } else {
        int64_t j = e - nk;
        double s = 0.0;
        for (int64_t i = 0; i < m; i++) s += (double)g[i * n + j];
        db[j] = __fadd_rn(db[j], (float)s);
    }
}

// GatherPart is one piece of a gathered matrix (Go's gatherPart, word for
// word: x, src, rowPtr, order, then w its width, col its first column in
// the output, loc its first local column and kind: 0 the mean of x's rows
// over the CSR, 1 a copy of x's row, 2 ones).
struct GatherPart {
    const float* x;
    const int64_t *src, *rowPtr, *order;
    int64_t w, col, loc, kind;
};

// edge_at is the id of a CSR's p-th edge in destination order: order[p],
// or p itself where order is null (the edges sorted by destination
// already, kernels.GraphAggregator: one dependent load fewer per edge).
__device__ __forceinline__ int64_t edge_at(const int64_t* order, int64_t p) { return order ? order[p] : p; }

// gather_mean_at is element (i, f) of gather_mean_f32's result (x's rows
// fw elements apart): the sum in p order from the first value, scaled by
// 1/count, or 0 for a node without edges.
__device__ __forceinline__ float gather_mean_at(const float* x, const int64_t* src, const int64_t* rowPtr,
                                                const int64_t* order, int64_t fw, int64_t i, int64_t f) {
    const int64_t a = rowPtr[i], b = rowPtr[i + 1];
    if (b <= a) return 0.f;
    float acc = x[src[edge_at(order, a)] * fw + f];
    for (int64_t p = a + 1; p < b; p++) acc += x[src[edge_at(order, p)] * fw + f];
    return acc * (1.f / (float)(b - a));
}

// GATHER_IN_PIECES is the most pieces of a GatherIn (Go's
// gatherInPieces). GatherIn is an input matrix gathered as it is read
// (Go's gatherInPack: the piece count, then the pieces, loc their first
// column, col unused; kernels.GatherInput): relu_heads_f32's and
// linear_act_ln_join_f32's.
#define GATHER_IN_PIECES 4
struct GatherIn {
    int64_t npieces;
    GatherPart p[GATHER_IN_PIECES];
};

// gather_part_of returns the index of the part of parts[0, np) whose
// [loc, loc + w) holds column j (parts in ascending loc).
__device__ __forceinline__ int gather_part_of(const GatherPart* parts, int np, int64_t j) {
    int p = 0;
    while (p + 1 < np && j >= parts[p + 1].loc) p++;
    return p;
}

// gather_part_at is element (i, f) of part g: the mean of its x's rows
// over its CSR (kind 0, gather_mean_at), its x's row i (kind 1) or 1.
__device__ __forceinline__ float gather_part_at(const GatherPart& g, int64_t i, int64_t f) {
    if (g.kind == 0) return gather_mean_at(g.x, g.src, g.rowPtr, g.order, g.w, i, f);
    if (g.kind == 1) return g.x[i * g.w + f];
    return 1.f;
}

// gather_in_at is element (i, j) of a GatherIn, as gather_concat_f32
// writes it, bit for bit.
__device__ __forceinline__ float gather_in_at(const GatherIn& in, int64_t i, int64_t j) {
    const GatherPart& g = in.p[gather_part_of(in.p, (int)in.npieces, j)];
    return gather_part_at(g, i, j - g.loc);
}
