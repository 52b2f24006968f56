// Dropout and layer norm kernels of the Esper CUDA backend.
#include <cuda_bf16.h>
#include <stdint.h>
#include <math.h>
#include "common.cuh"

// --- dropout: the CPU backend's counter-based draw, bit for bit ---------

// mix64 is the splitmix64 finaliser (kernels/cpu/dropout.go).
__device__ __forceinline__ uint64_t mix64(uint64_t z) {
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

#define GOLDEN 0x9e3779b97f4a7c15ULL

// dropout_*: element i is kept (scaled by 1/(1−p)) when its uniform draw
// u(seed, counter, i) ≥ p; state = {seed, counter} is read here and
// advanced by dropout_advance, launched after on the same stream.
template <typename T>
__device__ void dropout(T* y, T* mask, const T* x, const int64_t* state, double p, int64_t n) {
    uint64_t key = mix64((uint64_t)state[0] ^ mix64((uint64_t)state[1] + GOLDEN));
    float scale = p < 1.0 ? (float)(1.0 / (1.0 - p)) : 0.f;
    GRID_STRIDE(i, n) {
        double u = (double)(mix64(key + (uint64_t)i * GOLDEN) >> 11) * (1.0 / 9007199254740992.0);
        float m = u < p ? 0.f : scale;
        if (mask) st(mask, i, m);
        st(y, i, ld(x, i) * m);
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

__global__ void dropout_f32(float* y, float* mask, const float* x, const int64_t* state, double p, int64_t n) {
    dropout(y, mask, x, state, p, n);
}
__global__ void dropout_bf16(__nv_bfloat16* y, __nv_bfloat16* mask, const __nv_bfloat16* x, const int64_t* state,
                             double p, int64_t n) {
    dropout(y, mask, x, state, p, n);
}
__global__ void dropout_advance(int64_t* state) { state[1]++; }

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
