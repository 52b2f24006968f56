// The data-movement half of 2-D convolution (NCHW) in fp32, bf16 and fp16:
// im2col unfolds the input windows into columns for cuBLAS, col2im folds
// column gradients back into the input gradient (one thread per input
// element gathering its taps: no atomics, deterministic), plus the bias
// add and the sum over the batch of per-sample weight gradients.
#include <cuda_bf16.h>
#include <stdint.h>
#include "common.cuh"

// Conv is the geometry of a convolution (the Go convGeom, word for word).
struct Conv {
    int64_t n, cin, h, w, kh, kw, ho, wo, sh, sw, ph, pw, dh, dw;
};

// im2col: cols[n, c, i, j, p] = x[n, c, oh·sh − ph + i·dh, ow·sw − pw + j·dw]
// (0 outside the plane) for output pixel p = (oh, ow): per sample and
// group a [cg·kh·kw, ho·wo] matrix, groups stacked.
template <typename T>
__device__ void im2col(T* cols, const T* x, Conv g) {
    int64_t P = g.ho * g.wo, total = g.n * g.cin * g.kh * g.kw * P;
    GRID_STRIDE(e, total) {
        int64_t p = e % P, r = e / P;
        int64_t j = r % g.kw, i = (r / g.kw) % g.kh, nc = r / (g.kw * g.kh);
        int64_t ih = (p / g.wo) * g.sh - g.ph + i * g.dh, iw = (p % g.wo) * g.sw - g.pw + j * g.dw;
        bool in = ih >= 0 && ih < g.h && iw >= 0 && iw < g.w;
        cols[e] = in ? x[(nc * g.h + ih) * g.w + iw] : T(0.f);
    }
}

// col2im: dx[n, c, ih, iw] = Σ over the taps (i, j) and output pixels
// that read it of cols[n, c, i, j, p].
template <typename T>
__device__ void col2im(T* dx, const T* cols, Conv g) {
    int64_t P = g.ho * g.wo, total = g.n * g.cin * g.h * g.w;
    GRID_STRIDE(e, total) {
        int64_t iw = e % g.w, ih = (e / g.w) % g.h, nc = e / (g.w * g.h);
        float s = 0.f;
        for (int64_t i = 0; i < g.kh; i++) {
            int64_t th = ih + g.ph - i * g.dh;
            if (th < 0 || th % g.sh != 0 || th / g.sh >= g.ho) continue;
            for (int64_t j = 0; j < g.kw; j++) {
                int64_t tw = iw + g.pw - j * g.dw;
                if (tw < 0 || tw % g.sw != 0 || tw / g.sw >= g.wo) continue;
                s += ld(cols, ((nc * g.kh + i) * g.kw + j) * P + (th / g.sh) * g.wo + tw / g.sw);
            }
        }
        st(dx, e, s);
    }
}

// bias_nchw: y[n, c, p] += bias[c].
template <typename T>
__device__ void bias_nchw(T* y, const T* bias, int64_t c, int64_t P, int64_t total) {
    GRID_STRIDE(e, total) st(y, e, ld(y, e) + ld(bias, (e / P) % c));
}

// sum_batches: d[j] = Σ_b s[b·m + j], in order over b.
template <typename T>
__device__ void sum_batches(T* d, const T* s, int64_t nb, int64_t m) {
    GRID_STRIDE(j, m) {
        float a = 0.f;
        for (int64_t b = 0; b < nb; b++) a += ld(s, b * m + j);
        st(d, j, a);
    }
}

// --- the affine epilogue of kernels.ConvAffineActer and ConvAffineActPooler

// ld_flt reads element i of an fp32 array, or of a bf16 one when bf16.
__device__ __forceinline__ float ld_flt(const void* p, int bf16, int64_t i) {
    return bf16 ? __bfloat162float(((const __nv_bfloat16*)p)[i]) : ((const float*)p)[i];
}

// SideFlag and SideCode read scale and shift for the epilogues: the fp32
// and bf16 entry points by their bf16 flag (ld_flt), the fp16 ones by a
// dtype code (ld_side: fp32, bf16 or fp16).
struct SideFlag {
    static __device__ __forceinline__ float at(const void* p, int f, int64_t i) { return ld_flt(p, f, i); }
};
struct SideCode {
    static __device__ __forceinline__ float at(const void* p, int c, int64_t i) { return ld_side(p, c, i); }
};

// epilogue_act is act(v·scale + shift): the activation unary_f, its ReLU
// max(v, +0) with NaN kept (kernels.Relu, as the CPU backend's epilogue).
__device__ __forceinline__ float epilogue_act(int act, float v, float scale, float shift) {
    v = v * scale + shift;
    if (act == U_RELU) return v > 0.f || v != v ? v : 0.f;
    return unary_f(act, v);
}

// round_to is v as a T element holds it (bf16 rounded to nearest even).
__device__ __forceinline__ float round_to(const float*, float v) { return v; }
__device__ __forceinline__ float round_to(const __nv_bfloat16*, float v) {
    return __bfloat162float(__float2bfloat16_rn(v));
}
__device__ __forceinline__ float round_to(const __half*, float v) { return __half2float(__float2half_rn(v)); }

// affine_act_nchw: y[n, c, p] = act(y[n, c, p]·scale[c] + shift[c]) over
// planes of P pixels, in place on the convolution's output; scale and
// shift are fp32, or bf16 where their flag says so (S reads them).
template <typename T, typename S = SideFlag>
__device__ void affine_act_nchw(T* y, const void* scale, int scale16, const void* shift, int shift16, int act,
                                int64_t c, int64_t P, int64_t total) {
    GRID_STRIDE(e, total) {
        int64_t ch = (e / P) % c;
        st(y, e, epilogue_act(act, ld(y, e), S::at(scale, scale16, ch), S::at(shift, shift16, ch)));
    }
}

// affine_act_pool2: one thread per output o of dst's planes (ho/2 ×
// wo/2): the 2×2, stride-2 max over y's planes (ho×wo, the convolution's
// output) of affine_act_nchw's values, which are never written: each
// rounded as a T element would hold it and compared as MaxPool2d compares
// (the first maximum in scan order, the first NaN at once).
template <typename T, typename S = SideFlag>
__device__ void affine_act_pool2(T* dst, const T* y, const void* scale, int scale16, const void* shift, int shift16,
                                 int act, int64_t c, int64_t ho, int64_t wo, int64_t pho, int64_t pwo, int64_t total) {
    GRID_STRIDE(o, total) {
        int64_t ow = o % pwo, oh = (o / pwo) % pho, pl = o / (pwo * pho);
        int64_t ch = pl % c;
        float sc = S::at(scale, scale16, ch), sh = S::at(shift, shift16, ch);
        const T* yp = y + pl * ho * wo;
        float best = 0.f;
        bool have = false;
        for (int k = 0; k < 4; k++) {
            float v = round_to(y, epilogue_act(act, ld(yp, (2 * oh + (k >> 1)) * wo + 2 * ow + (k & 1)), sc, sh));
            if (!have || v > best || v != v) {
                best = v;
                have = true;
                if (v != v) break;
            }
        }
        st(dst, o, best);
    }
}

extern "C" {

__global__ void im2col_f32(float* cols, const float* x, Conv g) { im2col(cols, x, g); }
__global__ void im2col_bf16(__nv_bfloat16* cols, const __nv_bfloat16* x, Conv g) { im2col(cols, x, g); }
__global__ void col2im_f32(float* dx, const float* cols, Conv g) { col2im(dx, cols, g); }
__global__ void col2im_bf16(__nv_bfloat16* dx, const __nv_bfloat16* cols, Conv g) { col2im(dx, cols, g); }
__global__ void bias_nchw_f32(float* y, const float* bias, int64_t c, int64_t P, int64_t total) {
    bias_nchw(y, bias, c, P, total);
}
__global__ void bias_nchw_bf16(__nv_bfloat16* y, const __nv_bfloat16* bias, int64_t c, int64_t P, int64_t total) {
    bias_nchw(y, bias, c, P, total);
}
__global__ void sum_batches_f32(float* d, const float* s, int64_t nb, int64_t m) { sum_batches(d, s, nb, m); }
__global__ void sum_batches_bf16(__nv_bfloat16* d, const __nv_bfloat16* s, int64_t nb, int64_t m) {
    sum_batches(d, s, nb, m);
}

// The epilogues of Conv2dAffineAct and Conv2dAffineActMaxPool2x2.
__global__ void affine_act_nchw_f32(float* y, const void* scale, int scale16, const void* shift, int shift16, int act,
                                    int64_t c, int64_t P, int64_t total) {
    affine_act_nchw(y, scale, scale16, shift, shift16, act, c, P, total);
}
__global__ void affine_act_nchw_bf16(__nv_bfloat16* y, const void* scale, int scale16, const void* shift, int shift16,
                                     int act, int64_t c, int64_t P, int64_t total) {
    affine_act_nchw(y, scale, scale16, shift, shift16, act, c, P, total);
}
__global__ void affine_act_pool2_f32(float* dst, const float* y, const void* scale, int scale16, const void* shift,
                                     int shift16, int act, int64_t c, int64_t ho, int64_t wo, int64_t pho,
                                     int64_t pwo, int64_t total) {
    affine_act_pool2(dst, y, scale, scale16, shift, shift16, act, c, ho, wo, pho, pwo, total);
}
__global__ void affine_act_pool2_bf16(__nv_bfloat16* dst, const __nv_bfloat16* y, const void* scale, int scale16,
                                      const void* shift, int shift16, int act, int64_t c, int64_t ho, int64_t wo,
                                      int64_t pho, int64_t pwo, int64_t total) {
    affine_act_pool2(dst, y, scale, scale16, shift, shift16, act, c, ho, wo, pho, pwo, total);
}

// --- fp16 (appended so that the entry points above keep their code and
// labels); scale and shift take ld_side's dtype codes.

__global__ void im2col_f16(__half* cols, const __half* x, Conv g) { im2col(cols, x, g); }
__global__ void col2im_f16(__half* dx, const __half* cols, Conv g) { col2im(dx, cols, g); }
__global__ void bias_nchw_f16(__half* y, const __half* bias, int64_t c, int64_t P, int64_t total) {
    bias_nchw(y, bias, c, P, total);
}
__global__ void sum_batches_f16(__half* d, const __half* s, int64_t nb, int64_t m) { sum_batches(d, s, nb, m); }
__global__ void affine_act_nchw_f16(__half* y, const void* scale, int scale_code, const void* shift, int shift_code,
                                    int act, int64_t c, int64_t P, int64_t total) {
    affine_act_nchw<__half, SideCode>(y, scale, scale_code, shift, shift_code, act, c, P, total);
}
__global__ void affine_act_pool2_f16(__half* dst, const __half* y, const void* scale, int scale_code,
                                     const void* shift, int shift_code, int act, int64_t c, int64_t ho, int64_t wo,
                                     int64_t pho, int64_t pwo, int64_t total) {
    affine_act_pool2<__half, SideCode>(dst, y, scale, scale_code, shift, shift_code, act, c, ho, wo, pho, pwo, total);
}

}  // extern "C"
