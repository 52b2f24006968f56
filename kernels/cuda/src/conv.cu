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

// --- direct convolutions for small fp32 layers (conv.go's directConv):
// no columns buffer and no cuBLAS. For W4's CNN (1→8, 8→16 and 16→32
// channels on 28², 14² and 7² planes) im2col wrote 9·Cin columns per
// pixel for products of K = 9 to 144, and the per-sample strided GEMMs
// ran far below the GPU's rate; each layer took im2col + GEMM (+ col2im
// or sum) launches. Every output element here is summed by one thread
// (forward, input gradient) or one lane group in a fixed butterfly
// (weight gradient) in a fixed order: deterministic, a replay bitwise the
// eager call. The index arithmetic is 32-bit: the Go side takes this path
// only when every element count fits (directConv). Padding taps read 0
// and are multiplied like the others, as im2col's zeros are.

// DC_TILE is the output (forward) or input (gradient) channels a thread
// sums at once, its weights read from shared memory.
#define DC_TILE 8

// dc_sum: acc[c] (c < nc) is the convolution at output pixel (oh, ow) of
// output channel co0 + c, the input at xp (sample n's channels of the
// group), the weights at wp (ws + co0·kdim; [cout, cg, kh, kw]).
__device__ __forceinline__ void dc_sum(float* acc, const float* xp, const float* wp, const Conv& g, int cg, int kdim,
                                       int nc, int oh, int ow) {
    const int kh = (int)g.kh, kw = (int)g.kw, h = (int)g.h, w = (int)g.w;
#pragma unroll
    for (int c = 0; c < DC_TILE; c++) acc[c] = 0.f;
    for (int ci = 0; ci < cg; ci++, xp += h * w) {
        for (int i = 0; i < kh; i++) {
            const int ih = oh * (int)g.sh - (int)g.ph + i * (int)g.dh;
            const bool rin = ih >= 0 && ih < h;
            for (int j = 0; j < kw; j++, wp++) {
                const int iw = ow * (int)g.sw - (int)g.pw + j * (int)g.dw;
                const float v = rin && iw >= 0 && iw < w ? xp[ih * w + iw] : 0.f;
#pragma unroll
                for (int c = 0; c < DC_TILE; c++)
                    if (c < nc) acc[c] = fmaf(wp[c * kdim], v, acc[c]);
            }
        }
    }
}

// dc_epilogue is epilogue_act with the activations other than ReLU in a
// call (dc_act) rather than inlined for every channel of a tile, which
// tripled the kernels' PTX: the same arithmetic, so the same values.
__device__ __noinline__ float dc_act(int act, float v) { return unary_f(act, v); }
__device__ __forceinline__ float dc_epilogue(int act, float v, float scale, float shift) {
    v = v * scale + shift;
    if (act == U_RELU) return v > 0.f || v != v ? v : 0.f;
    return dc_act(act, v);
}

// DcTile is the (sample, group, first output channel, channel count)
// of a thread's work in conv_direct_f32 and conv_direct_pool_f32, from
// r = e / (pixels per plane): the sample varies fastest, then the tile of
// DC_TILE channels within a group, then the group.
struct DcTile {
    int n, gr, co0, nc;
};
__device__ __forceinline__ DcTile dc_tile(int r, int N, int tiles, int og) {
    DcTile t;
    const int tg = r / N;
    t.n = r % N;
    t.gr = tg / tiles;
    t.co0 = t.gr * og + (tg % tiles) * DC_TILE;
    t.nc = min(DC_TILE, t.gr * og + og - t.co0);
    return t;
}

// dc_load_weights copies the weights [cout, kdim] into shared memory.
__device__ __forceinline__ void dc_load_weights(float* ws, const float* wt, int n) {
    for (int i = threadIdx.x; i < n; i += blockDim.x) ws[i] = wt[i];
    __syncthreads();
}

// conv_direct_f32: y[n, co, p] = Σ_{ci, i, j} w[co, ci, i, j] · x[n, g·cg + ci,
// oh·sh − ph + i·dh, ow·sw − pw + j·dw] (+ bias[co]) for group g of co: a
// thread per (sample, output pixel) and tile of DC_TILE output channels
// of one group; the weights [cout, cg, kh, kw] in dynamic shared memory.
// With scale (kernels.ConvAffineActer, no bias) the output is
// epilogue_act(act, v, scale[co], shift[co]) instead, the side operands
// read by their dtype codes (ld_side), as affine_act_nchw applies it to
// the convolution's output.
extern "C" __global__ void conv_direct_f32(float* y, const float* x, const float* wt, const float* bias, Conv g,
                                           int groups, int cout, const void* scale, int scode, const void* shift,
                                           int hcode, int act) {
    extern __shared__ float ws[];
    const int cg = (int)g.cin / groups, og = cout / groups, kdim = cg * (int)(g.kh * g.kw);
    const int wo = (int)g.wo, P = (int)(g.ho * g.wo), N = (int)g.n, tiles = (og + DC_TILE - 1) / DC_TILE;
    dc_load_weights(ws, wt, cout * kdim);
    const int total = tiles * groups * N * P;
    for (int e = blockIdx.x * blockDim.x + threadIdx.x; e < total; e += blockDim.x * gridDim.x) {
        const int p = e % P;
        const DcTile t = dc_tile(e / P, N, tiles, og);
        float acc[DC_TILE];
        dc_sum(acc, x + ((size_t)t.n * g.cin + (size_t)t.gr * cg) * g.h * g.w, ws + t.co0 * kdim, g, cg, kdim, t.nc,
               p / wo, p % wo);
        float* yp = y + ((size_t)t.n * cout + t.co0) * P + p;
#pragma unroll
        for (int c = 0; c < DC_TILE; c++) {
            if (c >= t.nc) continue;
            float v = acc[c];
            if (bias) v += bias[t.co0 + c];
            if (scale) v = dc_epilogue(act, v, ld_side(scale, scode, t.co0 + c), ld_side(shift, hcode, t.co0 + c));
            yp[(size_t)c * P] = v;
        }
    }
}

// conv_direct_pool_f32: kernels.ConvAffineActPooler's dst [n, cout, ho/2,
// wo/2], the 2×2, stride-2 max of conv_direct_f32's epilogue values,
// compared as affine_act_pool2 compares them (the first maximum in scan
// order, the first NaN kept): a thread per (sample, pooled pixel) and
// tile of DC_TILE output channels, the four convolution outputs of its
// window computed in turn and never written.
extern "C" __global__ void conv_direct_pool_f32(float* dst, const float* x, const float* wt, Conv g, int groups,
                                                int cout, const void* scale, int scode, const void* shift, int hcode,
                                                int act) {
    extern __shared__ float ws[];
    const int cg = (int)g.cin / groups, og = cout / groups, kdim = cg * (int)(g.kh * g.kw);
    const int pwo = (int)g.wo / 2, PP = ((int)g.ho / 2) * pwo, N = (int)g.n, tiles = (og + DC_TILE - 1) / DC_TILE;
    dc_load_weights(ws, wt, cout * kdim);
    const int total = tiles * groups * N * PP;
    for (int e = blockIdx.x * blockDim.x + threadIdx.x; e < total; e += blockDim.x * gridDim.x) {
        const int q = e % PP;
        const DcTile t = dc_tile(e / PP, N, tiles, og);
        const int n = t.n, co0 = t.co0, nc = t.nc;
        const float* xp = x + ((size_t)n * g.cin + (size_t)t.gr * cg) * g.h * g.w;
        float best[DC_TILE];
        bool nan[DC_TILE];
        for (int k = 0; k < 4; k++) {
            float acc[DC_TILE];
            dc_sum(acc, xp, ws + co0 * kdim, g, cg, kdim, nc, 2 * (q / pwo) + (k >> 1), 2 * (q % pwo) + (k & 1));
#pragma unroll
            for (int c = 0; c < DC_TILE; c++) {
                if (c >= nc) continue;
                const float v = dc_epilogue(act, acc[c], ld_side(scale, scode, co0 + c), ld_side(shift, hcode, co0 + c));
                if (k == 0 || (!nan[c] && (v > best[c] || v != v))) {
                    best[c] = v;
                    nan[c] = v != v;
                }
            }
        }
        float* dp = dst + ((size_t)n * cout + co0) * PP + q;
#pragma unroll
        for (int c = 0; c < DC_TILE; c++)
            if (c < nc) dp[(size_t)c * PP] = best[c];
    }
}

// conv_direct_dx_f32: dx[n, g·cg + ci, ih, iw] = Σ_{co in g, i, j} w[co, ci, i, j]
// · dy[n, co, oh, ow] over the output pixels (oh, ow) whose tap (i, j)
// reads (ih, iw): a thread per (sample, input pixel) and tile of DC_TILE
// input channels of one group, the weights in dynamic shared memory.
// dx is overwritten.
extern "C" __global__ void conv_direct_dx_f32(float* dx, const float* dy, const float* wt, Conv g, int groups,
                                              int cout) {
    extern __shared__ float ws[];
    const int cg = (int)g.cin / groups, og = cout / groups, kh = (int)g.kh, kw = (int)g.kw;
    const int kk = kh * kw, h = (int)g.h, w = (int)g.w, ho = (int)g.ho, wo = (int)g.wo, P = ho * wo;
    const int sh = (int)g.sh, sw = (int)g.sw, N = (int)g.n, tiles = (cg + DC_TILE - 1) / DC_TILE;
    dc_load_weights(ws, wt, cout * cg * kk);
    const int total = tiles * groups * N * h * w;
    for (int e = blockIdx.x * blockDim.x + threadIdx.x; e < total; e += blockDim.x * gridDim.x) {
        const int q = e % (h * w), r = e / (h * w), n = r % N, tg = r / N;
        const int gr = tg / tiles, cl0 = (tg % tiles) * DC_TILE;
        const int nc = min(DC_TILE, cg - cl0);
        const int ih = q / w, iw = q % w;
        float acc[DC_TILE];
#pragma unroll
        for (int c = 0; c < DC_TILE; c++) acc[c] = 0.f;
        for (int co = gr * og; co < gr * og + og; co++) {
            const float* dyp = dy + ((size_t)n * cout + co) * P;
            const float* wp = ws + (co * cg + cl0) * kk;
            for (int i = 0; i < kh; i++) {
                const int th = ih + (int)g.ph - i * (int)g.dh;
                if (th < 0 || th % sh != 0 || th / sh >= ho) continue;
                for (int j = 0; j < kw; j++) {
                    const int tw = iw + (int)g.pw - j * (int)g.dw;
                    if (tw < 0 || tw % sw != 0 || tw / sw >= wo) continue;
                    const float gv = dyp[(th / sh) * wo + tw / sw];
#pragma unroll
                    for (int c = 0; c < DC_TILE; c++)
                        if (c < nc) acc[c] = fmaf(wp[c * kk + i * kw + j], gv, acc[c]);
                }
            }
        }
        float* dp = dx + (((size_t)n * g.cin + gr * cg + cl0) * h + ih) * w + iw;
#pragma unroll
        for (int c = 0; c < DC_TILE; c++)
            if (c < nc) dp[(size_t)c * h * w] = acc[c];
    }
}

// conv_direct_dw_f32: per[n, co, k] = Σ_p dy[n, co, p] · x[n, g·cg + ci, tap
// (i, j) of output pixel p] for k = (ci, i, j): the per-sample weight
// gradients, added over the samples in order by the launch's tail (with
// counters) or by sum_batches after it. Block
// (n, chunk) holds sample n's dy [cout, P] and x [cin, h, w] in dynamic
// shared memory; each output is summed by `lanes` lanes of a warp (a
// power of two up to 32) striding over the pixels, then added in a fixed
// xor butterfly. Every thread of a block runs the same rounds, so that a
// whole warp always takes part in the shuffles.
extern "C" __global__ void conv_direct_dw_f32(float* per, const float* x, const float* dy, Conv g, int groups,
                                              int cout, int lanes, float* dw, int acc, int* counters) {
    extern __shared__ float sm[];
    const int cg = (int)g.cin / groups, og = cout / groups, kh = (int)g.kh, kw = (int)g.kw;
    const int kdim = cg * kh * kw, h = (int)g.h, w = (int)g.w, wo = (int)g.wo, P = (int)(g.ho * g.wo);
    const int M = cout * kdim, n = blockIdx.x;
    float* sdy = sm;
    float* sx = sm + cout * P;
    const float* gdy = dy + (size_t)n * cout * P;
    const float* gx = x + (size_t)n * g.cin * h * w;
    for (int i = threadIdx.x; i < cout * P; i += blockDim.x) sdy[i] = gdy[i];
    for (int i = threadIdx.x; i < (int)g.cin * h * w; i += blockDim.x) sx[i] = gx[i];
    __syncthreads();
    const int G = blockDim.x / lanes, gi = threadIdx.x / lanes, lane = threadIdx.x % lanes;
    for (int base = blockIdx.y * G; base < M; base += G * gridDim.y) {
        const int o = base + gi;
        float a = 0.f;
        if (o < M) {
            const int co = o / kdim, k = o % kdim;
            const int ci = (co / og) * cg + k / (kh * kw), i = (k / kw) % kh, j = k % kw;
            const float* dyp = sdy + co * P;
            const float* xp = sx + ci * h * w;
            for (int p = lane; p < P; p += lanes) {
                const int ih = (p / wo) * (int)g.sh - (int)g.ph + i * (int)g.dh;
                const int iw = (p % wo) * (int)g.sw - (int)g.pw + j * (int)g.dw;
                const float v = ih >= 0 && ih < h && iw >= 0 && iw < w ? xp[ih * w + iw] : 0.f;
                a = fmaf(dyp[p], v, a);
            }
        }
        for (int off = lanes >> 1; off > 0; off >>= 1) a += __shfl_xor_sync(0xffffffffu, a, off);
        if (o < M && lane == 0) per[(size_t)n * M + o] = a;
    }
    if (counters == nullptr) return;  // sum_batches adds the samples
    // The tail: the block that writes chunk y's outputs for the last of
    // the gridDim.x samples (counted in counters[y] after a fence) adds
    // them over the samples as sum_batches does, in its order (rows b ≡
    // r mod SUM_ROWS in order, then the SUM_ROWS partials in r order; the
    // per-sample values read from L2), into dw, or adds them to it with
    // acc; then it sets counters[y] back to 0.
    if (!last_block(counters, blockIdx.y, (int)gridDim.x)) return;
    const int N = (int)gridDim.x;
    for (int base = blockIdx.y * G; base < M; base += G * gridDim.y) {
        const int o = base + (int)threadIdx.x;
        if ((int)threadIdx.x >= G || o >= M) continue;
        float t = 0.f;
        for (int r = 0; r < SUM_ROWS; r++) {
            float a = 0.f;
            for (int b = r; b < N; b += SUM_ROWS) a += __ldcg(per + (size_t)b * M + o);
            t = r == 0 ? a : t + a;
        }
        st(dw, o, acc ? acc_add(dw, o, t) : t);
    }
    if (threadIdx.x == 0) counters[blockIdx.y] = 0;
}
