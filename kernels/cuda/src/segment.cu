// Segment kernels of the Esper CUDA backend (message passing for the
// Tamiyo GNN): rows of src [E, F] grouped by segment id. The rows are
// first bucketed by segment with a stable counting sort on the device
// (seg_count, seg_scan, seg_place: CSR offsets start[S+1] and the row
// order), then one thread per (segment, feature) visits its segment's
// rows in row order, exactly as the CPU backend does: the sums, means,
// maxima and arg-maxima are the CPU's, bit for bit in fp32. Softmax sums
// run in fp64, as on the CPU. Values are fp32, bf16 or fp16 (fp32 math).
// A segment id outside [0, S) cannot panic in a kernel: its row belongs
// to no segment.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <stdint.h>
#include <math.h>
#include "common.cuh"

__device__ __forceinline__ int64_t seg_at(const void* seg, int i64, int64_t e) {
    return i64 ? ((const int64_t*)seg)[e] : (int64_t)((const int32_t*)seg)[e];
}

// SCAN_THREADS is seg_scan's block size (the Go side launches it so).
#define SCAN_THREADS 1024

// seg_reduce: Sum, Mean or Max (kernels.ReduceOp 0, 1, 2) of each
// segment's rows; an empty segment gives 0 (arg-max −1). Max keeps the
// first row's value and takes a later one only when strictly greater, as
// the CPU does (so ties go to the earlier row).
template <typename T>
__device__ void seg_reduce(int op, T* d, int64_t* argmax, const T* x, const int32_t* start, const int32_t* order,
                           int64_t S, int64_t fw) {
    GRID_STRIDE(q, S * fw) {
        int64_t sg = q / fw, f = q % fw;
        int32_t a = start[sg], b = start[sg + 1];
        if (a == b) {
            st(d, q, 0.f);
            if (argmax) argmax[q] = -1;
            continue;
        }
        int64_t best = order[a];
        float acc = ld(x, best * fw + f);
        for (int32_t k = a + 1; k < b; k++) {
            int64_t r = order[k];
            float v = ld(x, r * fw + f);
            if (op == 2) {
                if (v > acc) acc = v, best = r;
            } else {
                acc += v;
            }
        }
        if (op == 1) acc *= 1.f / (float)(b - a);
        st(d, q, acc);
        if (argmax) argmax[q] = best;
    }
}

// seg_softmax: the softmax of each (segment, feature) over the segment's
// rows, or with bwd dx = y·(dy − Σ y·dy) (x = y then).
template <typename T>
__device__ void seg_softmax(int bwd, T* d, const T* x, const T* dy, const int32_t* start, const int32_t* order,
                            int64_t S, int64_t fw) {
    GRID_STRIDE(q, S * fw) {
        int64_t sg = q / fw, f = q % fw;
        int32_t a = start[sg], b = start[sg + 1];
        if (bwd) {
            double s = 0.0;
            for (int32_t k = a; k < b; k++) {
                int64_t j = (int64_t)order[k] * fw + f;
                s += (double)ld(x, j) * (double)ld(dy, j);
            }
            for (int32_t k = a; k < b; k++) {
                int64_t j = (int64_t)order[k] * fw + f;
                st(d, j, (float)((double)ld(x, j) * ((double)ld(dy, j) - s)));
            }
            continue;
        }
        double m = -INFINITY;
        for (int32_t k = a; k < b; k++) {
            double v = ld(x, (int64_t)order[k] * fw + f);
            if (v > m) m = v;
        }
        double s = 0.0;
        for (int32_t k = a; k < b; k++) s += exp((double)ld(x, (int64_t)order[k] * fw + f) - m);
        for (int32_t k = a; k < b; k++) {
            int64_t j = (int64_t)order[k] * fw + f;
            st(d, j, (float)(exp((double)ld(x, j) - m) / s));
        }
    }
}

extern "C" {

// seg_count: start[s+1] = number of rows in segment s (start zeroed
// first; integer atomics, so the counts are exact).
__global__ void seg_count(int32_t* start, const void* seg, int i64, int64_t E, int64_t S) {
    GRID_STRIDE(e, E) {
        int64_t s = seg_at(seg, i64, e);
        if (s >= 0 && s < S) atomicAdd(&start[s + 1], 1);
    }
}

// seg_scan: a[0..n) = its inclusive prefix sums (one block of
// SCAN_THREADS threads walking the array in chunks).
__global__ void __launch_bounds__(SCAN_THREADS, 1) seg_scan(int32_t* a, int64_t n) {
    __shared__ int32_t tot[SCAN_THREADS / 32];
    __shared__ int32_t carry;
    int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
    if (threadIdx.x == 0) carry = 0;
    __syncthreads();
    for (int64_t base = 0; base < n; base += SCAN_THREADS) {
        int64_t i = base + threadIdx.x;
        int32_t v = i < n ? a[i] : 0;
        for (int o = 1; o < 32; o <<= 1) {
            int32_t t = __shfl_up_sync(0xffffffff, v, o);
            if (lane >= o) v += t;
        }
        if (lane == 31) tot[w] = v;
        __syncthreads();
        if (w == 0) {
            int32_t t = tot[lane];
            for (int o = 1; o < 32; o <<= 1) {
                int32_t u = __shfl_up_sync(0xffffffff, t, o);
                if (lane >= o) t += u;
            }
            tot[lane] = t;
        }
        __syncthreads();
        int32_t add = carry + (w > 0 ? tot[w - 1] : 0);
        if (i < n) a[i] = v + add;
        __syncthreads();
        if (threadIdx.x == 0) carry += tot[SCAN_THREADS / 32 - 1];
        __syncthreads();
    }
}

// seg_place: order[start[s] + rank] = e for each row e of segment s, rank
// counting the earlier rows of s (a stable counting sort). One warp walks
// the rows 32 at a time; the lanes holding one segment find each other
// with __match_any_sync, so the order is the row order.
__global__ void seg_place(int32_t* order, int32_t* next, const int32_t* start, const void* seg, int i64, int64_t E,
                          int64_t S) {
    for (int64_t s = threadIdx.x; s < S; s += 32) next[s] = start[s];
    __syncwarp();
    unsigned below = (1u << threadIdx.x) - 1;
    for (int64_t base = 0; base < E; base += 32) {
        int64_t e = base + threadIdx.x;
        int64_t s = e < E ? seg_at(seg, i64, e) : -1;
        int key = (s >= 0 && s < S) ? (int)s : -1;
        unsigned peers = __match_any_sync(0xffffffff, key);
        int rank = __popc(peers & below);
        int32_t pos = key >= 0 ? next[key] + rank : 0;
        __syncwarp();
        if (key >= 0) {
            order[pos] = (int32_t)e;
            if (rank == __popc(peers) - 1) next[key] += __popc(peers);
        }
        __syncwarp();
    }
}

__global__ void seg_reduce_f32(int op, float* d, int64_t* argmax, const float* x, const int32_t* start,
                               const int32_t* order, int64_t S, int64_t fw) {
    seg_reduce(op, d, argmax, x, start, order, S, fw);
}
__global__ void seg_reduce_bf16(int op, __nv_bfloat16* d, int64_t* argmax, const __nv_bfloat16* x,
                                const int32_t* start, const int32_t* order, int64_t S, int64_t fw) {
    seg_reduce(op, d, argmax, x, start, order, S, fw);
}

__global__ void seg_softmax_f32(int bwd, float* d, const float* x, const float* dy, const int32_t* start,
                                const int32_t* order, int64_t S, int64_t fw) {
    seg_softmax(bwd, d, x, dy, start, order, S, fw);
}
__global__ void seg_softmax_bf16(int bwd, __nv_bfloat16* d, const __nv_bfloat16* x, const __nv_bfloat16* dy,
                                 const int32_t* start, const int32_t* order, int64_t S, int64_t fw) {
    seg_softmax(bwd, d, x, dy, start, order, S, fw);
}

// seg_max_bwd_*: dsrc[argmax[q], f] += dy[q] (dsrc zeroed first; an
// arg-max of −1, an empty segment, adds nothing). Rows of different
// segments never collide; fp32 adds atomically all the same.
__global__ void seg_max_bwd_f32(float* dsrc, const float* dy, const int64_t* argmax, int64_t E, int64_t S,
                                int64_t fw) {
    GRID_STRIDE(q, S * fw) {
        int64_t a = argmax[q];
        if (a >= 0 && a < E) atomicAdd(&dsrc[a * fw + q % fw], dy[q]);
    }
}
__global__ void seg_max_bwd_bf16(__nv_bfloat16* dsrc, const __nv_bfloat16* dy, const int64_t* argmax, int64_t E,
                                 int64_t S, int64_t fw) {
    GRID_STRIDE(q, S * fw) {
        int64_t a = argmax[q];
        if (a >= 0 && a < E) {
            int64_t j = a * fw + q % fw;
            st(dsrc, j, ld(dsrc, j) + ld(dy, q));
        }
    }
}

// fp16 (appended so that the entry points above keep their code and
// labels); seg_max_bwd_f16 adds without atomics, as the bf16 one.
__global__ void seg_reduce_f16(int op, __half* d, int64_t* argmax, const __half* x, const int32_t* start,
                               const int32_t* order, int64_t S, int64_t fw) {
    seg_reduce(op, d, argmax, x, start, order, S, fw);
}
__global__ void seg_softmax_f16(int bwd, __half* d, const __half* x, const __half* dy, const int32_t* start,
                                const int32_t* order, int64_t S, int64_t fw) {
    seg_softmax(bwd, d, x, dy, start, order, S, fw);
}
__global__ void seg_max_bwd_f16(__half* dsrc, const __half* dy, const int64_t* argmax, int64_t E, int64_t S,
                                int64_t fw) {
    GRID_STRIDE(q, S * fw) {
        int64_t a = argmax[q];
        if (a >= 0 && a < E) {
            int64_t j = a * fw + q % fw;
            st(dsrc, j, ld(dsrc, j) + ld(dy, q));
        }
    }
}

}  // extern "C"
