// Elementwise kernels of the Esper CUDA backend: fill, casts, unary ops
// (unary_f, in common.cuh) and their derivatives, clamp, binary ops over contiguous buffers, and
// the strided forms (broadcasting binary ops and comparisons, where,
// copies between any views, copy_blocks' several 2-D blocks in one
// launch), in fp32, bf16 and fp16 (half math is done in fp32). Every
// kernel is a grid-stride loop over n elements, so any launch shape
// covers any n; the Go side picks the shape.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <stdint.h>
#include "common.cuh"

// unary_bwd_f is dy·op'(x) with kernels/cpu's formulas; y = op(x) when
// has_y (for the ops that reuse their output), else x alone is read.
__device__ __forceinline__ float unary_bwd_f(int op, float x, float y, int has_y, float g) {
    switch (op) {
    case U_NEG: return -g;
    case U_ABS: return x > 0.f ? g : (x < 0.f ? -g : 0.f);
    case U_EXP: return g * (has_y ? y : expf(x));
    case U_LOG: return g / x;
    case U_SQRT: return g / (2.f * (has_y ? y : sqrtf(x)));
    case U_RSQRT: {
        float r = has_y ? y : 1.f / sqrtf(x);
        return -0.5f * g * r * r * r;
    }
    case U_SQUARE: return 2.f * x * g;
    case U_RECIP: {
        float r = has_y ? y : 1.f / x;
        return -g * r * r;
    }
    case U_SIGN: return 0.f;
    case U_RELU: return x > 0.f ? g : 0.f;  // +0 even for a NaN dy, as the CPU's mask
    case U_GELU_TANH: {                      // PyTorch's GeluBackward (approximate="tanh")
        const float k = 0.7978845608028654f, kappa = 0.044715f;
        float xsq = x * x, t = tanhf(k * (x + kappa * xsq * x));
        return g * (0.5f * (1.f + t) + 0.5f * x * (1.f - t * t) * k * (1.f + 3.f * kappa * xsq));
    }
    case U_GELU_ERF: {
        float cdf = 0.5f * (1.f + erff(x * 0.7071067811865476f));
        float pdf = expf(-0.5f * x * x) * 0.3989422804014327f;  // 1/sqrt(2 pi)
        return g * (cdf + x * pdf);
    }
    case U_SILU: {
        float sg = 1.f / (1.f + expf(-x));
        return g * sg * (1.f + x * (1.f - sg));
    }
    case U_SIGMOID: {
        float sg = has_y ? y : 1.f / (1.f + expf(-x));
        return g * sg * (1.f - sg);
    }
    case U_TANH: {
        float t = has_y ? y : tanhf(x);
        return g * (1.f - t * t);
    }
    case U_SOFTPLUS: {
        if (x > 20.f) return g;
        float z = expf(x);
        return g * z / (z + 1.f);
    }
    }
    return g;
}

// Binary op codes: kernels.BinaryOp's values, in its order (the
// comparisons, from B_EQ on, write bool).
enum { B_ADD = 0, B_SUB, B_MUL, B_DIV, B_POW, B_MAX, B_MIN, B_EQ, B_NE, B_LT, B_LE, B_GT, B_GE };

template <typename C>
__device__ __forceinline__ bool compare_f(int op, C a, C b) {
    switch (op) {
    case B_EQ: return a == b;
    case B_NE: return a != b;
    case B_LT: return a < b;
    case B_LE: return a <= b;
    case B_GT: return a > b;
    case B_GE: return a >= b;
    }
    return false;
}

__device__ __forceinline__ float pw(float a, float b) { return powf(a, b); }
__device__ __forceinline__ double pw(double a, double b) { return pow(a, b); }

// binary_f is a op b in the compute type C (float, or double for fp64).
template <typename C>
__device__ __forceinline__ C binary_f(int op, C a, C b) {
    switch (op) {
    case B_ADD: return a + b;
    case B_SUB: return a - b;
    case B_MUL: return a * b;
    case B_DIV: return a / b;
    case B_POW: return pw(a, b);
    case B_MAX: return (a != a || a > b) ? a : b;  // NaN propagates, as torch.maximum
    case B_MIN: return (a != a || a < b) ? a : b;
    }
    return a;
}

// Geom is the layout of a strided launch (the Go geom, word for word):
// up to MAX_OPS operands walked over one shape of rank ≤ MAX_RANK, each
// with its own element strides (0 along a broadcast axis). Element i of
// the row-major order of shape sits at Σ coord_d·st[k][d] in operand k.
#define MAX_RANK 6
#define MAX_OPS 4
struct Geom {
    int64_t rank;
    int64_t shape[MAX_RANK];
    int64_t st[MAX_OPS][MAX_RANK];
};

// geom_offsets writes the offsets of element i in the first nops operands.
__device__ __forceinline__ void geom_offsets(const Geom& g, int64_t i, int nops, int64_t* off) {
    for (int k = 0; k < nops; k++) off[k] = 0;
    for (int d = (int)g.rank - 1; d >= 0; d--) {
        int64_t n = g.shape[d], c = i % n;
        i /= n;
        for (int k = 0; k < nops; k++) off[k] += c * g.st[k][d];
    }
}

// unary_bwd: dx = dy·op'(x) (x or y may be null when the op does without).
template <typename T>
__device__ void unary_bwd(int op, T* dx, const T* x, const T* y, const T* dy, int64_t n) {
    GRID_STRIDE(i, n) {
        float xv = x ? ld(x, i) : 0.f, yv = y ? ld(y, i) : 0.f;
        st(dx, i, unary_bwd_f(op, xv, yv, y != nullptr, ld(dy, i)));
    }
}

// clamp: min(max(x, lo), hi) with NaN kept, as torch.clamp.
template <typename T>
__device__ void clamp(T* d, const T* x, typename Compute<T>::type lo, typename Compute<T>::type hi, int64_t n) {
    GRID_STRIDE(i, n) {
        typename Compute<T>::type v = ld(x, i);
        if (v < lo) v = lo;
        if (v > hi) v = hi;
        st(d, i, v);
    }
}

// binary_nd: operands 0 (d, contiguous in practice), 1 (a), 2 (b) of g;
// mode 0 is a op b, 1 is a op s, 2 is s op a (b unused then). Comparisons
// write one byte (bool) per element, arithmetic a T.
template <typename T>
__device__ void binary_nd(int op, void* d, const T* a, const T* b, typename Compute<T>::type s, int mode, const Geom& g,
                          int64_t n) {
    typedef typename Compute<T>::type C;
    GRID_STRIDE(i, n) {
        int64_t o[3];
        geom_offsets(g, i, 3, o);
        C x = ld(a, o[1]), y = mode == 0 ? ld(b, o[2]) : s;
        if (mode == 2) {
            C t = x;
            x = y;
            y = t;
        }
        if (op >= B_EQ) {
            ((uint8_t*)d)[o[0]] = compare_f(op, x, y);
        } else {
            st((T*)d, o[0], binary_f(op, x, y));
        }
    }
}

// where_nd: d = c ? a : b over operands d, c (bool bytes), a, b of g.
template <typename T>
__device__ void where_nd(T* d, const uint8_t* c, const T* a, const T* b, const Geom& g, int64_t n) {
    GRID_STRIDE(i, n) {
        int64_t o[4];
        geom_offsets(g, i, 4, o);
        d[o[0]] = c[o[1]] ? a[o[2]] : b[o[3]];
    }
}

// copy_nd: d = s element by element over operands d, s of g, converting
// between the element types (raw words when they are the same).
__device__ __forceinline__ float conv(float v, float*) { return v; }
__device__ __forceinline__ __nv_bfloat16 conv(float v, __nv_bfloat16*) { return __float2bfloat16_rn(v); }
__device__ __forceinline__ float conv(__nv_bfloat16 v, float*) { return __bfloat162float(v); }
__device__ __forceinline__ __half conv(float v, __half*) { return __float2half_rn(v); }
__device__ __forceinline__ float conv(__half v, float*) { return __half2float(v); }

template <typename D, typename S>
__device__ void copy_nd(D* d, const S* s, const Geom& g, int64_t n) {
    GRID_STRIDE(i, n) {
        int64_t o[2];
        geom_offsets(g, i, 2, o);
        d[o[0]] = conv(s[o[1]], (D*)nullptr);
    }
}

template <typename W>
__device__ void copy_raw_nd(W* d, const W* s, const Geom& g, int64_t n) {
    GRID_STRIDE(i, n) {
        int64_t o[2];
        geom_offsets(g, i, 2, o);
        d[o[0]] = s[o[1]];
    }
}

// CopyBlocks is copy_blocks's parameter (the Go cbPack writes it, word
// for word; byte offsets on the right): n ≤ CB_MAX blocks of unit-byte
// words (unit 1, 2, 4, 8 or 16; every address, width and row stride of
// the launch a multiple of it), block t copying rows rows of width words
// each from src (its rows sld words apart) to dst (dld words apart). A
// concatenation into a contiguous tensor is one block per source (its
// rows go to one column range of dst's rows).
#define CB_MAX 32
struct CopyBlock {
    uint64_t src, dst;    // +0, +8
    int64_t rows, width;  // +16, +24
    int64_t sld, dld;     // +32, +40 (48 bytes a block)
};
struct CopyBlocks {
    int64_t n, unit;     // 0, 8
    CopyBlock b[CB_MAX];  // 16 + 48·t (1552 bytes in all)
};

// copy_block copies block b in words of type W over the x dimension of
// the grid (a grid-stride loop over its rows·width words; one row alone
// is a flat copy, rows·width below 2^32 divides in 32 bits).
template <typename W>
__device__ __forceinline__ void copy_block(const W* s, W* d, int64_t rows, int64_t width, int64_t sld, int64_t dld) {
    const int64_t n = rows * width;
    if (rows == 1) {
        GRID_STRIDE(i, n) d[i] = s[i];
    } else if (n <= (int64_t)UINT32_MAX) {
        const uint32_t w = (uint32_t)width;
        GRID_STRIDE(i, n) {
            const uint32_t r = (uint32_t)i / w, c = (uint32_t)i - r * w;
            d[(int64_t)r * dld + c] = s[(int64_t)r * sld + c];
        }
    } else {
        GRID_STRIDE(i, n) {
            const int64_t r = i / width, c = i - r * width;
            d[r * dld + c] = s[r * sld + c];
        }
    }
}

// Dtype codes of the converting copy (the Go dtypeCode, value for value).
enum { D_F64 = 0, D_F32, D_BF16, D_F16, D_I64, D_I32, D_BOOL };

// ld_any reads element i of a buffer of dtype code dt as a double.
__device__ __forceinline__ double ld_any(const void* p, int dt, int64_t i) {
    switch (dt) {
    case D_F64: return ((const double*)p)[i];
    case D_F32: return ((const float*)p)[i];
    case D_BF16: return __bfloat162float(((const __nv_bfloat16*)p)[i]);
    case D_F16: return __half2float(((const __half*)p)[i]);
    case D_I64: return (double)((const int64_t*)p)[i];
    case D_I32: return ((const int32_t*)p)[i];
    case D_BOOL: return ((const uint8_t*)p)[i] ? 1.0 : 0.0;
    }
    return 0.0;
}

// st_any stores v into element i of a buffer of dtype code dt as the CPU
// backend converts: half types through fp32 with round to nearest even,
// integers truncated, bool as v != 0.
__device__ __forceinline__ void st_any(void* p, int dt, int64_t i, double v) {
    switch (dt) {
    case D_F64: ((double*)p)[i] = v; break;
    case D_F32: ((float*)p)[i] = (float)v; break;
    case D_BF16: ((__nv_bfloat16*)p)[i] = __float2bfloat16_rn((float)v); break;
    case D_F16: ((__half*)p)[i] = __float2half_rn((float)v); break;
    case D_I64: ((int64_t*)p)[i] = (int64_t)v; break;
    case D_I32: ((int32_t*)p)[i] = (int32_t)v; break;
    case D_BOOL: ((uint8_t*)p)[i] = v != 0.0; break;
    }
}

// unary_f in double, for the fp64 kernels (appended below the others),
// with the CPU backend's float64 formulas.
__device__ __forceinline__ double unary_f(int op, double x) {
    switch (op) {
    case U_NEG: return -x;
    case U_ABS: return fabs(x);
    case U_EXP: return exp(x);
    case U_LOG: return log(x);
    case U_SQRT: return sqrt(x);
    case U_RSQRT: return 1.0 / sqrt(x);
    case U_SQUARE: return x * x;
    case U_RECIP: return 1.0 / x;
    case U_SIGN: return x > 0.0 ? 1.0 : (x < 0.0 ? -1.0 : x);
    case U_RELU: return x != x ? x : (x > 0.0 ? x : 0.0);
    case U_GELU_TANH: return 0.5 * x * (1.0 + tanh(0.7978845608028654 * (x + 0.044715 * x * x * x)));
    case U_GELU_ERF: return x * 0.5 * erfc(-x * 0.7071067811865476);
    case U_SILU: return x / (1.0 + exp(-x));
    case U_SIGMOID: return 1.0 / (1.0 + exp(-x));
    case U_TANH: return tanh(x);
    case U_SOFTPLUS: return x > 20.0 ? x : log1p(exp(x));
    }
    return x;
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

// scale_act_add_f32: d[i] = act(x[i]·s) + r[i] (kernels.ScaleActAdder),
// rounded as BinaryScalar Mul (left out when the scale flag is 0, for
// s = 1), Unary and Binary Add (r optional) round in turn (the multiply
// and the add _rn: never fused with the activation's arithmetic).
__global__ void scale_act_add_f32(float* d, const float* x, float s, int scale, int op, const float* r, int64_t n) {
    GRID_STRIDE(i, n) {
        float v = x[i];
        if (scale) v = __fmul_rn(v, s);
        v = unary_f(op, v);
        if (r) v = __fadd_rn(v, r[i]);
        d[i] = v;
    }
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

__global__ void unary_bwd_f32(int op, float* dx, const float* x, const float* y, const float* dy, int64_t n) {
    unary_bwd(op, dx, x, y, dy, n);
}
__global__ void unary_bwd_bf16(int op, __nv_bfloat16* dx, const __nv_bfloat16* x, const __nv_bfloat16* y,
                               const __nv_bfloat16* dy, int64_t n) {
    unary_bwd(op, dx, x, y, dy, n);
}

__global__ void clamp_f32(float* d, const float* x, float lo, float hi, int64_t n) { clamp(d, x, lo, hi, n); }
__global__ void clamp_bf16(__nv_bfloat16* d, const __nv_bfloat16* x, float lo, float hi, int64_t n) {
    clamp(d, x, lo, hi, n);
}

__global__ void binary_nd_f32(int op, void* d, const float* a, const float* b, float s, int mode, Geom g, int64_t n) {
    binary_nd(op, d, a, b, s, mode, g, n);
}
__global__ void binary_nd_bf16(int op, void* d, const __nv_bfloat16* a, const __nv_bfloat16* b, float s, int mode,
                               Geom g, int64_t n) {
    binary_nd(op, d, a, b, s, mode, g, n);
}

__global__ void where_nd_f32(float* d, const uint8_t* c, const float* a, const float* b, Geom g, int64_t n) {
    where_nd(d, c, a, b, g, n);
}
__global__ void where_nd_bf16(__nv_bfloat16* d, const uint8_t* c, const __nv_bfloat16* a, const __nv_bfloat16* b,
                              Geom g, int64_t n) {
    where_nd(d, c, a, b, g, n);
}

__global__ void copy_nd_f32_bf16(__nv_bfloat16* d, const float* s, Geom g, int64_t n) { copy_nd(d, s, g, n); }
__global__ void copy_nd_bf16_f32(float* d, const __nv_bfloat16* s, Geom g, int64_t n) { copy_nd(d, s, g, n); }
__global__ void copy_nd_raw1(uint8_t* d, const uint8_t* s, Geom g, int64_t n) { copy_raw_nd(d, s, g, n); }
__global__ void copy_nd_raw2(uint16_t* d, const uint16_t* s, Geom g, int64_t n) { copy_raw_nd(d, s, g, n); }
__global__ void copy_nd_raw4(uint32_t* d, const uint32_t* s, Geom g, int64_t n) { copy_raw_nd(d, s, g, n); }
__global__ void copy_nd_raw8(uint64_t* d, const uint64_t* s, Geom g, int64_t n) { copy_raw_nd(d, s, g, n); }

// copy_blocks copies block blockIdx.y of p (the grid's y dimension is p.n;
// its x dimension walks each block's words): a whole concatenation in
// one launch.
__global__ void copy_blocks(CopyBlocks p) {
    const int t = blockIdx.y;
    if (t >= p.n) return;
    const uint64_t s = p.b[t].src, d = p.b[t].dst;
    const int64_t rows = p.b[t].rows, width = p.b[t].width, sld = p.b[t].sld, dld = p.b[t].dld;
    switch (p.unit) {
    case 16: copy_block((const uint4*)s, (uint4*)d, rows, width, sld, dld); break;
    case 8: copy_block((const uint64_t*)s, (uint64_t*)d, rows, width, sld, dld); break;
    case 4: copy_block((const uint32_t*)s, (uint32_t*)d, rows, width, sld, dld); break;
    case 2: copy_block((const uint16_t*)s, (uint16_t*)d, rows, width, sld, dld); break;
    default: copy_block((const uint8_t*)s, (uint8_t*)d, rows, width, sld, dld); break;
    }
}

// copy_nd_cvt copies between views of any two dtypes (codes above).
__global__ void copy_nd_cvt(void* d, int dt, const void* s, int st_, Geom g, int64_t n) {
    GRID_STRIDE(i, n) {
        int64_t o[2];
        geom_offsets(g, i, 2, o);
        st_any(d, dt, o[0], ld_any(s, st_, o[1]));
    }
}

// fill_raw*: every element of d gets the bit pattern v (the Go side
// converts the value to the dtype), for dtypes without a fill_<dtype>.
__global__ void fill_raw1(uint8_t* d, uint64_t v, int64_t n) {
    GRID_STRIDE(i, n) d[i] = (uint8_t)v;
}
__global__ void fill_raw2(uint16_t* d, uint64_t v, int64_t n) {
    GRID_STRIDE(i, n) d[i] = (uint16_t)v;
}
__global__ void fill_raw4(uint32_t* d, uint64_t v, int64_t n) {
    GRID_STRIDE(i, n) d[i] = (uint32_t)v;
}
__global__ void fill_raw8(uint64_t* d, uint64_t v, int64_t n) {
    GRID_STRIDE(i, n) d[i] = v;
}

// --- kernels.ChannelAxpyer (fp32) ---------------------------------------
// x, y, d and g are [N, C, hw] (planes = N·C); s holds ns = C scales (one
// per channel, plane pl's being s[pl % C]) or ns = 1 for all.

// channel_axpy: d = x + s⊙y, the product and the sum each rounded as
// Binary Mul and Binary Add round them (no fused multiply-add).
__global__ void channel_axpy_f32(float* d, const float* x, const float* y, const float* s, int64_t ns, int64_t c,
                                 int64_t hw, int64_t n) {
    GRID_STRIDE(i, n) {
        int64_t k = ns > 1 ? (i / hw) % c : 0;
        d[i] = __fadd_rn(x[i], __fmul_rn(s[k], y[i]));
    }
}

// block_sum_f64 is block_sum in fp64.
__device__ double block_sum_f64(double v) {
    __shared__ double part[32];
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffff, v, o);
    int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
    __syncthreads();
    if (lane == 0) part[w] = v;
    __syncthreads();
    v = lane < (int)(blockDim.x >> 5) ? part[lane] : 0.0;
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffff, v, o);
    return v;
}

// channel_axpy_bwd: block pl (one per plane) writes dy = s⊙g over its
// plane (dy optional) and, when part is given, part[pl] = Σ g⊙y over it
// in fp64.
__global__ void channel_axpy_bwd_f32(float* dy, double* part, const float* g, const float* y, const float* s,
                                     int64_t ns, int64_t c, int64_t hw) {
    int64_t pl = blockIdx.x, base = pl * hw;
    float sk = s[ns > 1 ? pl % c : 0];
    double acc = 0.0;
    for (int64_t j = threadIdx.x; j < hw; j += blockDim.x) {
        float gv = g[base + j];
        if (dy) dy[base + j] = __fmul_rn(sk, gv);
        if (part) acc += (double)gv * (double)y[base + j];
    }
    if (!part) return;
    acc = block_sum_f64(acc);
    if (threadIdx.x == 0) part[pl] = acc;
}

// channel_axpy_ds: one thread per scale k: ds[k] = Σ part[pl] over the
// planes of k (pl ≡ k mod ns) in sample order, rounded once.
__global__ void channel_axpy_ds_f32(float* ds, const double* part, int64_t ns, int64_t planes) {
    GRID_STRIDE(k, ns) {
        double a = 0.0;
        for (int64_t pl = k; pl < planes; pl += ns) a += part[pl];
        ds[k] = (float)a;
    }
}

// --- fp16 (the entry points above in __half, appended so that the
// existing ones keep their code and labels) ------------------------------

__global__ void fill_f16(__half* d, float v, int64_t n) {
    __half h = __float2half_rn(v);
    GRID_STRIDE(i, n) d[i] = h;
}

__global__ void cast_f32_f16(__half* d, const float* x, int64_t n) {
    GRID_STRIDE(i, n) d[i] = __float2half_rn(x[i]);
}

__global__ void cast_f16_f32(float* d, const __half* x, int64_t n) {
    GRID_STRIDE(i, n) d[i] = __half2float(x[i]);
}

__global__ void unary_f16(int op, __half* d, const __half* x, int64_t n) {
    GRID_STRIDE(i, n) d[i] = __float2half_rn(unary_f(op, __half2float(x[i])));
}

__global__ void binary_f16(int op, __half* d, const __half* a, int64_t sa, const __half* b, int64_t sb, int64_t n) {
    GRID_STRIDE(i, n) d[i] = __float2half_rn(binary_f(op, __half2float(a[i * sa]), __half2float(b[i * sb])));
}

__global__ void unary_bwd_f16(int op, __half* dx, const __half* x, const __half* y, const __half* dy, int64_t n) {
    unary_bwd(op, dx, x, y, dy, n);
}

__global__ void clamp_f16(__half* d, const __half* x, float lo, float hi, int64_t n) { clamp(d, x, lo, hi, n); }

__global__ void binary_nd_f16(int op, void* d, const __half* a, const __half* b, float s, int mode, Geom g, int64_t n) {
    binary_nd(op, d, a, b, s, mode, g, n);
}

__global__ void where_nd_f16(__half* d, const uint8_t* c, const __half* a, const __half* b, Geom g, int64_t n) {
    where_nd(d, c, a, b, g, n);
}

__global__ void copy_nd_f32_f16(__half* d, const float* s, Geom g, int64_t n) { copy_nd(d, s, g, n); }
__global__ void copy_nd_f16_f32(float* d, const __half* s, Geom g, int64_t n) { copy_nd(d, s, g, n); }

// fp64 (appended so that the entry points above keep their code): the
// elementwise ops the float64 statistics of the trainer and of PPO use.
__global__ void unary_f64(int op, double* d, const double* x, int64_t n) {
    GRID_STRIDE(i, n) d[i] = unary_f(op, x[i]);
}

__global__ void binary_f64(int op, double* d, const double* a, int64_t sa, const double* b, int64_t sb, int64_t n) {
    GRID_STRIDE(i, n) d[i] = binary_f(op, a[i * sa], b[i * sb]);
}

__global__ void binary_nd_f64(int op, void* d, const double* a, const double* b, double s, int mode, Geom g, int64_t n) {
    binary_nd(op, d, a, b, s, mode, g, n);
}

__global__ void where_nd_f64(double* d, const uint8_t* c, const double* a, const double* b, Geom g, int64_t n) {
    where_nd(d, c, a, b, g, n);
}

__global__ void clamp_f64(double* d, const double* x, double lo, double hi, int64_t n) { clamp(d, x, lo, hi, n); }

}  // extern "C"
