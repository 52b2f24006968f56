// The data-movement half of 2-D convolution (NCHW) in fp32 and bf16:
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

}  // extern "C"
