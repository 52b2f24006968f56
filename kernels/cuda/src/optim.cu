// Optimizer kernels of the Esper CUDA backend, fp32: the steps over a
// parameter arena, the foreach helpers and the GradScaler's device-side
// state. In an arena a model's parameters (and their gradients and
// optimizer state) live in one contiguous buffer each, so one launch
// updates every parameter (the multi-tensor apply of PyTorch's foreach
// optimizers, with the tensor list already flattened). The learning rate and step count are read from
// device memory (hyper = {lr, step} in fp64, as kernels.Backend says), so
// a captured step replays with the current values. found_inf, when not
// null, skips the update if it is non-zero (GradScaler).
#include <stdint.h>
#include <math.h>
#include "common.cuh"

// The arena steps stream p, g and the state once per step: memory-bound
// (PERF.md W7 wants them at >= 80% of the device's copy bandwidth), so
// they move four floats per load and store (float4) when every buffer
// they touch is 16-byte aligned, which the allocator's blocks are; a
// view at an odd offset takes the scalar path. Both paths run the same
// per-element function, so the arithmetic (and every rounding) is the
// same whichever is taken; the n mod 4 elements after the float4 part
// take the scalar path too.

// aligned16, sgd_elem, sgd_apply, sgd_zero_grad and sgd_inc_block are in
// common.cuh: softmax.cu's linear_ce_sgd_f32 runs the same step.

// adamw_elem is adamw_f32's update of one element: p, m and v in place.
__device__ __forceinline__ void adamw_elem(float& p, float g, float& m, float& v, float b1, float b2, float c1,
                                           float c2, float eps, float decay, float step_size, float bc2sqrt) {
    float pi = p * decay;
    float mi = b1 * m + c1 * g;
    float vi = b2 * v + c2 * g * g;
    m = mi;
    v = vi;
    p = pi - step_size * (mi / (sqrtf(vi) / bc2sqrt + eps));
}

extern "C" {

// sgd_f32 follows torch.optim.SGD: d = ±g + wd·p; with momentum buffer m
// (null when μ = 0): m = d on the first step (step ≤ 1), else
// μ·m + damp·d (damp = 1 − dampening); d = d + μ·m (Nesterov) or m;
// p −= lr·d.
// With zero (SGDOptions.ZeroGrad) g is left zeroed, skipped or not.
__global__ void sgd_f32(float* p, float* g, float* m, const double* hyper, const float* found_inf, float mu,
                        float damp, float wd, int nesterov, int maximize, int zero, int64_t n) {
    if (found_inf != nullptr && *found_inf != 0.f) {
        if (zero) sgd_zero_grad(g, n);
        return;
    }
    float lr = (float)hyper[0];
    int first = hyper[1] <= 1.0;
    if (m != nullptr) {
        sgd_apply<true>(p, g, m, lr, mu, damp, wd, first, nesterov, maximize, zero, n);
    } else {
        sgd_apply<false>(p, g, m, lr, mu, damp, wd, first, nesterov, maximize, zero, n);
    }
}

// sgd_inc_f32 is increment (of the fp64 step hyper[1]) and sgd_f32 in one
// launch of one block (kernels.SGDIncrementer, small arenas):
// sgd_inc_block (common.cuh).
__global__ void sgd_inc_f32(float* p, float* g, float* m, double* hyper, const float* found_inf, float mu,
                            float damp, float wd, int nesterov, int maximize, int zero, int64_t n) {
    sgd_inc_block(p, g, m, hyper, found_inf, mu, damp, wd, nesterov, maximize, zero, n);
}

// clip_sumsq_f32 is the first launch of a clip by norm over one tensor
// (kernels.GradClipper): block b sums x[i]² over i = b·blockDim + t,
// striding by the whole grid, and writes its sum to part[b] — no atomics
// and nothing to zero first; the grid size is the caller's fixed
// function of n, so the sum is the same run to run. Squares and sums are
// fp64, as the CPU's (mt_sumsq_part_f32 says why).
__global__ void clip_sumsq_f32(double* part, const float* x, int64_t n) {
    double acc = 0.0;
    GRID_STRIDE(i, n) acc += (double)x[i] * x[i];
    acc = block_sum_d(acc);
    if (threadIdx.x == 0) part[blockIdx.x] = acc;
}

// clip_scale_f32 is the second: every block sums the nparts partials in
// order, in fp64, takes the square root (the norm, rounded to fp32,
// written by block 0) and the coefficient min(1, max_norm/(norm+eps)) in
// fp32 as BinaryScalar Add, reversed Div and Minimum compute it (a NaN
// norm gives a NaN coefficient), and scales x by it.
__global__ void clip_scale_f32(float* norm, float* x, const double* part, int64_t nparts, int64_t n, float max_norm,
                               float eps) {
    __shared__ float coef_sh;
    if (threadIdx.x == 0) {
        double sq = 0.0;
        for (int64_t b = 0; b < nparts; b++) sq += part[b];
        const float nv = (float)sqrt(sq);
        if (blockIdx.x == 0) norm[0] = nv;
        const float quo = max_norm / (nv + eps);
        coef_sh = (quo != quo || quo < 1.f) ? quo : 1.f;
    }
    __syncthreads();
    const float k = coef_sh;
    GRID_STRIDE(i, n) x[i] *= k;
}

// adamw_f32 follows torch.optim.AdamW (amsgrad off): p ·= 1 − lr·wd;
// m = β1·m + (1−β1)·g; v = β2·v + (1−β2)·g²;
// p −= lr/(1−β1^t) · m / (sqrt(v)/sqrt(1−β2^t) + eps). The scalar factors
// are formed in fp64 and rounded once, as the CPU backend does; c1 and c2
// are 1−β1 and 1−β2 rounded from fp64 by the caller. float4 where p, g,
// m and v are aligned, scalar for the rest (sgd_apply's scheme).
__global__ void adamw_f32(float* p, const float* g, float* m, float* v, const double* hyper, const float* found_inf,
                          float b1, float b2, float c1, float c2, float eps, double wd, double beta1, double beta2,
                          int64_t n) {
    if (found_inf != nullptr && *found_inf != 0.f) return;
    double lr = hyper[0], t = hyper[1];
    float decay = (float)(1.0 - lr * wd);
    float step_size = (float)(lr / (1.0 - pow(beta1, t)));
    float bc2sqrt = (float)sqrt(1.0 - pow(beta2, t));
    int64_t done = 0;
    if (aligned16(p) && aligned16(g) && aligned16(m) && aligned16(v)) {
        int64_t n4 = n >> 2;
        float4* p4 = (float4*)p;
        const float4* g4 = (const float4*)g;
        float4* m4 = (float4*)m;
        float4* v4 = (float4*)v;
        GRID_STRIDE(i, n4) {
            float4 pv = p4[i], gv = g4[i], mv = m4[i], vv = v4[i];
            adamw_elem(pv.x, gv.x, mv.x, vv.x, b1, b2, c1, c2, eps, decay, step_size, bc2sqrt);
            adamw_elem(pv.y, gv.y, mv.y, vv.y, b1, b2, c1, c2, eps, decay, step_size, bc2sqrt);
            adamw_elem(pv.z, gv.z, mv.z, vv.z, b1, b2, c1, c2, eps, decay, step_size, bc2sqrt);
            adamw_elem(pv.w, gv.w, mv.w, vv.w, b1, b2, c1, c2, eps, decay, step_size, bc2sqrt);
            m4[i] = mv;
            v4[i] = vv;
            p4[i] = pv;
        }
        done = n4 << 2;
    }
    for (int64_t i = done + (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (int64_t)blockDim.x * gridDim.x) {
        float pi = p[i], mi = m[i], vi = v[i];
        adamw_elem(pi, g[i], mi, vi, b1, b2, c1, c2, eps, decay, step_size, bc2sqrt);
        m[i] = mi;
        v[i] = vi;
        p[i] = pi;
    }
}

// clip_small_f32 is a clip by norm of one small tensor in one launch of
// one block (n at most the caller's clipSmall): the squares summed in
// fp64 per thread over a block stride, then across the block
// (block_sum_d), the norm and the coefficient as clip_scale_f32 forms
// them, written by thread 0, and x scaled by every thread.
__global__ void __launch_bounds__(1024, 1) clip_small_f32(float* norm, float* x, int64_t n, float max_norm, float eps) {
    __shared__ float coef_sh;
    double acc = 0.0;
    for (int64_t i = threadIdx.x; i < n; i += blockDim.x) acc += (double)x[i] * x[i];
    acc = block_sum_d(acc);
    if (threadIdx.x == 0) {
        const float nv = (float)sqrt(acc);
        norm[0] = nv;
        const float quo = max_norm / (nv + eps);
        coef_sh = (quo != quo || quo < 1.f) ? quo : 1.f;
    }
    __syncthreads();
    const float k = coef_sh;
    for (int64_t i = threadIdx.x; i < n; i += blockDim.x) x[i] *= k;
}

// norm_parts_into sets dst[i] (fp32, or fp64 when wide) to the square
// root of part[0..nparts) summed in fp64 in order (clip_sumsq_f32's
// partials of one tensor; 0 for none): ForeachNorm's per-tensor path.
__global__ void norm_parts_into(void* dst, int wide, int64_t i, const double* part, int64_t nparts) {
    if (blockIdx.x != 0 || threadIdx.x != 0) return;
    double sq = 0.0;
    for (int64_t b = 0; b < nparts; b++) sq += part[b];
    if (wide) {
        ((double*)dst)[i] = sqrt(sq);
    } else {
        ((float*)dst)[i] = (float)sqrt(sq);
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

// --- foreach helpers and the GradScaler's device-side state -----------
// Scalars that may change between replays of a captured step (the scale
// factor, found_inf, the counters) are read from device memory, never
// passed by value.

// scale_f32: x ·= *s.
__global__ void scale_f32(float* x, const float* s, int64_t n) {
    float k = *s;
    GRID_STRIDE(i, n) x[i] *= k;
}

// axpy_f32: y += alpha·x.
__global__ void axpy_f32(float* y, const float* x, float alpha, int64_t n) {
    GRID_STRIDE(i, n) y[i] += alpha * x[i];
}

// scaler_update_f32 is the GradScaler state machine (one thread): on
// found_inf the scale is multiplied by backoff and the tracker reset;
// otherwise the tracker counts up and after interval clean steps the
// scale grows by growth (unless that overflows) and the tracker resets.
// The tracker is an int32 count when tracker_i32 (optim.GradScaler's),
// else an fp32 one.
__global__ void scaler_update_f32(float* scale, void* tracker, int tracker_i32, const float* found_inf, double growth,
                                  double backoff, int64_t interval) {
    float* tf = (float*)tracker;
    int32_t* ti = (int32_t*)tracker;
    if (*found_inf != 0.f) {
        *scale = (float)((double)*scale * backoff);
        if (tracker_i32) *ti = 0; else *tf = 0.f;
        return;
    }
    double n = (tracker_i32 ? (double)*ti : (double)*tf) + 1.0;
    if (n >= (double)interval) {
        double g = (double)*scale * growth;
        if (isfinite(g) && isfinite((float)g)) *scale = (float)g;
        n = 0.0;
    }
    if (tracker_i32) *ti = (int32_t)n; else *tf = (float)n;
}

// increment: *counter += 1 unless *skip (optional) is non-zero; kind 0
// is an fp32 counter, 1 fp64, 2 int64.
__global__ void increment(void* counter, int kind, const float* skip) {
    if (skip && *skip != 0.f) return;
    switch (kind) {
    case 0: *(float*)counter += 1.f; break;
    case 1: *(double*)counter += 1.0; break;
    case 2: *(int64_t*)counter += 1; break;
    }
}

}  // extern "C"
