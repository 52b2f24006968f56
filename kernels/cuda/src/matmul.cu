// The epilogue of the Esper CUDA backend's matrix products (the products
// themselves are cuBLAS calls): bias_act adds the bias along the last axis
// and applies the activation (unary_f, in common.cuh) in fp32 over the
// product that cuBLAS stored, in fp32 and bf16.
#include <cuda_bf16.h>
#include <stdint.h>
#include "common.cuh"

// bias_act is the epilogue of MatMulBias and MatMulBiasAct over d viewed
// as [rows, cols]: d = act(d + bias[col]) computed in fp32 (bias may be
// null; act < 0 means none). bias is fp32, or bf16 when bias_bf16.
template <typename T>
__device__ void bias_act(T* d, const void* bias, int bias_bf16, int act, int64_t cols, int64_t n) {
    GRID_STRIDE(i, n) {
        float v = ld(d, i);
        if (bias) {
            int64_t j = i % cols;
            v += bias_bf16 ? __bfloat162float(((const __nv_bfloat16*)bias)[j]) : ((const float*)bias)[j];
        }
        if (act >= 0) v = unary_f(act, v);
        st(d, i, v);
    }
}

extern "C" {

__global__ void bias_act_f32(float* d, const void* bias, int bias_bf16, int act, int64_t cols, int64_t n) {
    bias_act(d, bias, bias_bf16, act, cols, n);
}
__global__ void bias_act_bf16(__nv_bfloat16* d, const void* bias, int bias_bf16, int act, int64_t cols, int64_t n) {
    bias_act(d, bias, bias_bf16, act, cols, n);
}

}  // extern "C"
