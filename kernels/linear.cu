/* linear.cu - bias/ReLU forward epilogue fallback and the ReLU backward with partial bias
 * gradients (see linear.cuh). */
#include "common.cuh"
#include "linear.cuh"
#include "narrow.cuh"

#define BIAS_THREADS 256
#define BG_COLS 32   /* columns per block: one per lane */
#define BG_GROUPS 8  /* row groups per block: one per warp */
#define BG_ROWS 64   /* rows per block: 8 per thread, loaded before any is used */

__global__ void __launch_bounds__(BIAS_THREADS)
    fhd_bias_act_kernel(float *y, const float *b, uint64_t n, uint32_t out, uint32_t ld, int relu) {
    for (uint64_t i = blockIdx.x * (uint64_t)blockDim.x + threadIdx.x; i < n;
         i += (uint64_t)gridDim.x * blockDim.x) {
        float *p = y + (i / out) * ld + i % out;
        float z = *p + b[i % out];
        *p = relu ? (z > 0.0f ? z : 0.0f) : z;
    }
}

cudaError_t fhd__cuda_bias_act(float *y, const float *b, uint32_t rows, uint32_t out, uint32_t ld,
                               int relu, cudaStream_t stream) {
    const uint64_t n = (uint64_t)rows * out;
    uint64_t g = fhd_cdiv(n, BIAS_THREADS);
    g = g < 2 ? 2 : (g > 65535 ? 65535 : g);
    fhd_bias_act_kernel<<<(unsigned)g, BIAS_THREADS, 0, stream>>>(y, b, n, out, ld, relu);
    return cudaGetLastError();
}

/* grid (tiles, chunks): block (t, c) owns columns [32 t, 32 t + 32) of rows [64 c, 64 c + 64);
 * lane = column, warp g = rows 64 c + g + 8 k (k = 0..7). Each warp reads 128 contiguous bytes
 * per row and every thread has its 8 rows' loads in flight at once.
 * DW (layer 0, fhd__cuda_relu_backward_dw; grid (tiles, chunks of 64 or 128 rows, input
 * slices)): the block's dz tile is not stored but multiplied by the chunk's rows of the layer's
 * input x, for the inputs [16 z, 16 z + 16) of slice z (staged in shared memory before the
 * programmatic wait: the batch was gathered long before). Each thread multiplies its own 8 or
 * 16 dz values (its column, its rows) by those rows of x, then the warps' sums are added in warp
 * order: the dW partial of output (column) j and input i over the chunk is sum over g of (sum
 * over k of dz[g + 8k][j] x[..][i]). Every slice recomputes the tile's dz (three loads a row);
 * slice 0 writes the bias partials. */
#define DW_SLICE 16 /* inputs per block */
/* rows per block: 128 (16 a thread) above 128 rows, so that a batch of 256 makes two partials
 * and the optimiser's instance for one further part (fewer registers than for three) applies;
 * else 64, which keeps a batch of 64 rows one short block of rows */
static uint32_t dw_rows(uint32_t B) {
    return B > 128 ? 128u : 64u;
}
template <bool TWO, bool DW, int ROWS> /* TWO: dx2, the dx GEMM's second half of K, is added
                                        * (one instance each: the second input's registers are
                                        * not paid where it is not used); ROWS: rows a block */
static __device__ __forceinline__ void relu_backward_block(float *dz, const float *dx,
                                                           const float *dx2, const float *h,
                                                           float *partial, uint32_t B, uint32_t H,
                                                           const float *x, uint32_t in, float *dw,
                                                           float *dwpart) {
    constexpr int NR = ROWS / BG_GROUPS; /* rows per thread */
    __shared__ float red[BG_GROUPS][BG_COLS];
    __shared__ __align__(16) float xs[DW ? ROWS : 1][DW ? DW_SLICE : 4];
    __shared__ float wsum[DW ? BG_GROUPS : 1][DW ? DW_SLICE : 1][BG_COLS];
    const uint32_t lane = threadIdx.x & 31, grp = threadIdx.x >> 5;
    const uint32_t col = blockIdx.x * BG_COLS + lane;
    const uint32_t r0 = blockIdx.y * ROWS + grp;
    const uint32_t i0 = blockIdx.z * DW_SLICE; /* the slice's first input */
    if (DW) { /* the chunk's rows of x in the slice (zero past the batch and past in), before
               * the wait: ROWS x DW_SLICE values, eight a thread, all in flight */
        constexpr int PER = ROWS * DW_SLICE / (BG_COLS * BG_GROUPS);
        float xv[PER];
#pragma unroll
        for (int k = 0; k < PER; k++) {
            const uint32_t e = threadIdx.x + k * (BG_COLS * BG_GROUPS);
            const uint32_t r = e / DW_SLICE, i = i0 + e % DW_SLICE;
            const uint32_t row = blockIdx.y * ROWS + r;
            xv[k] = row < B && i < in ? __ldg(x + (size_t)row * in + i) : 0.0f;
        }
#pragma unroll
        for (int k = 0; k < PER; k++) {
            const uint32_t e = threadIdx.x + k * (BG_COLS * BG_GROUPS);
            xs[e / DW_SLICE][e % DW_SLICE] = xv[k];
        }
    }
    fhd_pdl_wait(); /* a programmatic dependent of the dx GEMM: its output is read below */
    float s = 0.0f;
    float v[NR];
#pragma unroll
    for (int i = 0; i < NR; i++)
        v[i] = 0.0f;
    if (col < H) {
        float g[NR], g2[NR], m[NR];
#pragma unroll
        for (int i = 0; i < NR; i++) {
            const uint32_t r = r0 + i * BG_GROUPS;
            g[i] = r < B ? dx[(size_t)r * H + col] : 0.0f;
            g2[i] = TWO && r < B ? dx2[(size_t)r * H + col] : 0.0f;
            m[i] = r < B ? h[(size_t)r * H + col] : 0.0f;
        }
        if (TWO) /* the dx GEMM's second K half */
#pragma unroll
            for (int i = 0; i < NR; i++)
                g[i] += g2[i];
#pragma unroll
        for (int i = 0; i < NR; i++) {
            const uint32_t r = r0 + i * BG_GROUPS;
            v[i] = m[i] > 0.0f ? g[i] : 0.0f;
            if (!DW && r < B)
                dz[(size_t)r * H + col] = v[i];
            s += v[i];
        }
    }
    if (!DW || blockIdx.z == 0) {
        red[grp][lane] = s;
        __syncthreads();
        if (grp == 0 && col < H) {
            float t = 0.0f;
            for (int k = 0; k < BG_GROUPS; k++)
                t += red[k][lane];
            partial[(size_t)blockIdx.y * H + col] = t;
        }
    }
    if (!DW)
        return;
    __syncthreads(); /* xs */
    /* this thread's rows: sum over k of v[k] x[grp + 8k][i], the slice's inputs i */
    float acc[DW_SLICE];
#pragma unroll
    for (int i = 0; i < DW_SLICE; i++)
        acc[i] = 0.0f;
#pragma unroll
    for (int k = 0; k < NR; k++) {
        const float4 *xr = reinterpret_cast<const float4 *>(&xs[grp + k * BG_GROUPS][0]);
#pragma unroll
        for (int q = 0; q < DW_SLICE / 4; q++) {
            const float4 xq = xr[q];
            acc[4 * q] = fmaf(v[k], xq.x, acc[4 * q]);
            acc[4 * q + 1] = fmaf(v[k], xq.y, acc[4 * q + 1]);
            acc[4 * q + 2] = fmaf(v[k], xq.z, acc[4 * q + 2]);
            acc[4 * q + 3] = fmaf(v[k], xq.w, acc[4 * q + 3]);
        }
    }
#pragma unroll
    for (int i = 0; i < DW_SLICE; i++)
        wsum[grp][i][lane] = acc[i];
    __syncthreads();
    /* thread (lane j, warp w): outputs (j, i0 + w) and (j, i0 + w + 8), the warps in order */
    if (col >= H)
        return;
    float *out = (blockIdx.y == 0 ? dw : dwpart + (size_t)(blockIdx.y - 1) * H * in) +
                 (size_t)col * in;
#pragma unroll
    for (int h2 = 0; h2 < DW_SLICE / BG_GROUPS; h2++) {
        const uint32_t i = grp + h2 * BG_GROUPS;
        if (i0 + i >= in)
            break;
        float t = 0.0f;
#pragma unroll
        for (int w = 0; w < BG_GROUPS; w++)
            t += wsum[w][i][lane];
        out[i0 + i] = t;
    }
}

template <bool TWO>
__global__ void __launch_bounds__(BG_COLS * BG_GROUPS)
    fhd_relu_backward_bgrad_kernel(float *dz, const float *dx, const float *dx2, const float *h,
                                   float *partial, uint32_t B, uint32_t H) {
    relu_backward_block<TWO, false, BG_ROWS>(dz, dx, dx2, h, partial, B, H, NULL, 0, NULL, NULL);
}

template <bool TWO, int ROWS>
__global__ void __launch_bounds__(BG_COLS * BG_GROUPS)
    fhd_relu_backward_dw_kernel(const float *dx, const float *dx2, const float *h, float *partial,
                                uint32_t B, uint32_t H, const float *x, uint32_t in, float *dw,
                                float *dwpart) {
    relu_backward_block<TWO, true, ROWS>(NULL, dx, dx2, h, partial, B, H, x, in, dw, dwpart);
}

uint32_t fhd__cuda_relu_bgrad_chunks(uint32_t B) {
    uint32_t c = (uint32_t)fhd_cdiv(B, BG_ROWS);
    return c < 2 ? 2 : c; /* never a one-block grid: an extra chunk is empty (r0 >= B) */
}

uint32_t fhd__cuda_relu_dw_chunks(uint32_t B) {
    uint32_t c = (uint32_t)fhd_cdiv(B, dw_rows(B));
    return c < 2 ? 2 : c;
}

static cudaLaunchConfig_t relu_backward_config(const void *k, uint32_t chunks, uint32_t H,
                                               uint32_t slices, cudaStream_t stream,
                                               cudaLaunchAttribute *attr) {
    return fhd_pdl_config(dim3((uint32_t)fhd_cdiv(H, BG_COLS), chunks, slices),
                          dim3(BG_COLS * BG_GROUPS), 0, stream, fhd_pdl_allowed(k), attr);
}

cudaError_t fhd__cuda_relu_backward_bgrad(float *dz, const float *dx, const float *dx2,
                                          const float *h, float *partial, uint32_t B, uint32_t H,
                                          cudaStream_t stream) {
    cudaLaunchAttribute attr;
    if (dx2) {
        const cudaLaunchConfig_t cfg = relu_backward_config(
            (const void *)fhd_relu_backward_bgrad_kernel<true>, fhd__cuda_relu_bgrad_chunks(B), H, 1,
            stream, &attr);
        return cudaLaunchKernelEx(&cfg, fhd_relu_backward_bgrad_kernel<true>, dz, dx, dx2, h,
                                  partial, B, H);
    }
    const cudaLaunchConfig_t cfg = relu_backward_config(
        (const void *)fhd_relu_backward_bgrad_kernel<false>, fhd__cuda_relu_bgrad_chunks(B), H, 1,
        stream, &attr);
    return cudaLaunchKernelEx(&cfg, fhd_relu_backward_bgrad_kernel<false>, dz, dx, dx2, h,
                              partial, B, H);
}

template <int ROWS>
static cudaError_t relu_backward_dw(const float *dx, const float *dx2, const float *h,
                                    float *partial, uint32_t B, uint32_t H, const float *x,
                                    uint32_t in, float *dw, float *dwpart, cudaStream_t stream) {
    const uint32_t slices = (uint32_t)fhd_cdiv(in, DW_SLICE), chunks = fhd__cuda_relu_dw_chunks(B);
    cudaLaunchAttribute attr;
    if (dx2) {
        const cudaLaunchConfig_t cfg = relu_backward_config(
            (const void *)fhd_relu_backward_dw_kernel<true, ROWS>, chunks, H, slices, stream,
            &attr);
        return cudaLaunchKernelEx(&cfg, fhd_relu_backward_dw_kernel<true, ROWS>, dx, dx2, h,
                                  partial, B, H, x, in, dw, dwpart);
    }
    const cudaLaunchConfig_t cfg = relu_backward_config(
        (const void *)fhd_relu_backward_dw_kernel<false, ROWS>, chunks, H, slices, stream, &attr);
    return cudaLaunchKernelEx(&cfg, fhd_relu_backward_dw_kernel<false, ROWS>, dx, dx2, h, partial,
                              B, H, x, in, dw, dwpart);
}

cudaError_t fhd__cuda_relu_backward_dw(const float *dx, const float *dx2, const float *h,
                                       float *partial, uint32_t B, uint32_t H, const float *x,
                                       uint32_t in, float *dw, float *dwpart,
                                       cudaStream_t stream) {
    if (in == 0 || in > FHD_DW0_MAX_IN || fhd__cuda_relu_dw_chunks(B) > FHD_DW0_MAX_PARTS)
        return cudaErrorInvalidValue;
    if (dw_rows(B) == 128)
        return relu_backward_dw<128>(dx, dx2, h, partial, B, H, x, in, dw, dwpart, stream);
    return relu_backward_dw<64>(dx, dx2, h, partial, B, H, x, in, dw, dwpart, stream);
}

/* ---- narrow layer forward ---------------------------------------------------------------- */

#define NL_WARPS 4 /* warps per block; NL_RW rows per warp (narrow.cuh) */

/* Block: NL_WARPS warps of NL_RW rows; outputs in chunks of NC (NL_RW * NC values per lane). */
template <int NC>
__global__ void __launch_bounds__(NL_WARPS * 32)
    fhd_narrow_linear_kernel(float *__restrict__ y, uint32_t ldy, const float *__restrict__ x,
                             uint32_t ldx, const float *__restrict__ w,
                             const float *__restrict__ bias, const float *__restrict__ alpha,
                             uint32_t rows, uint32_t in, uint32_t out, int vec) {
    constexpr int V = NL_RW * NC;
    static_assert(V % 32 == 0, "values per lane: a multiple of the warp");
    fhd_pdl_trigger(); /* the loss kernel may start its own loads now (it waits for ours) */
    /* launched as a programmatic dependent of the GEMM that makes x: it starts when that ends,
     * without the launch gap */
    fhd_pdl_wait();
    const uint32_t lane = threadIdx.x & 31;
    const uint32_t row0 = (blockIdx.x * NL_WARPS + (threadIdx.x >> 5)) * NL_RW;
    if (row0 >= rows) /* the whole warp: no shuffle is left waiting */
        return;
    const float al = __ldg(alpha);
    const float *xr[NL_RW];
#pragma unroll
    for (int r = 0; r < NL_RW; r++) /* rows past the end read row0 (their sums are dropped) */
        xr[r] = x + (size_t)(row0 + r < rows ? row0 + r : row0) * ldx;
    for (uint32_t n0 = 0; n0 < out; n0 += NC) {
        float acc[V];
        fhd_narrow_rows<NC>(acc, xr, w, n0, in, out, vec, lane);
#pragma unroll
        for (int i = 0; i < V / 32; i++) {
            const uint32_t idx = lane * (V / 32) + i, r = idx / NC, n = n0 + idx % NC;
            if (row0 + r < rows && n < out)
                y[(size_t)(row0 + r) * ldy + n] = fhd_narrow_out(al, acc[i], bias, n);
        }
    }
}

int fhd__cuda_narrow_linear_vec(const float *x, uint32_t ldx, const float *w, uint32_t in) {
    return in % 4 == 0 && ldx % 4 == 0 && ((uintptr_t)x & 15) == 0 && ((uintptr_t)w & 15) == 0;
}

int fhd__cuda_narrow_chunk(uint32_t out) {
    return (int)((out + 7) / 8 * 8);
}

cudaError_t fhd__cuda_narrow_linear(float *y, uint32_t ldy, const float *x, uint32_t ldx,
                                    const float *w, const float *b, const float *alpha,
                                    uint32_t rows, uint32_t in, uint32_t out, cudaStream_t stream) {
    if (out == 0 || out > FHD_NARROW_MAX_OUT)
        return cudaErrorInvalidValue;
    uint64_t g = fhd_cdiv(rows, NL_WARPS * NL_RW);
    const unsigned grid = (unsigned)(g < 2 ? 2 : g); /* never a one-block grid */
    const int vec = fhd__cuda_narrow_linear_vec(x, ldx, w, in);
    void (*kernel)(float *, uint32_t, const float *, uint32_t, const float *, const float *,
                   const float *, uint32_t, uint32_t, uint32_t, int);
    switch (fhd__cuda_narrow_chunk(out)) {
    case 8:
        kernel = fhd_narrow_linear_kernel<8>;
        break;
    case 16:
        kernel = fhd_narrow_linear_kernel<16>;
        break;
    case 24:
        kernel = fhd_narrow_linear_kernel<24>;
        break;
    default:
        kernel = fhd_narrow_linear_kernel<32>;
        break;
    }
    cudaLaunchAttribute attr;
    const cudaLaunchConfig_t cfg = fhd_pdl_config(dim3(grid), dim3(NL_WARPS * 32), 0, stream,
                                                  fhd_pdl_allowed((const void *)kernel), &attr);
    return cudaLaunchKernelEx(&cfg, kernel, y, ldy, x, ldx, w, b, alpha, rows, in, out, vec);
}

/* Load this file's kernels now (lazy module loading must not happen inside a graph
 * capture). */
cudaError_t fhd__cuda_linear_preload(void) {
    cudaFuncAttributes fa;
    cudaError_t e = cudaFuncGetAttributes(&fa, (const void *)fhd_bias_act_kernel);
    if (e != cudaSuccess)
        return e;
    const void *relu[] = {(const void *)fhd_relu_backward_bgrad_kernel<false>,
                          (const void *)fhd_relu_backward_bgrad_kernel<true>,
                          (const void *)fhd_relu_backward_dw_kernel<false, 64>,
                          (const void *)fhd_relu_backward_dw_kernel<true, 64>,
                          (const void *)fhd_relu_backward_dw_kernel<false, 128>,
                          (const void *)fhd_relu_backward_dw_kernel<true, 128>};
    for (const void *k : relu) {
        e = cudaFuncGetAttributes(&fa, k);
        if (e != cudaSuccess)
            return e;
    }
    const void *narrow[] = {(const void *)fhd_narrow_linear_kernel<8>,
                            (const void *)fhd_narrow_linear_kernel<16>,
                            (const void *)fhd_narrow_linear_kernel<24>,
                            (const void *)fhd_narrow_linear_kernel<32>};
    for (const void *k : narrow) {
        e = cudaFuncGetAttributes(&fa, k);
        if (e != cudaSuccess)
            return e;
    }
    return cudaSuccess;
}
