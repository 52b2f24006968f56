// Multi-tensor apply of the Esper CUDA backend (PyTorch's
// multi_tensor_apply, with the tensor list in device memory instead of in
// the kernel arguments): one launch updates a whole list of fp32 tensors
// of any sizes. The Go side (multi_tensor.go) writes a table of uint64
// words and keeps it on the device between launches:
//
//   tensor t (t < ntensors), at word t·(L+1): L pointers, one per list
//     (p, g, m, v for AdamW), then n_t with bit 63 set when every one of
//     the L pointers is 16-byte aligned (the float4 path may be taken);
//   chunk c (c < nchunks), at word ntensors·(L+1) + c: (t << 40) | k, the
//     k-th chunk of MT_CHUNK elements of tensor t.
//
// Blocks walk the chunk list with a grid stride; a chunk's threads stride
// over its elements, four at a time where aligned. The per-element
// arithmetic is the same as the arena kernels' (src/optim.cu), so a list
// and an arena give the same results.
#include <stdint.h>
#include <math.h>
#include "common.cuh"

// MT_CHUNK is the elements of one chunk (multi_tensor.go's mtChunk): a
// block's work item, a multiple of 4 so that chunks keep alignment.
#define MT_CHUNK 16384

// mt_chunk locates chunk c: its tensor, first element and length, and
// whether the float4 path may be taken.
struct mt_span {
    int64_t t, start, len;
    bool vec;
};

__device__ __forceinline__ mt_span mt_chunk(const uint64_t* tab, int lists, int64_t ntensors, int64_t c) {
    uint64_t w = tab[ntensors * (lists + 1) + c];
    mt_span s;
    s.t = (int64_t)(w >> 40);
    s.start = (int64_t)(w & ((1ull << 40) - 1)) * MT_CHUNK;
    uint64_t nw = tab[s.t * (lists + 1) + lists];
    int64_t n = (int64_t)(nw & ~(1ull << 63));
    s.vec = (nw >> 63) != 0;
    s.len = n - s.start < MT_CHUNK ? n - s.start : MT_CHUNK;
    return s;
}

// mt_apply runs op over every element of every tensor: op(v) receives
// the L values of one element (one per list) in v, and the lists whose
// bit is set in WRITES are stored back.
template <int L, int WRITES, typename Op>
__device__ __forceinline__ void mt_apply(const uint64_t* tab, int64_t ntensors, int64_t nchunks, Op op) {
    for (int64_t c = blockIdx.x; c < nchunks; c += gridDim.x) {
        mt_span s = mt_chunk(tab, L, ntensors, c);
        float* p[L];
#pragma unroll
        for (int l = 0; l < L; l++) p[l] = (float*)tab[s.t * (L + 1) + l] + s.start;
        int64_t done = 0;
        if (s.vec) {
            int64_t n4 = s.len / 4;
            for (int64_t i = threadIdx.x; i < n4; i += blockDim.x) {
                float4 r[L];
#pragma unroll
                for (int l = 0; l < L; l++) r[l] = ((const float4*)p[l])[i];
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    float v[L];
#pragma unroll
                    for (int l = 0; l < L; l++) v[l] = ((float*)&r[l])[e];
                    op(v);
#pragma unroll
                    for (int l = 0; l < L; l++) ((float*)&r[l])[e] = v[l];
                }
#pragma unroll
                for (int l = 0; l < L; l++)
                    if (WRITES & (1 << l)) ((float4*)p[l])[i] = r[l];
            }
            done = n4 * 4;
        }
        for (int64_t i = done + threadIdx.x; i < s.len; i += blockDim.x) {
            float v[L];
#pragma unroll
            for (int l = 0; l < L; l++) v[l] = p[l][i];
            op(v);
#pragma unroll
            for (int l = 0; l < L; l++)
                if (WRITES & (1 << l)) p[l][i] = v[l];
        }
    }
}

// sgd_op is sgd_f32's update of one element: v = {p, g} or {p, g, m}.
template <bool MOM>
struct sgd_op {
    float lr, mu, damp, wd;
    int first, nesterov, maximize;
    __device__ __forceinline__ void operator()(float* v) const {
        // The arena step's own element update (common.cuh), so that a
        // list steps bit for bit as an arena does.
        float m = MOM ? v[2] : 0.f;
        sgd_elem<MOM>(v[0], v[1], m, lr, mu, damp, wd, first, nesterov, maximize);
        if (MOM) v[2] = m;
    }
};

// adamw_op is adamw_f32's update of one element: v = {p, g, m, v}.
struct adamw_op {
    float b1, b2, c1, c2, eps, decay, step_size, bc2sqrt;
    __device__ __forceinline__ void operator()(float* v) const {
        float gi = v[1];
        float pi = v[0] * decay;
        float mi = b1 * v[2] + c1 * gi;
        float vi = b2 * v[3] + c2 * gi * gi;
        v[2] = mi;
        v[3] = vi;
        v[0] = pi - step_size * (mi / (sqrtf(vi) / bc2sqrt + eps));
    }
};

struct scale_op {
    float k;
    __device__ __forceinline__ void operator()(float* v) const { v[0] *= k; }
};

struct axpy_op {
    float alpha;
    __device__ __forceinline__ void operator()(float* v) const { v[0] += alpha * v[1]; }
};

struct unscale_op {
    float s;
    float* found_inf;
    __device__ __forceinline__ void operator()(float* v) const {
        float y = v[0] * s;
        if (!isfinite(y)) *found_inf = 1.f;
        v[0] = y;
    }
};

extern "C" {

// mt_sgd_f32 is sgd_f32 (src/optim.cu) over the lists {p, g, m}
// (momentum, lists = 3) or {p, g} (mu = 0, lists = 2); hyper = {lr, step}
// in fp64, found_inf optional.
__global__ void mt_sgd_f32(const uint64_t* tab, int64_t ntensors, int64_t nchunks, int lists, const double* hyper,
                           const float* found_inf, float mu, float damp, float wd, int nesterov, int maximize) {
    if (found_inf != nullptr && *found_inf != 0.f) return;
    float lr = (float)hyper[0];
    int first = hyper[1] <= 1.0;
    if (lists == 3) {
        sgd_op<true> op{lr, mu, damp, wd, first, nesterov, maximize};
        mt_apply<3, 0b101>(tab, ntensors, nchunks, op);
    } else {
        sgd_op<false> op{lr, mu, damp, wd, first, nesterov, maximize};
        mt_apply<2, 0b001>(tab, ntensors, nchunks, op);
    }
}

// mt_adamw_f32 is adamw_f32 (src/optim.cu) over the lists {p, g, m, v}.
__global__ void mt_adamw_f32(const uint64_t* tab, int64_t ntensors, int64_t nchunks, const double* hyper,
                             const float* found_inf, float b1, float b2, float c1, float c2, float eps, double wd,
                             double beta1, double beta2) {
    if (found_inf != nullptr && *found_inf != 0.f) return;
    double lr = hyper[0], t = hyper[1];
    adamw_op op;
    op.b1 = b1;
    op.b2 = b2;
    op.c1 = c1;
    op.c2 = c2;
    op.eps = eps;
    op.decay = (float)(1.0 - lr * wd);
    op.step_size = (float)(lr / (1.0 - pow(beta1, t)));
    op.bc2sqrt = (float)sqrt(1.0 - pow(beta2, t));
    mt_apply<4, 0b1101>(tab, ntensors, nchunks, op);
}

// mt_scale_f32: x ·= *s over the list {x}.
__global__ void mt_scale_f32(const uint64_t* tab, int64_t ntensors, int64_t nchunks, const float* s) {
    mt_apply<1, 0b1>(tab, ntensors, nchunks, scale_op{*s});
}

// mt_axpy_f32: y += alpha·x over the lists {y, x}.
__global__ void mt_axpy_f32(const uint64_t* tab, int64_t ntensors, int64_t nchunks, float alpha) {
    mt_apply<2, 0b01>(tab, ntensors, nchunks, axpy_op{alpha});
}

// mt_unscale_check_f32: x ·= *inv_scale over the list {x}, setting
// *found_inf to 1 when a result is NaN or infinite (never clearing it).
__global__ void mt_unscale_check_f32(const uint64_t* tab, int64_t ntensors, int64_t nchunks, const float* inv_scale,
                                     float* found_inf) {
    mt_apply<1, 0b1>(tab, ntensors, nchunks, unscale_op{*inv_scale, found_inf});
}

// mt_sumsq_part_f32 writes Σx² of each chunk c of the list {x} to
// part[c], squared and summed in fp64 as the CPU does (an fp32 square
// overflows past 1.8e19 and underflows below 1e-23), one block reduction
// per chunk in a fixed order: no atomics and nothing to zero first;
// mt_norm_finish adds them up per tensor.
__global__ void mt_sumsq_part_f32(double* part, const uint64_t* tab, int64_t ntensors, int64_t nchunks) {
    for (int64_t c = blockIdx.x; c < nchunks; c += gridDim.x) {
        mt_span s = mt_chunk(tab, 1, ntensors, c);
        const float* x = (const float*)tab[s.t * 2] + s.start;
        double acc = 0.0;
        int64_t done = 0;
        if (s.vec) {
            int64_t n4 = s.len / 4;
            for (int64_t i = threadIdx.x; i < n4; i += blockDim.x) {
                float4 r = ((const float4*)x)[i];
                acc += (double)r.x * r.x + (double)r.y * r.y + (double)r.z * r.z + (double)r.w * r.w;
            }
            done = n4 * 4;
        }
        for (int64_t i = done + threadIdx.x; i < s.len; i += blockDim.x) acc += (double)x[i] * x[i];
        acc = block_sum_d(acc);  // synchronises the block before reusing its shared memory
        if (threadIdx.x == 0) part[c] = acc;
    }
}

// mt_norm_finish sets dst[t] (fp32, or fp64 when wide) to the square
// root of tensor t's chunk partials summed in fp64 in chunk order: its
// chunks follow those of the tensors before it in the table's chunk
// list (multi_tensor.go's mtWords), so a thread per tensor finds its
// first by adding up their counts. A tensor without elements gets 0.
__global__ void mt_norm_finish(void* dst, int wide, const double* part, const uint64_t* tab, int64_t ntensors) {
    GRID_STRIDE(t, ntensors) {
        int64_t c0 = 0;
        for (int64_t u = 0; u < t; u++) c0 += ((int64_t)(tab[u * 2 + 1] & ~(1ull << 63)) + MT_CHUNK - 1) / MT_CHUNK;
        const int64_t k = ((int64_t)(tab[t * 2 + 1] & ~(1ull << 63)) + MT_CHUNK - 1) / MT_CHUNK;
        double sq = 0.0;
        for (int64_t j = 0; j < k; j++) sq += part[c0 + j];
        if (wide) {
            ((double*)dst)[t] = sqrt(sq);
        } else {
            ((float*)dst)[t] = (float)sqrt(sq);
        }
    }
}

}  // extern "C"
