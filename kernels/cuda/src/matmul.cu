// The epilogue of the Esper CUDA backend's matrix products (the products
// themselves are cuBLAS calls): bias_act adds the bias along the last axis
// and applies the activation (unary_f, in common.cuh) in fp32 over the
// product that cuBLAS stored, in fp32, bf16 and fp16.
#include <cuda_bf16.h>
#include <stdint.h>
#include "common.cuh"

// bias_act is the epilogue of MatMulBias and MatMulBiasAct over d viewed
// as [rows, cols]: d = act(d + bias[col]) computed in fp32 (bias may be
// null; act < 0 means none). bias is fp32, or bf16 when bias_bf16; with
// CODE (the fp16 entry point) bias_bf16 is ld_side's dtype code instead.
template <typename T, int CODE = 0>
__device__ void bias_act(T* d, const void* bias, int bias_bf16, int act, int64_t cols, int64_t n) {
    GRID_STRIDE(i, n) {
        float v = ld(d, i);
        if (bias) {
            int64_t j = i % cols;
            if (CODE) v += ld_side(bias, bias_bf16, j);
            else v += bias_bf16 ? __bfloat162float(((const __nv_bfloat16*)bias)[j]) : ((const float*)bias)[j];
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

// sum_rows_add is kernels.GradAccumulator's SumRowsAdd over x [m, n]
// (fp32): d[j] += Σ_i x[i, j]. A block of 32×8 threads takes 32 columns;
// row lane ty sums the rows i ≡ ty (mod 8) of its column in fp64, the
// eight lanes are added in order, and the sum, rounded once to fp32, is
// added to d[j] in fp32 (as Reduce and then Binary Add round).
__global__ void sum_rows_add_f32(float* d, const float* x, int64_t m, int64_t n) {
    __shared__ double part[8][32];
    int64_t j = (int64_t)blockIdx.x * 32 + threadIdx.x;
    double s = 0.0;
    if (j < n)
        for (int64_t i = threadIdx.y; i < m; i += 8) s += (double)x[i * n + j];
    part[threadIdx.y][threadIdx.x] = s;
    __syncthreads();
    if (threadIdx.y == 0 && j < n) {
        double t = 0.0;
        for (int k = 0; k < 8; k++) t += part[k][threadIdx.x];
        d[j] = __fadd_rn(d[j], (float)t);
    }
}

// linear_grad_add_f32 adds a small linear layer's weight and bias
// gradients in one launch, for g [m, n] and x [m, k]: thread e < n·k
// adds dw[j, p] += Σ_i g[i, j]·x[i, p] (j = e / k, p = e % k; the rows
// in order, fma in fp32, as gemm_small_f32 sums for K ≤ 32), and thread e = n·k + j
// adds db[j] += Σ_i g[i, j], summed in fp64 and rounded once to fp32
// (as sum_rows_add_f32 rounds). db null: no bias. For small m (the
// host's choice): MatMulAdd and SumRowsAdd would be two graph nodes.
// (linear_grad_at, the per-output sum, is in common.cuh: softmax.cu's
// linear_ce_sgd_f32 adds the same gradients.)
__global__ void linear_grad_add_f32(float* dw, float* db, const float* g, const float* x, int64_t m, int64_t n,
                                    int64_t k) {
    GRID_STRIDE(e, n * k + (db ? n : 0)) linear_grad_at(dw, db, g, x, m, n, k, e);
}

// linear_bwd_small_f32 is a small linear layer's whole backward in one
// launch (kernels.LinearBackwardAdder): threads below n·k (+ n with db)
// add the weight and bias gradients as linear_grad_add_f32 does, and
// the others write dx[i, p] = Σ_j g[i, j]·w[j, p] (j in order, fma in
// fp32, as gemm_small_f32 sums g·w for K ≤ 32), or with acc add that
// sum to dx[i, p] (LinearBackwardAccumulate).
__global__ void linear_bwd_small_f32(float* dx, float* dw, float* db, const float* g, const float* x, const float* w,
                                     int64_t m, int64_t n, int64_t k, int acc) {
    const int64_t grads = n * k + (db ? n : 0);
    GRID_STRIDE(e, grads + m * k) {
        if (e < grads) {
            linear_grad_at(dw, db, g, x, m, n, k, e);
            continue;
        }
        const int64_t q = e - grads, i = q / k, p = q % k;
        float v = 0.f;
        for (int64_t j = 0; j < n; j++) v = fmaf(g[i * n + j], w[j * k + p], v);
        dx[q] = acc ? dx[q] + v : v;
    }
}

// gemm_small_f32 is a whole small product with its epilogue in one
// launch (fp32, no batch): d[i, j] = act(Σ_p op(a)[i, p]·op(b)[p, j] +
// bias[j]), one thread per element summing its K products in order in
// fp32 (fma), then the bias and the activation as bias_act adds and
// applies them. op(a) is [m, k] (a stored [k, m] when ta), op(b) [k, n]
// (b stored [n, k] when tb). For products whose K is small (the host's
// choice): a cuBLAS call and the epilogue would be two graph nodes.
__global__ void gemm_small_f32(float* d, const float* a, const float* b, const void* bias, int bias_bf16, int act,
                               int64_t m, int64_t n, int64_t k, int ta, int tb) {
    GRID_STRIDE(e, m * n) {
        int64_t i = e / n, j = e % n;
        float v = 0.f;
        for (int64_t p = 0; p < k; p++) {
            float x = ta ? a[p * m + i] : a[i * k + p];
            float y = tb ? b[j * k + p] : b[p * n + j];
            v = fmaf(x, y, v);
        }
        if (bias) v += bias_bf16 ? __bfloat162float(((const __nv_bfloat16*)bias)[j]) : ((const float*)bias)[j];
        if (act >= 0) v = unary_f(act, v);
        d[e] = v;
    }
}

// gemm_small_warp_f32 is gemm_small_f32 with a warp per element, for
// the larger K of its range: lane l sums the products p = l, l+32, ... in
// order (fma), the lanes are summed pairwise down to lane 0, which adds
// the bias and applies the activation. A thread per element walks K
// products one after another; at K = 256 that took 12 µs per launch on
// an H200 (W2's heads), a warp takes K/32.
__global__ void gemm_small_warp_f32(float* d, const float* a, const float* b, const void* bias, int bias_bf16, int act,
                                    int64_t m, int64_t n, int64_t k, int ta, int tb) {
    int lane = threadIdx.x & 31;
    int64_t warps = ((int64_t)blockDim.x * gridDim.x) >> 5;
    for (int64_t e = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) >> 5; e < m * n; e += warps) {
        int64_t i = e / n, j = e % n;
        float v = 0.f;
        for (int64_t p = lane; p < k; p += 32) {
            float x = ta ? a[p * m + i] : a[i * k + p];
            float y = tb ? b[j * k + p] : b[p * n + j];
            v = fmaf(x, y, v);
        }
        for (int o = 16; o > 0; o >>= 1) v += __shfl_down_sync(0xffffffff, v, o);
        if (lane == 0) {
            if (bias) v += bias_bf16 ? __bfloat162float(((const __nv_bfloat16*)bias)[j]) : ((const float*)bias)[j];
            if (act >= 0) v = unary_f(act, v);
            d[e] = v;
        }
    }
}

// bias_act_f16 is bias_act for fp16 d; bias_code is ld_side's (fp32,
// bf16 or fp16 bias).
__global__ void bias_act_f16(__half* d, const void* bias, int bias_code, int act, int64_t cols, int64_t n) {
    bias_act<__half, 1>(d, bias, bias_code, act, cols, n);
}


// GEMM_JOIN is the most products one gemm_join_f32 or gemm_join_tf32
// launch computes (Go's gemmJoin); GJ_T is gemm_join_f32's square output
// tile and K step (Go's gemmJoinTile), GJ_ROWS the output rows a thread
// computes (GJ_T·GJ_T / 256). GemmJoin is the launch (Go's
// gemmJoinPackBy): the count n, then per product its dst, a and b
// addresses, m, n and k, and the first block of the grid that is its
// (blocks in order: row-major over the product's GJ_T-square tiles, a
// skinny product's GJ_COLS-column strips, or gemm_join_tf32's GJ_TC
// tiles).
#define GEMM_JOIN 8
#define GJ_T 32
#define GJ_ROWS 4
// GJ_SKINNY is the most rows a product has for gemm_join_f32 to take it
// a column per warp (Go's gemmJoinSkinny), GJ_COLS the columns a block
// of such a product takes (its 8 warps).
#define GJ_SKINNY 8
#define GJ_COLS 8
struct GjCall {
    float* d;
    const float* a;
    const float* b;
    int64_t m, n, k, tile0;
};
struct GemmJoin {
    int64_t n;
    GjCall c[GEMM_JOIN];
};

// gemm_join_skinny is gemm_join_f32's block t of a product of at most
// GJ_SKINNY rows: warp w takes column j = t·GJ_COLS + w, its lanes
// stride over k (lane l adds the products at k = l, l + 32, … in order,
// fma, fp32, b's row read coalesced, a's rows from cache), then a
// butterfly (__shfl_xor_sync, 16 down to 1) sums the lanes' partials,
// the same in every lane, and lane r stores row r. A batch-1 policy's
// products (3 rows by 4096 stacked weight rows by 256) read their
// weights once this way; as 32×32 tiles, 29 of every tile's 32 rows
// were padding.
__device__ __forceinline__ void gemm_join_skinny(const GjCall& c, int64_t t) {
    const int lane = threadIdx.x & 31;
    const int64_t jc = t * GJ_COLS + (threadIdx.x >> 5);
    if (jc >= c.n) return;  // no barrier follows
    float acc[GJ_SKINNY];
#pragma unroll
    for (int r = 0; r < GJ_SKINNY; r++) acc[r] = 0.f;
    const float* br = c.b + jc * c.k;
    for (int64_t p = lane; p < c.k; p += 32) {
        const float bv = br[p];
#pragma unroll
        for (int r = 0; r < GJ_SKINNY; r++)
            if (r < c.m) acc[r] = fmaf(c.a[r * c.k + p], bv, acc[r]);
    }
#pragma unroll
    for (int r = 0; r < GJ_SKINNY; r++) {
        if (r >= c.m) break;  // c.m is the warp's: uniform
        float v = acc[r];
        for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffff, v, o);
        if (lane == r) c.d[r * c.n + jc] = v;
    }
}

// gemm_join_f32: independent products d = a·bᵀ (a [m, k], b [n, k], d
// [m, n], contiguous; kernels.MatMulsJoiner) in one launch of blocks of
// 256 threads. Block x finds its product (the last whose tile0 ≤ x).
// A product of at most GJ_SKINNY rows has a block per GJ_COLS columns
// (gemm_join_skinny: each element the butterfly's sum of 32 lanes'
// partials in k order). Any other has a block per GJ_T×GJ_T output
// tile: per K step of GJ_T it stages a's tile rows and b's tile rows in
// shared memory (rows padded to GJ_T + 1 floats: the threads of a warp
// read one column of b's rows without bank conflicts, and one element of
// a's, broadcast), zero past the edges; thread t keeps column t % GJ_T
// of rows t / GJ_T + 8·r (r < GJ_ROWS) and adds the step's products in k
// order (fma, fp32): every element sums its k products in order from 0,
// whatever the tiling. A block's path is its product's: the barriers
// below are the whole block's.
__global__ void __launch_bounds__(256) gemm_join_f32(const __grid_constant__ GemmJoin j) {
    __shared__ float as[GJ_T][GJ_T + 1];
    __shared__ float bs[GJ_T][GJ_T + 1];
    const int64_t x = blockIdx.x;
    int q = 0;
    while (q + 1 < (int)j.n && x >= j.c[q + 1].tile0) q++;
    const GjCall& c = j.c[q];
    if (c.m <= GJ_SKINNY) {
        gemm_join_skinny(c, x - c.tile0);
        return;
    }
    const int64_t tilesN = (c.n + GJ_T - 1) / GJ_T;
    const int64_t t = x - c.tile0;
    const int64_t i0 = (t / tilesN) * GJ_T, j0 = (t % tilesN) * GJ_T;
    const int tid = threadIdx.x, col = tid % GJ_T, row = tid / GJ_T;  // row < 8
    float acc[GJ_ROWS];
#pragma unroll
    for (int r = 0; r < GJ_ROWS; r++) acc[r] = 0.f;
    for (int64_t k0 = 0; k0 < c.k; k0 += GJ_T) {
        // Stage: thread t loads element (t / GJ_T + 8·r, t % GJ_T) of each
        // tile, consecutive threads along k (coalesced).
#pragma unroll
        for (int r = 0; r < GJ_ROWS; r++) {
            const int rr = row + 8 * r;
            const int64_t kk = k0 + col;
            const int64_t ia = i0 + rr, jb = j0 + rr;
            as[rr][col] = (ia < c.m && kk < c.k) ? c.a[ia * c.k + kk] : 0.f;
            bs[rr][col] = (jb < c.n && kk < c.k) ? c.b[jb * c.k + kk] : 0.f;
        }
        __syncthreads();
        const int steps = (int)(c.k - k0 < GJ_T ? c.k - k0 : GJ_T);
        for (int p = 0; p < steps; p++) {
            const float bv = bs[col][p];
#pragma unroll
            for (int r = 0; r < GJ_ROWS; r++) acc[r] = fmaf(as[row + 8 * r][p], bv, acc[r]);
        }
        __syncthreads();  // the tiles are read before the next step stages
    }
#pragma unroll
    for (int r = 0; r < GJ_ROWS; r++) {
        const int64_t i = i0 + row + 8 * r, jj = j0 + col;
        if (i < c.m && jj < c.n) c.d[i * c.n + jj] = acc[r];
    }
}

// GJ_TC is gemm_join_tf32's square output tile (Go's gemmJoinTileTC),
// GJ_TK its K step, GJ_LDS a staged row's floats (GJ_TK + 4: the
// fragment loads below hit 32 distinct banks) and GJ_STAGE the elements
// of each staged tile a thread of its 128 loads per K step.
#define GJ_TC 64
#define GJ_TK 32
#define GJ_LDS 36
#define GJ_STAGE (GJ_TC * GJ_TK / 128)

// mma_tf32 is one mma.sync.m16n8k8 of TF32 operands into fp32
// accumulators: d[4] += A[16×8]·B[8×8]'s 16×8 tile, from this lane's
// fragments (PTX ISA, "Matrix Fragments for mma.m16n8k8", .tf32: with
// g = lane / 4 and t = lane % 4, a = {A[g][t], A[g+8][t], A[g][t+4],
// A[g+8][t+4]}, b = {B[t][g], B[t+4][g]}, d = {D[g][2t], D[g][2t+1],
// D[g+8][2t], D[g+8][2t+1]}).
__device__ __forceinline__ void mma_tf32(float d[4], const uint32_t a[4], const uint32_t b[2]) {
    asm volatile(
        "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%0, %1, %2, %3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

// to_tf32 rounds v to TF32 (cvt.rna.tf32.f32: 10 mantissa bits, ties
// away from zero), as the b32 an mma operand register holds.
__device__ __forceinline__ uint32_t to_tf32(float v) {
    uint32_t r;
    asm("cvt.rna.tf32.f32 %0, %1;\n" : "=r"(r) : "f"(v));
    return r;
}

// gemm_join_tf32: gemm_join_f32's products (the same GemmJoin, tile0
// counting GJ_TC×GJ_TC tiles) on TF32 tensor cores, for the matmul
// precision High: a block of 4 warps per output tile, warp w keeping the
// 32×32 quarter (w / 2, w % 2) as 2×4 mma tiles of 16×8 (32 fp32
// accumulators a thread). Per K step of GJ_TK the block's a rows and b
// rows sit in shared memory, rounded to TF32, zero past the edges (b's
// rows are bᵀ's columns: B[k][n] = b[n][k]); while the warps run the
// step's 4×8 mma from them, each thread already holds the next step's
// GJ_STAGE elements of each tile in registers (column lane of rows
// warp + 4·s: a warp's loads are 32 consecutive k of a row), stored
// after a barrier. Each accumulator goes to d
// once at the end, inside the product only. The order of the sums
// within an mma is the hardware's: TF32's rounding, as cuBLAS's TF32
// products have. Compiled for 5 blocks a multiprocessor (93 registers,
// no spills; 126 for 4): W2's batch-64 layers join 576 tiles, one wave
// of 660 slots on 132 multiprocessors (two of 528 at 4).
__global__ void __launch_bounds__(128, 5) gemm_join_tf32(const __grid_constant__ GemmJoin j) {
    __shared__ uint32_t as[GJ_TC][GJ_LDS];
    __shared__ uint32_t bs[GJ_TC][GJ_LDS];
    const int64_t x = blockIdx.x;
    int q = 0;
    while (q + 1 < (int)j.n && x >= j.c[q + 1].tile0) q++;
    const GjCall& c = j.c[q];
    const int64_t m = c.m, n = c.n, k = c.k;
    const float* __restrict__ pa = c.a;
    const float* __restrict__ pb = c.b;
    float* __restrict__ pd = c.d;
    const int64_t tilesN = (n + GJ_TC - 1) / GJ_TC;
    const int64_t t = x - c.tile0;
    const int64_t i0 = (t / tilesN) * GJ_TC, j0 = (t % tilesN) * GJ_TC;
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int g = lane >> 2, tg = lane & 3;
    const int wr = (warp >> 1) * 32, wc = (warp & 1) * 32;
    float acc[2][4][4];
#pragma unroll
    for (int a = 0; a < 2; a++)
#pragma unroll
        for (int b = 0; b < 4; b++)
#pragma unroll
            for (int e = 0; e < 4; e++) acc[a][b][e] = 0.f;
    // A thread's share of a staged tile: column lane of rows warp + 4·s
    // (s < GJ_STAGE), so a warp loads 32 consecutive k of one row.
    // Rows warp + 4·s inside the product are s < sa (a) and s < sb (b);
    // offsets fit 32 bits (m·k and n·k are within gemmJoinMaxMACsTC).
    float va[GJ_STAGE], vb[GJ_STAGE];
    const int64_t ra = i0 + warp, rb = j0 + warp;
    const int sa = ra < m ? (int)min((int64_t)GJ_STAGE, (m - ra + 3) / 4) : 0;
    const int sb = rb < n ? (int)min((int64_t)GJ_STAGE, (n - rb + 3) / 4) : 0;
    const int k32 = (int)k;
    const unsigned ku = (unsigned)k;
    const float* __restrict__ rowA = pa + (ra < m ? ra * k : 0) + lane;
    const float* __restrict__ rowB = pb + (rb < n ? rb * k : 0) + lane;
    auto load = [&](int k0) {
        const bool kin = k0 + lane < k32;
#pragma unroll
        for (int s = 0; s < GJ_STAGE; s++) {
            const unsigned off = 4u * s * ku + (unsigned)k0;  // used below 2^28 only
            va[s] = (kin && s < sa) ? rowA[off] : 0.f;
            vb[s] = (kin && s < sb) ? rowB[off] : 0.f;
        }
    };
    auto store = [&]() {
#pragma unroll
        for (int s = 0; s < GJ_STAGE; s++) {
            as[warp + 4 * s][lane] = to_tf32(va[s]);
            bs[warp + 4 * s][lane] = to_tf32(vb[s]);
        }
    };
    if (k32 > 0) {
        load(0);
        store();
    }
    __syncthreads();  // the first step is staged
    for (int k0 = 0; k0 < k32; k0 += GJ_TK) {
        const bool more = k0 + GJ_TK < k32;
        if (more) load(k0 + GJ_TK);  // in flight during this step's mma
#pragma unroll
        for (int kk = 0; kk < GJ_TK; kk += 8) {
            uint32_t fa[2][4], fb[4][2];
#pragma unroll
            for (int a = 0; a < 2; a++) {
                const int r = wr + 16 * a + g;
                fa[a][0] = as[r][kk + tg];
                fa[a][1] = as[r + 8][kk + tg];
                fa[a][2] = as[r][kk + tg + 4];
                fa[a][3] = as[r + 8][kk + tg + 4];
            }
#pragma unroll
            for (int b = 0; b < 4; b++) {
                const int cn = wc + 8 * b + g;
                fb[b][0] = bs[cn][kk + tg];
                fb[b][1] = bs[cn][kk + tg + 4];
            }
#pragma unroll
            for (int a = 0; a < 2; a++)
#pragma unroll
                for (int b = 0; b < 4; b++) mma_tf32(acc[a][b], fa[a], fb[b]);
        }
        __syncthreads();  // every warp is done reading this step's tiles
        if (more) {
            store();
            __syncthreads();  // the next step is staged
        }
    }
#pragma unroll
    for (int a = 0; a < 2; a++)
#pragma unroll
        for (int b = 0; b < 4; b++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                const int64_t i = i0 + wr + 16 * a + g + 8 * (e >> 1);
                const int64_t jj = j0 + wc + 8 * b + 2 * tg + (e & 1);
                if (i < m && jj < n) pd[i * n + jj] = acc[a][b][e];
            }
}

}  // extern "C"
