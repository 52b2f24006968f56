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

// fits32 says a geometry's index arithmetic fits 32-bit ints (every
// element count below 2^30, so that a grid-stride step cannot overflow):
// the kernels below then divide in 32 bits, several times cheaper than
// the 64-bit divisions, which dominated im2col (18 µs per launch in W4's
// small CNN on an H200).
__device__ __forceinline__ bool fits32(const Conv& g) {
    const int64_t lim = (int64_t)1 << 30;
    return g.n * g.cin * g.kh * g.kw * g.ho * g.wo < lim && g.n * g.cin * g.h * g.w < lim;
}

// im2col: cols[n, c, i, j, p] = x[n, c, oh·sh − ph + i·dh, ow·sw − pw + j·dw]
// (0 outside the plane) for output pixel p = (oh, ow): per sample and
// group a [cg·kh·kw, ho·wo] matrix, groups stacked. I is the index type.
template <typename T, typename I>
__device__ void im2col_at(T* cols, const T* x, Conv g) {
    const I P = (I)(g.ho * g.wo), wo = (I)g.wo, kh = (I)g.kh, kw = (I)g.kw, h = (I)g.h, w = (I)g.w;
    const I total = (I)(g.n * g.cin) * kh * kw * P;
    for (I e = (I)blockIdx.x * (I)blockDim.x + (I)threadIdx.x; e < total; e += (I)blockDim.x * (I)gridDim.x) {
        I p = e % P, r = e / P;
        I j = r % kw, i = (r / kw) % kh, nc = r / (kw * kh);
        I ih = (p / wo) * (I)g.sh - (I)g.ph + i * (I)g.dh, iw = (p % wo) * (I)g.sw - (I)g.pw + j * (I)g.dw;
        bool in = ih >= 0 && ih < h && iw >= 0 && iw < w;
        cols[e] = in ? x[(nc * h + ih) * w + iw] : T(0.f);
    }
}
template <typename T>
__device__ void im2col(T* cols, const T* x, Conv g) {
    if (fits32(g))
        im2col_at<T, int>(cols, x, g);
    else
        im2col_at<T, int64_t>(cols, x, g);
}

// col2im: dx[n, c, ih, iw] = Σ over the taps (i, j) and output pixels
// that read it of cols[n, c, i, j, p]. I is the index type.
template <typename T, typename I>
__device__ void col2im_at(T* dx, const T* cols, Conv g) {
    const I P = (I)(g.ho * g.wo), ho = (I)g.ho, wo = (I)g.wo, kh = (I)g.kh, kw = (I)g.kw, h = (I)g.h, w = (I)g.w;
    const I sh = (I)g.sh, sw = (I)g.sw, total = (I)(g.n * g.cin) * h * w;
    for (I e = (I)blockIdx.x * (I)blockDim.x + (I)threadIdx.x; e < total; e += (I)blockDim.x * (I)gridDim.x) {
        I iw = e % w, ih = (e / w) % h, nc = e / (w * h);
        float s = 0.f;
        for (I i = 0; i < kh; i++) {
            I th = ih + (I)g.ph - i * (I)g.dh;
            if (th < 0 || th % sh != 0 || th / sh >= ho) continue;
            for (I j = 0; j < kw; j++) {
                I tw = iw + (I)g.pw - j * (I)g.dw;
                if (tw < 0 || tw % sw != 0 || tw / sw >= wo) continue;
                s += ld(cols, ((nc * kh + i) * kw + j) * P + (th / sh) * wo + tw / sw);
            }
        }
        st(dx, e, s);
    }
}
template <typename T>
__device__ void col2im(T* dx, const T* cols, Conv g) {
    if (fits32(g))
        col2im_at<T, int>(dx, cols, g);
    else
        col2im_at<T, int64_t>(dx, cols, g);
}

// bias_nchw: y[n, c, p] += bias[c].
template <typename T>
__device__ void bias_nchw(T* y, const T* bias, int64_t c, int64_t P, int64_t total) {
    GRID_STRIDE(e, total) st(y, e, ld(y, e) + ld(bias, (e / P) % c));
}

// sum_batches: d[j] = Σ_b s[b·m + j] for blocks of (32, SUM_ROWS)
// threads: thread (x, y) of block k sums column j = 32·k + x over the
// rows b = y, y + SUM_ROWS, … in order, and the SUM_ROWS partials are
// added in y order through shared memory (a fixed order: deterministic).
// A thread per column summing all nb rows alone left the GPU idle for
// want of loads in flight (17 µs for 128 rows of 576 on an H200).
// With acc (kernels.ParamGradAccumulator) the sum is added to d instead:
// rounded to T first, then added as Binary Add adds it (acc_add).
#define SUM_ROWS 8
template <typename T>
__device__ void sum_batches(T* d, const T* s, int64_t nb, int64_t m, int acc) {
    __shared__ float part[SUM_ROWS][33];
    int64_t j = (int64_t)blockIdx.x * 32 + threadIdx.x;
    float a = 0.f;
    if (j < m)
        for (int64_t b = threadIdx.y; b < nb; b += SUM_ROWS) a += ld(s, b * m + j);
    part[threadIdx.y][threadIdx.x] = a;
    __syncthreads();
    if (threadIdx.y == 0 && j < m) {
        float t = part[0][threadIdx.x];
        for (int y = 1; y < SUM_ROWS; y++) t += part[y][threadIdx.x];
        st(d, j, acc ? acc_add(d, j, t) : t);
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
__global__ void sum_batches_f32(float* d, const float* s, int64_t nb, int64_t m, int acc) {
    sum_batches(d, s, nb, m, acc);
}
__global__ void sum_batches_bf16(__nv_bfloat16* d, const __nv_bfloat16* s, int64_t nb, int64_t m, int acc) {
    sum_batches(d, s, nb, m, acc);
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
__global__ void sum_batches_f16(__half* d, const __half* s, int64_t nb, int64_t m, int acc) {
    sum_batches(d, s, nb, m, acc);
}
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
