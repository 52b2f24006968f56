// Random kernels of the Esper CUDA backend: dropout, with the CPU
// backend's counter-based draw, bit for bit.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <stdint.h>
#include <math.h>
#include "common.cuh"

// mix64 is the splitmix64 finaliser (kernels/cpu/random.go).
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

extern "C" {

__global__ void dropout_f32(float* y, float* mask, const float* x, const int64_t* state, double p, int64_t n) {
    dropout(y, mask, x, state, p, n);
}
__global__ void dropout_bf16(__nv_bfloat16* y, __nv_bfloat16* mask, const __nv_bfloat16* x, const int64_t* state,
                             double p, int64_t n) {
    dropout(y, mask, x, state, p, n);
}
__global__ void dropout_advance(int64_t* state) { state[1]++; }

// fp16 (appended so that the entry points above keep their code and labels).
__global__ void dropout_f16(__half* y, __half* mask, const __half* x, const int64_t* state, double p, int64_t n) {
    dropout(y, mask, x, state, p, n);
}

}  // extern "C"
