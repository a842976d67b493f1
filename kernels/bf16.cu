/* bf16.cu - bf16 conversion (and the head's padded copy), the bf16 ReLU backward with partial bias gradients and the bf16
 * bias+ReLU epilogue fallback (see bf16.cuh). */
#include "bf16.cuh"
#include "common.cuh"
#include "linear.cuh"

#define CVT_THREADS 256
#define CVT_MAX_BLOCKS 4096
#define RB_COLS 32  /* lanes across a block, V columns each (fhd__cuda_relu_backward_bgrad: 1) */
#define RB_GROUPS 8 /* row groups per block: one per warp */
#define RB_ROWS 64  /* rows per block, the chunks of fhd__cuda_relu_bgrad_chunks: 8 a thread */

template <bool V4>
__global__ void __launch_bounds__(CVT_THREADS)
    fhd_to_bf16_kernel(__nv_bfloat16 *__restrict__ dst, const float *__restrict__ src, uint64_t n) {
    const uint64_t stride = (uint64_t)gridDim.x * CVT_THREADS;
    uint64_t i = blockIdx.x * (uint64_t)CVT_THREADS + threadIdx.x;
    uint64_t start = 0; /* the scalar loop's first element */
    if (V4) {
        const uint64_t n4 = n / 4;
        for (uint64_t j = i; j < n4; j += stride) {
            const float4 v = __ldg(reinterpret_cast<const float4 *>(src) + j);
            __nv_bfloat162 lo = __floats2bfloat162_rn(v.x, v.y),
                           hi = __floats2bfloat162_rn(v.z, v.w);
            uint2 w;
            memcpy(&w.x, &lo, sizeof w.x);
            memcpy(&w.y, &hi, sizeof w.y);
            reinterpret_cast<uint2 *>(dst)[j] = w;
        }
        start = n4 * 4; /* the tail (< 4 values) */
    }
    for (i += start; i < n; i += stride)
        dst[i] = __float2bfloat16_rn(__ldg(src + i));
}

cudaError_t fhd__cuda_to_bf16(__nv_bfloat16 *dst, const float *src, uint64_t n,
                              cudaStream_t stream) {
    if (n == 0)
        return cudaSuccess;
    const bool v4 = ((uintptr_t)src & 15) == 0 && ((uintptr_t)dst & 7) == 0;
    uint64_t g = fhd_cdiv(v4 ? fhd_cdiv(n, 4) : n, CVT_THREADS);
    g = g < 2 ? 2 : (g > CVT_MAX_BLOCKS ? CVT_MAX_BLOCKS : g); /* never a one-block grid */
    if (v4)
        fhd_to_bf16_kernel<true><<<(unsigned)g, CVT_THREADS, 0, stream>>>(dst, src, n);
    else
        fhd_to_bf16_kernel<false><<<(unsigned)g, CVT_THREADS, 0, stream>>>(dst, src, n);
    return cudaGetLastError();
}

__global__ void __launch_bounds__(CVT_THREADS)
    fhd_head_pad_bf16_kernel(__nv_bfloat16 *__restrict__ w16, float *__restrict__ b32,
                             const float *__restrict__ src, uint64_t net_stride, uint64_t w_off,
                             uint64_t b_off, uint32_t HO, uint32_t HOs, uint32_t H, uint32_t nets) {
    const uint64_t nw = (uint64_t)nets * HOs * H, total = nw + (uint64_t)nets * HOs;
    const uint64_t stride = (uint64_t)gridDim.x * CVT_THREADS;
    for (uint64_t i = blockIdx.x * (uint64_t)CVT_THREADS + threadIdx.x; i < total; i += stride) {
        if (i < nw) {
            const uint64_t n = i / ((uint64_t)HOs * H), e = i % ((uint64_t)HOs * H);
            const uint32_t r = (uint32_t)(e / H);
            w16[i] = r < HO ? __float2bfloat16_rn(__ldg(src + n * net_stride + w_off + e))
                            : __float2bfloat16_rn(0.0f);
        } else {
            const uint64_t j = i - nw, n = j / HOs;
            const uint32_t r = (uint32_t)(j % HOs);
            b32[j] = r < HO ? __ldg(src + n * net_stride + b_off + r) : 0.0f;
        }
    }
}

cudaError_t fhd__cuda_head_pad_bf16(__nv_bfloat16 *w16, float *b32, const float *src,
                                    uint64_t net_stride, uint64_t w_off, uint64_t b_off,
                                    uint32_t HO, uint32_t HOs, uint32_t H, uint32_t nets,
                                    cudaStream_t stream) {
    if (HO == 0 || HOs < HO || H == 0 || nets == 0)
        return cudaErrorInvalidValue;
    const uint64_t total = (uint64_t)nets * HOs * H + (uint64_t)nets * HOs;
    uint64_t g = fhd_cdiv(total, CVT_THREADS);
    g = g < 2 ? 2 : (g > CVT_MAX_BLOCKS ? CVT_MAX_BLOCKS : g); /* never a one-block grid */
    fhd_head_pad_bf16_kernel<<<(unsigned)g, CVT_THREADS, 0, stream>>>(w16, b32, src, net_stride,
                                                                      w_off, b_off, HO, HOs, H,
                                                                      nets);
    return cudaGetLastError();
}

/* A ReLU-backward block's bias partials: red[g][k] (row group g's sums of column k) summed over
 * g in order into partial (chunks, H) row blockIdx.y, column blockIdx.x * 32 V + k (after the
 * block's barrier). */
template <int V>
static __device__ __forceinline__ void put_partials(const float (*red)[RB_COLS * V],
                                                    float *__restrict__ partial, uint32_t H) {
    for (uint32_t k = threadIdx.x; k < RB_COLS * V; k += blockDim.x) {
        const uint32_t j = blockIdx.x * RB_COLS * V + k;
        if (j >= H)
            continue;
        float t = 0.0f;
        for (int q = 0; q < RB_GROUPS; q++)
            t += red[q][k];
        partial[(size_t)blockIdx.y * H + j] = t;
    }
}

/* grid (tiles, chunks): block (t, c) owns columns [32 V t, 32 V t + 32 V) of rows [64 c, 64 c +
 * 64); lane = V adjacent columns (one float2 / bfloat162 access each with V = 2, where H is even),
 * warp g = rows 64 c + g + 8 k (k = 0..7), every thread's 8 rows in flight at once (the layout of
 * linear.cu's fhd_relu_backward_bgrad_kernel, whose partials these are: each column's partial is
 * the same sum in the same order for either V). */
template <bool TWO, int V>
__global__ void __launch_bounds__(RB_COLS * RB_GROUPS)
    fhd_relu_backward_bf16_kernel(__nv_bfloat16 *__restrict__ dz16, const float *__restrict__ dx,
                                  const float *__restrict__ dx2,
                                  const __nv_bfloat16 *__restrict__ h16,
                                  float *__restrict__ partial, uint32_t B, uint32_t H) {
    constexpr int NR = RB_ROWS / RB_GROUPS;
    __shared__ float red[RB_GROUPS][RB_COLS * V];
    const uint32_t lane = threadIdx.x & 31, grp = threadIdx.x >> 5;
    const uint32_t col = (blockIdx.x * RB_COLS + lane) * V; /* this lane's first column */
    const uint32_t r0 = blockIdx.y * RB_ROWS + grp;
    float s[V];
#pragma unroll
    for (int c = 0; c < V; c++)
        s[c] = 0.0f;
    if (col < H) { /* with V = 2, H is even: both columns are there */
        float g[NR][V], m[NR][V];
#pragma unroll
        for (int i = 0; i < NR; i++) {
            const uint32_t r = r0 + i * RB_GROUPS;
            const size_t at = (size_t)r * H + col;
            if (V == 2) {
                float2 v = r < B ? *reinterpret_cast<const float2 *>(dx + at) : make_float2(0, 0);
                if (TWO && r < B) {
                    const float2 w = *reinterpret_cast<const float2 *>(dx2 + at);
                    v.x += w.x;
                    v.y += w.y;
                }
                g[i][0] = v.x;
                g[i][V - 1] = v.y;
                const float2 hm =
                    r < B ? __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162 *>(h16 + at))
                          : make_float2(0, 0);
                m[i][0] = hm.x;
                m[i][V - 1] = hm.y;
            } else {
                g[i][0] = r < B ? dx[at] : 0.0f;
                if (TWO && r < B)
                    g[i][0] += dx2[at];
                m[i][0] = r < B ? __bfloat162float(h16[at]) : 0.0f;
            }
        }
#pragma unroll
        for (int i = 0; i < NR; i++) {
            const uint32_t r = r0 + i * RB_GROUPS;
            float v[V];
            __nv_bfloat16 q[V]; /* dz as the GEMMs read it; the partials sum these values */
#pragma unroll
            for (int c = 0; c < V; c++) {
                v[c] = m[i][c] > 0.0f ? g[i][c] : 0.0f;
                q[c] = __float2bfloat16_rn(v[c]);
                s[c] += __bfloat162float(q[c]);
            }
            if (r < B) {
                const size_t at = (size_t)r * H + col;
                if (V == 2)
                    *reinterpret_cast<__nv_bfloat162 *>(dz16 + at) = __halves2bfloat162(q[0], q[V - 1]);
                else
                    dz16[at] = q[0];
            }
        }
    }
#pragma unroll
    for (int c = 0; c < V; c++)
        red[grp][lane * V + c] = s[c];
    __syncthreads();
    put_partials<V>(red, partial, H);
}

template <bool TWO>
static cudaError_t relu_backward_bf16(__nv_bfloat16 *dz16, const float *dx, const float *dx2,
                                      const __nv_bfloat16 *h16, float *partial, uint32_t B,
                                      uint32_t H, cudaStream_t stream) {
    const uintptr_t al = (uintptr_t)dz16 | (uintptr_t)dx | (uintptr_t)dx2 | (uintptr_t)h16;
    const bool v2 = H % 2 == 0 && (al & 7) == 0; /* every row's column pairs 8-byte aligned */
    const uint32_t cols = RB_COLS * (v2 ? 2 : 1);
    const dim3 grid((uint32_t)fhd_cdiv(H, cols), fhd__cuda_relu_bgrad_chunks(B));
    if (v2)
        fhd_relu_backward_bf16_kernel<TWO, 2>
            <<<grid, RB_COLS * RB_GROUPS, 0, stream>>>(dz16, dx, dx2, h16, partial, B, H);
    else
        fhd_relu_backward_bf16_kernel<TWO, 1>
            <<<grid, RB_COLS * RB_GROUPS, 0, stream>>>(dz16, dx, dx2, h16, partial, B, H);
    return cudaGetLastError();
}

cudaError_t fhd__cuda_relu_backward_bf16(__nv_bfloat16 *dz16, const float *dx, const float *dx2,
                                         const __nv_bfloat16 *h16, float *partial, uint32_t B,
                                         uint32_t H, cudaStream_t stream) {
    return dx2 ? relu_backward_bf16<true>(dz16, dx, dx2, h16, partial, B, H, stream)
               : relu_backward_bf16<false>(dz16, dx, dx2, h16, partial, B, H, stream);
}

/* The in-place form (plan dx16: the dx GEMM wrote dz's unmasked values in bf16): the same
 * blocks, chunks and partials, V = 8 adjacent columns a lane (one 16-byte access of dz and one
 * of h16 per row) where H % 8 == 0, else one. The values stay packed (two a 32-bit word) from
 * load to store, and a thread's 8 rows go in two rounds of 4: registers for four blocks a
 * multiprocessor. */
template <int V>
__global__ void __launch_bounds__(RB_COLS * RB_GROUPS)
    fhd_relu_mask_bf16_kernel(__nv_bfloat16 *__restrict__ dz16,
                              const __nv_bfloat16 *__restrict__ h16, float *__restrict__ partial,
                              uint32_t B, uint32_t H) {
    constexpr int NR = RB_ROWS / RB_GROUPS;
    constexpr int NW = V == 8 ? 4 : 1; /* 32-bit words a row: a uint4, or one value's 16 bits */
    __shared__ float red[RB_GROUPS][RB_COLS * V];
    const uint32_t lane = threadIdx.x & 31, grp = threadIdx.x >> 5;
    const uint32_t col = (blockIdx.x * RB_COLS + lane) * V;
    const uint32_t r0 = blockIdx.y * RB_ROWS + grp;
    float s[V];
#pragma unroll
    for (int c = 0; c < V; c++)
        s[c] = 0.0f;
    if (col < H) { /* with V = 8, H % 8 == 0: all eight columns are there */
        /* the rows in two rounds of NB, each round's loads in flight together */
        constexpr int NB = NR / 2;
#pragma unroll
        for (int i0 = 0; i0 < NR; i0 += NB) {
            uint32_t g[NB][NW], m[NB][NW]; /* bf16 bits, low half the first column */
#pragma unroll
            for (int i = 0; i < NB; i++) {
                const uint32_t r = r0 + (i0 + i) * RB_GROUPS;
                const size_t at = (size_t)r * H + col;
                if (V == 8) {
                    const uint4 z = make_uint4(0, 0, 0, 0);
                    const uint4 gv = r < B ? *reinterpret_cast<const uint4 *>(dz16 + at) : z;
                    const uint4 mv = r < B ? *reinterpret_cast<const uint4 *>(h16 + at) : z;
                    const uint32_t gw[4] = {gv.x, gv.y, gv.z, gv.w}, mw[4] = {mv.x, mv.y, mv.z, mv.w};
#pragma unroll
                    for (int w = 0; w < NW; w++)
                        g[i][w] = gw[w], m[i][w] = mw[w];
                } else {
                    g[i][0] = r < B ? *reinterpret_cast<const uint16_t *>(dz16 + at) : 0u;
                    m[i][0] = r < B ? *reinterpret_cast<const uint16_t *>(h16 + at) : 0u;
                }
            }
#pragma unroll
            for (int i = 0; i < NB; i++) {
                const uint32_t r = r0 + (i0 + i) * RB_GROUPS;
                uint32_t q[4] = {0u, 0u, 0u, 0u};
#pragma unroll
                for (int w = 0; w < NW; w++) {
                    /* a bf16 value's float is its bits in the upper half; masked: +0 */
                    const bool lo = __uint_as_float(m[i][w] << 16) > 0.0f;
                    const bool hi = V == 8 && __uint_as_float(m[i][w] & 0xffff0000u) > 0.0f;
                    q[w] = (lo ? g[i][w] & 0xffffu : 0u) | (hi ? g[i][w] & 0xffff0000u : 0u);
                    s[(2 * w) % V] += __uint_as_float(q[w] << 16);
                    if (V == 8)
                        s[(2 * w + 1) % V] += __uint_as_float(q[w] & 0xffff0000u);
                }
                if (r < B) {
                    const size_t at = (size_t)r * H + col;
                    if (V == 8)
                        *reinterpret_cast<uint4 *>(dz16 + at) = make_uint4(q[0], q[1], q[2], q[3]);
                    else
                        *reinterpret_cast<uint16_t *>(dz16 + at) = (uint16_t)q[0];
                }
            }
        }
    }
#pragma unroll
    for (int c = 0; c < V; c++)
        red[grp][lane * V + c] = s[c];
    __syncthreads();
    put_partials<V>(red, partial, H);
}

cudaError_t fhd__cuda_relu_mask_bf16(__nv_bfloat16 *dz16, const __nv_bfloat16 *h16,
                                     float *partial, uint32_t B, uint32_t H,
                                     cudaStream_t stream) {
    const bool v8 = H % 8 == 0 && (((uintptr_t)dz16 | (uintptr_t)h16) & 15) == 0;
    const uint32_t cols = RB_COLS * (v8 ? 8 : 1);
    const dim3 grid((uint32_t)fhd_cdiv(H, cols), fhd__cuda_relu_bgrad_chunks(B));
    if (v8)
        fhd_relu_mask_bf16_kernel<8>
            <<<grid, RB_COLS * RB_GROUPS, 0, stream>>>(dz16, h16, partial, B, H);
    else
        fhd_relu_mask_bf16_kernel<1>
            <<<grid, RB_COLS * RB_GROUPS, 0, stream>>>(dz16, h16, partial, B, H);
    return cudaGetLastError();
}

__global__ void __launch_bounds__(CVT_THREADS)
    fhd_bias_act_bf16_kernel(__nv_bfloat16 *__restrict__ y16, const float *__restrict__ y,
                             const __nv_bfloat16 *__restrict__ b16, uint64_t n, uint32_t out,
                             uint32_t ld) {
    for (uint64_t i = blockIdx.x * (uint64_t)blockDim.x + threadIdx.x; i < n;
         i += (uint64_t)gridDim.x * blockDim.x) {
        const uint64_t at = (i / out) * ld + i % out;
        const float z = y[at] + __bfloat162float(b16[i % out]);
        y16[at] = __float2bfloat16_rn(z > 0.0f ? z : 0.0f);
    }
}

cudaError_t fhd__cuda_bias_act_bf16(__nv_bfloat16 *y16, const float *y, const __nv_bfloat16 *b16,
                                    uint32_t rows, uint32_t out, uint32_t ld, cudaStream_t stream) {
    const uint64_t n = (uint64_t)rows * out;
    uint64_t g = fhd_cdiv(n, CVT_THREADS);
    g = g < 2 ? 2 : (g > 65535 ? 65535 : g);
    fhd_bias_act_bf16_kernel<<<(unsigned)g, CVT_THREADS, 0, stream>>>(y16, y, b16, n, out, ld);
    return cudaGetLastError();
}

/* Load this file's kernels now (lazy module loading must not happen inside a graph capture). */
cudaError_t fhd__cuda_bf16_preload(void) {
    cudaFuncAttributes fa;
    const void *fns[] = {
        (const void *)fhd_to_bf16_kernel<true>, (const void *)fhd_to_bf16_kernel<false>,
        (const void *)fhd_relu_backward_bf16_kernel<true, 1>,
        (const void *)fhd_relu_backward_bf16_kernel<false, 1>,
        (const void *)fhd_relu_backward_bf16_kernel<true, 2>,
        (const void *)fhd_relu_backward_bf16_kernel<false, 2>,
        (const void *)fhd_relu_mask_bf16_kernel<8>, (const void *)fhd_relu_mask_bf16_kernel<1>,
        (const void *)fhd_bias_act_bf16_kernel, (const void *)fhd_head_pad_bf16_kernel};
    for (const void *f : fns) {
        cudaError_t e = cudaFuncGetAttributes(&fa, f);
        if (e != cudaSuccess)
            return e;
    }
    return cudaSuccess;
}
