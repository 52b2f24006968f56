// Optimizer kernels of the Esper CUDA backend over a parameter arena: a
// model's parameters (and their gradients and optimizer state) live in
// one contiguous buffer each, so one launch updates every parameter (the
// multi-tensor apply of PyTorch's foreach optimizers, with the tensor list
// already flattened). The learning rate and step count are read from
// device memory (hyper = {lr, step} in fp64, as kernels.Backend says), so
// a captured step replays with the current values. found_inf, when not
// null, skips the update if it is non-zero (GradScaler).
#include <stdint.h>
#include "common.cuh"

extern "C" {

// sgd_f32 follows torch.optim.SGD: d = ±g + wd·p; with momentum buffer m
// (null when μ = 0): m = d on the first step (step ≤ 1), else
// μ·m + damp·d (damp = 1 − dampening); d = d + μ·m (Nesterov) or m;
// p −= lr·d.
__global__ void sgd_f32(float* p, const float* g, float* m, const double* hyper, const float* found_inf,
                        float mu, float damp, float wd, int nesterov, int maximize, int64_t n) {
    if (found_inf != nullptr && *found_inf != 0.f) return;
    float lr = (float)hyper[0];
    int first = hyper[1] <= 1.0;
    GRID_STRIDE(i, n) {
        float d = maximize ? -g[i] : g[i];
        if (wd != 0.f) d += wd * p[i];
        if (m != nullptr) {
            float b = first ? d : mu * m[i] + damp * d;
            m[i] = b;
            d = nesterov ? d + mu * b : b;
        }
        p[i] -= lr * d;
    }
}

// adamw_f32 follows torch.optim.AdamW (amsgrad off): p ·= 1 − lr·wd;
// m = β1·m + (1−β1)·g; v = β2·v + (1−β2)·g²;
// p −= lr/(1−β1^t) · m / (sqrt(v)/sqrt(1−β2^t) + eps). The scalar factors
// are formed in fp64 and rounded once, as the CPU backend does; c1 and c2
// are 1−β1 and 1−β2 rounded from fp64 by the caller.
__global__ void adamw_f32(float* p, const float* g, float* m, float* v, const double* hyper, const float* found_inf,
                          float b1, float b2, float c1, float c2, float eps, double wd, double beta1, double beta2,
                          int64_t n) {
    if (found_inf != nullptr && *found_inf != 0.f) return;
    double lr = hyper[0], t = hyper[1];
    float decay = (float)(1.0 - lr * wd);
    float step_size = (float)(lr / (1.0 - pow(beta1, t)));
    float bc2sqrt = (float)sqrt(1.0 - pow(beta2, t));
    GRID_STRIDE(i, n) {
        float gi = g[i];
        float pi = p[i] * decay;
        float mi = b1 * m[i] + c1 * gi;
        float vi = b2 * v[i] + c2 * gi * gi;
        m[i] = mi;
        v[i] = vi;
        p[i] = pi - step_size * (mi / (sqrtf(vi) / bc2sqrt + eps));
    }
}

// sumsq_f32 adds Σx² over x into *out (atomically; the caller zeroes
// out): the squared L2 norm of a gradient arena, one partial per block.
__global__ void sumsq_f32(float* out, const float* x, int64_t n) {
    __shared__ float part[32];
    float s = 0.f;
    GRID_STRIDE(i, n) s += x[i] * x[i];
    for (int o = 16; o > 0; o >>= 1) s += __shfl_down_sync(0xffffffff, s, o);
    int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
    if (lane == 0) part[w] = s;
    __syncthreads();
    if (w == 0) {
        s = lane < (int)((blockDim.x + 31) / 32) ? part[lane] : 0.f;
        for (int o = 16; o > 0; o >>= 1) s += __shfl_down_sync(0xffffffff, s, o);
        if (lane == 0) atomicAdd(out, s);
    }
}

// unscale_check_f32 multiplies x by *inv_scale and sets *found_inf to 1
// when any result is NaN or infinite (GradScaler's unscale); found_inf is
// only ever set, never cleared.
__global__ void unscale_check_f32(float* x, const float* inv_scale, float* found_inf, int64_t n) {
    float s = *inv_scale;
    GRID_STRIDE(i, n) {
        float y = x[i] * s;
        if (!isfinite(y)) *found_inf = 1.f;
        x[i] = y;
    }
}

}  // extern "C"
