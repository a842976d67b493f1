/* linear.cu - bias/ReLU forward epilogue fallback and the ReLU backward with partial bias
 * gradients (see linear.cuh). */
#include "common.cuh"
#include "linear.cuh"

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
 * lane = column, warp g = rows 64 c + g + 8 i (i = 0..7). Each warp reads 128 contiguous bytes
 * per row and every thread has its 8 rows' loads in flight at once. */
__global__ void __launch_bounds__(BG_COLS * BG_GROUPS)
    fhd_relu_backward_bgrad_kernel(float *dz, const float *dx, const float *h, float *partial,
                                   uint32_t B, uint32_t H) {
    __shared__ float red[BG_GROUPS][BG_COLS];
    const uint32_t lane = threadIdx.x & 31, grp = threadIdx.x >> 5;
    const uint32_t col = blockIdx.x * BG_COLS + lane;
    const uint32_t r0 = blockIdx.y * BG_ROWS + grp;
    float s = 0.0f;
    if (col < H) {
        float g[BG_ROWS / BG_GROUPS], m[BG_ROWS / BG_GROUPS];
#pragma unroll
        for (int i = 0; i < BG_ROWS / BG_GROUPS; i++) {
            const uint32_t r = r0 + i * BG_GROUPS;
            g[i] = r < B ? dx[(size_t)r * H + col] : 0.0f;
            m[i] = r < B ? h[(size_t)r * H + col] : 0.0f;
        }
#pragma unroll
        for (int i = 0; i < BG_ROWS / BG_GROUPS; i++) {
            const uint32_t r = r0 + i * BG_GROUPS;
            const float v = m[i] > 0.0f ? g[i] : 0.0f;
            if (r < B)
                dz[(size_t)r * H + col] = v;
            s += v;
        }
    }
    red[grp][lane] = s;
    __syncthreads();
    if (grp == 0 && col < H) {
        float t = 0.0f;
        for (int k = 0; k < BG_GROUPS; k++)
            t += red[k][lane];
        partial[(size_t)blockIdx.y * H + col] = t;
    }
}

uint32_t fhd__cuda_relu_bgrad_chunks(uint32_t B) {
    uint32_t c = (uint32_t)fhd_cdiv(B, BG_ROWS);
    return c < 2 ? 2 : c; /* never a one-block grid: an extra chunk is empty (r0 >= B) */
}

cudaError_t fhd__cuda_relu_backward_bgrad(float *dz, const float *dx, const float *h,
                                          float *partial, uint32_t B, uint32_t H,
                                          cudaStream_t stream) {
    dim3 grid((uint32_t)fhd_cdiv(H, BG_COLS), fhd__cuda_relu_bgrad_chunks(B));
    fhd_relu_backward_bgrad_kernel<<<grid, BG_COLS * BG_GROUPS, 0, stream>>>(dz, dx, h, partial, B,
                                                                              H);
    return cudaGetLastError();
}

/* Load this file's kernels now (lazy module loading must not happen inside a graph
 * capture). */
cudaError_t fhd__cuda_linear_preload(void) {
    cudaFuncAttributes fa;
    cudaError_t e = cudaFuncGetAttributes(&fa, (const void *)fhd_bias_act_kernel);
    if (e != cudaSuccess)
        return e;
    e = cudaFuncGetAttributes(&fa, (const void *)fhd_relu_backward_bgrad_kernel);
    if (e != cudaSuccess)
        return e;
    return cudaSuccess;
}
