// Elementwise kernels of the Esper CUDA backend: fill, casts, unary and
// binary ops over contiguous buffers, in fp32 and bf16 (bf16 math is done
// in fp32). Every kernel is a grid-stride loop over n elements, so any
// launch shape covers any n; the Go side picks the shape.
#include <cuda_bf16.h>
#include <stdint.h>

#define GRID_STRIDE(i, n) \
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < (n); \
         i += (int64_t)blockDim.x * gridDim.x)

// Unary op codes: kernels.UnaryOp's values, in its order.
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
    case U_SIGN: return x > 0.f ? 1.f : (x < 0.f ? -1.f : 0.f);
    case U_RELU: return x > 0.f ? x : 0.f;
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

// Binary op codes: kernels.BinaryOp's arithmetic values, in its order.
enum { B_ADD = 0, B_SUB, B_MUL, B_DIV, B_POW, B_MAX, B_MIN };

__device__ __forceinline__ float binary_f(int op, float a, float b) {
    switch (op) {
    case B_ADD: return a + b;
    case B_SUB: return a - b;
    case B_MUL: return a * b;
    case B_DIV: return a / b;
    case B_POW: return powf(a, b);
    case B_MAX: return (a != a || a > b) ? a : b;  // NaN propagates, as torch.maximum
    case B_MIN: return (a != a || a < b) ? a : b;
    }
    return a;
}

extern "C" {

__global__ void fill_f32(float* d, float v, int64_t n) {
    GRID_STRIDE(i, n) d[i] = v;
}

__global__ void fill_bf16(__nv_bfloat16* d, float v, int64_t n) {
    __nv_bfloat16 b = __float2bfloat16_rn(v);
    GRID_STRIDE(i, n) d[i] = b;
}

__global__ void cast_f32_bf16(__nv_bfloat16* d, const float* x, int64_t n) {
    GRID_STRIDE(i, n) d[i] = __float2bfloat16_rn(x[i]);
}

__global__ void cast_bf16_f32(float* d, const __nv_bfloat16* x, int64_t n) {
    GRID_STRIDE(i, n) d[i] = __bfloat162float(x[i]);
}

__global__ void unary_f32(int op, float* d, const float* x, int64_t n) {
    GRID_STRIDE(i, n) d[i] = unary_f(op, x[i]);
}

__global__ void unary_bf16(int op, __nv_bfloat16* d, const __nv_bfloat16* x, int64_t n) {
    GRID_STRIDE(i, n) d[i] = __float2bfloat16_rn(unary_f(op, __bfloat162float(x[i])));
}

// binary_*: d[i] = a[i·sa] op b[i·sb], with sa, sb ∈ {0, 1}: both
// operands full, or one a scalar broadcast over the other.
__global__ void binary_f32(int op, float* d, const float* a, int64_t sa, const float* b, int64_t sb, int64_t n) {
    GRID_STRIDE(i, n) d[i] = binary_f(op, a[i * sa], b[i * sb]);
}

__global__ void binary_bf16(int op, __nv_bfloat16* d, const __nv_bfloat16* a, int64_t sa,
                            const __nv_bfloat16* b, int64_t sb, int64_t n) {
    GRID_STRIDE(i, n) d[i] = __float2bfloat16_rn(binary_f(op, __bfloat162float(a[i * sa]), __bfloat162float(b[i * sb])));
}

// binary_f32_vec4 is binary_f32 for full operands whose buffers are
// 16-byte aligned and n a multiple of 4: one 16-byte load per operand.
__global__ void binary_f32_vec4(int op, float4* d, const float4* a, const float4* b, int64_t n4) {
    GRID_STRIDE(i, n4) {
        float4 x = a[i], y = b[i], r;
        r.x = binary_f(op, x.x, y.x);
        r.y = binary_f(op, x.y, y.y);
        r.z = binary_f(op, x.z, y.z);
        r.w = binary_f(op, x.w, y.w);
        d[i] = r;
    }
}

}  // extern "C"
