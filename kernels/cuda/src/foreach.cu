// Multi-tensor (foreach) helpers and the GradScaler's device-side state
// of the Esper CUDA backend, fp32. Scalars that may change between
// replays of a captured step (the scale factor, found_inf, the counters)
// are read from device memory, never passed by value.
#include <stdint.h>
#include <math.h>
#include "common.cuh"

extern "C" {

// scale_f32: x ·= *s.
__global__ void scale_f32(float* x, const float* s, int64_t n) {
    float k = *s;
    GRID_STRIDE(i, n) x[i] *= k;
}

// axpy_f32: y += alpha·x.
__global__ void axpy_f32(float* y, const float* x, float alpha, int64_t n) {
    GRID_STRIDE(i, n) y[i] += alpha * x[i];
}

// sqrt_into: dst[i] = sqrt(ss[i]) for i < n, dst fp32 or (wide) fp64.
__global__ void sqrt_into(void* dst, int wide, const float* ss, int64_t n) {
    GRID_STRIDE(i, n) {
        if (wide) ((double*)dst)[i] = sqrt((double)ss[i]);
        else ((float*)dst)[i] = sqrtf(ss[i]);
    }
}

// scaler_update_f32 is the GradScaler state machine (one thread): on
// found_inf the scale is multiplied by backoff and the tracker reset;
// otherwise the tracker counts up and after interval clean steps the
// scale grows by growth (unless that overflows) and the tracker resets.
__global__ void scaler_update_f32(float* scale, float* tracker, const float* found_inf, double growth, double backoff,
                                  int64_t interval) {
    if (*found_inf != 0.f) {
        *scale = (float)((double)*scale * backoff);
        *tracker = 0.f;
        return;
    }
    float n = *tracker + 1.f;
    if (n >= (float)interval) {
        double g = (double)*scale * growth;
        if (isfinite(g) && isfinite((float)g)) *scale = (float)g;
        *tracker = 0.f;
        return;
    }
    *tracker = n;
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
