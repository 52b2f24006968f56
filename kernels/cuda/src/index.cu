// Indexing kernels of the Esper CUDA backend along any axis: index
// select and index add over x viewed as [outer, n, inner], torch.gather
// and torch.scatter_add_ over views of any strides. Selection and gather
// copy raw elements (any dtype, by element size); the accumulating
// kernels are fp32, bf16 and fp16 with atomics (each addition rounded to
// the element type). Index values are int64 or int32; a value
// out of range cannot panic in a kernel: selection writes zero bits and
// accumulation skips it.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <stdint.h>
#include "common.cuh"

// Geom is struct Geom of elementwise.cu (the Go geom), word for word.
#define MAX_RANK 6
#define MAX_OPS 4
struct Geom {
    int64_t rank;
    int64_t shape[MAX_RANK];
    int64_t st[MAX_OPS][MAX_RANK];
};

__device__ __forceinline__ void geom_offsets(const Geom& g, int64_t i, int nops, int64_t* off) {
    for (int k = 0; k < nops; k++) off[k] = 0;
    for (int d = (int)g.rank - 1; d >= 0; d--) {
        int64_t n = g.shape[d], c = i % n;
        i /= n;
        for (int k = 0; k < nops; k++) off[k] += c * g.st[k][d];
    }
}

__device__ __forceinline__ int64_t index_at(const void* idx, int i64, int64_t i) {
    return i64 ? ((const int64_t*)idx)[i] : (int64_t)((const int32_t*)idx)[i];
}

// index_select: d[o, k, i] = s[o, idx[k], i] for d [outer, nidx, inner].
template <typename W>
__device__ void index_select(W* d, const W* s, const void* idx, int i64, int64_t outer, int64_t n, int64_t inner,
                             int64_t nidx) {
    GRID_STRIDE(e, outer * nidx * inner) {
        int64_t i = e % inner, k = (e / inner) % nidx, o = e / (inner * nidx);
        int64_t r = index_at(idx, i64, k);
        d[e] = (r < 0 || r >= n) ? (W)0 : s[(o * n + r) * inner + i];
    }
}

// gather: element e of the contiguous index (and of d) reads s at the
// offset of e's coordinates (geometry operand 0: s's strides with the
// axis zeroed) plus idx[e]·axis_stride.
template <typename W>
__device__ void gather(W* d, const W* s, const void* idx, int i64, Geom g, int64_t axis_stride, int64_t axis_n,
                       int64_t n) {
    GRID_STRIDE(e, n) {
        int64_t o[1];
        geom_offsets(g, e, 1, o);
        int64_t r = index_at(idx, i64, e);
        d[e] = (r < 0 || r >= axis_n) ? (W)0 : s[o[0] + r * axis_stride];
    }
}

// index_add: d[o, idx[k], i] += s[o, k, i] (atomically: indices may
// repeat, so the order of the additions is not fixed).
template <typename T>
__device__ void index_add(T* d, const T* s, const void* idx, int i64, int64_t outer, int64_t n, int64_t inner,
                          int64_t nidx) {
    GRID_STRIDE(e, outer * nidx * inner) {
        int64_t i = e % inner, k = (e / inner) % nidx, o = e / (inner * nidx);
        int64_t r = index_at(idx, i64, k);
        if (r >= 0 && r < n) atomicAdd(&d[(o * n + r) * inner + i], s[e]);
    }
}

// scatter_add: over the contiguous index, element e adds s (operand 0 of
// g) into d (operand 1, the axis zeroed) at idx[e] along the axis.
template <typename T>
__device__ void scatter_add(T* d, const T* s, const void* idx, int i64, Geom g, int64_t axis_stride, int64_t axis_n,
                            int64_t n) {
    GRID_STRIDE(e, n) {
        int64_t o[2];
        geom_offsets(g, e, 2, o);
        int64_t r = index_at(idx, i64, e);
        if (r >= 0 && r < axis_n) atomicAdd(&d[o[1] + r * axis_stride], s[o[0]]);
    }
}

extern "C" {

#define RAW_KERNELS(SUF, W)                                                                                    \
    __global__ void index_select_raw##SUF(W* d, const W* s, const void* idx, int i64, int64_t outer, int64_t n, \
                                          int64_t inner, int64_t nidx) {                                       \
        index_select(d, s, idx, i64, outer, n, inner, nidx);                                                  \
    }                                                                                                          \
    __global__ void gather_raw##SUF(W* d, const W* s, const void* idx, int i64, Geom g, int64_t axis_stride,    \
                                    int64_t axis_n, int64_t n) {                                               \
        gather(d, s, idx, i64, g, axis_stride, axis_n, n);                                                    \
    }
RAW_KERNELS(1, uint8_t)
RAW_KERNELS(2, uint16_t)
RAW_KERNELS(4, uint32_t)
RAW_KERNELS(8, uint64_t)

__global__ void index_add_f32(float* d, const float* s, const void* idx, int i64, int64_t outer, int64_t n,
                              int64_t inner, int64_t nidx) {
    index_add(d, s, idx, i64, outer, n, inner, nidx);
}
__global__ void scatter_add_f32(float* d, const float* s, const void* idx, int i64, Geom g, int64_t axis_stride,
                                int64_t axis_n, int64_t n) {
    scatter_add(d, s, idx, i64, g, axis_stride, axis_n, n);
}

// --- bf16 and fp16 (appended so that the entry points above keep their
// code and labels): index_add and scatter_add with the half types' atomic
// additions (sm_80's native bf16 and fp16 atomics), each addition rounded
// to nearest even.

__global__ void index_add_bf16(__nv_bfloat16* d, const __nv_bfloat16* s, const void* idx, int i64, int64_t outer,
                               int64_t n, int64_t inner, int64_t nidx) {
    index_add(d, s, idx, i64, outer, n, inner, nidx);
}
__global__ void index_add_f16(__half* d, const __half* s, const void* idx, int i64, int64_t outer, int64_t n,
                              int64_t inner, int64_t nidx) {
    index_add(d, s, idx, i64, outer, n, inner, nidx);
}
__global__ void scatter_add_bf16(__nv_bfloat16* d, const __nv_bfloat16* s, const void* idx, int i64, Geom g,
                                 int64_t axis_stride, int64_t axis_n, int64_t n) {
    scatter_add(d, s, idx, i64, g, axis_stride, axis_n, n);
}
__global__ void scatter_add_f16(__half* d, const __half* s, const void* idx, int i64, Geom g, int64_t axis_stride,
                                int64_t axis_n, int64_t n) {
    scatter_add(d, s, idx, i64, g, axis_stride, axis_n, n);
}

}  // extern "C"
