/* head_dx.cu - the fused head dx after the loss kernel (fhd__loss_args.fuse_dx; see
 * td_loss.cuh): dz of the layer below the head and its bias-gradient partials from the loss
 * kernel's d(head outputs), so that the head's dx GEMM and that layer's ReLU-backward kernel are
 * not run. */
#include "common.cuh"
#include "td_loss.cuh"

/* The head's dx and the ReLU backward of the layer below, for a small head (fuse_dx): dz_below
 * rows [r0, r0 + ROWS) = alpha (dout W_head) * (h_below > 0), and the column sums of the block's
 * dz values, in row order, as its bias-gradient partials. A kernel of its own, launched as the
 * loss kernel's programmatic dependent with the loss kernel's blocks: before its wait it loads
 * its first columns of h_below and W_head (earlier kernels' data; the loss kernel lets it start
 * only after its own wait, when the head forwards, and the GEMM before them, are done), after it
 * the block's dout rows. Thread t takes columns t, t + blockDim.x, ..., COLS of them a round
 * (two with 8-row blocks), FUSED_DX_CHUNK outputs' W_head loads in flight per column with the
 * mask's, the rows' accumulators in registers (k in order, as a GEMM's inner product). A kernel
 * of its own rather than inside the loss kernel: there it would take four L2 round trips a
 * thread, the loss kernel having no registers to spare for one. */
#define FUSED_DX_CHUNK 24 /* W_head loads in flight per column (heads of up to 24 outputs: one) */

template <int ROWS, int COLS>
static __device__ __forceinline__ void dx_loads(const fhd__loss_args &a, uint32_t j0, uint32_t r0,
                                                uint32_t nrows, uint32_t k0,
                                                float (&hb)[COLS][ROWS],
                                                float (&w)[COLS][FUSED_DX_CHUNK], bool mask) {
    const uint32_t H = a.H, HO = a.HO;
#pragma unroll
    for (int c = 0; c < COLS; c++) {
        const uint32_t j = j0 + c * blockDim.x;
        if (mask)
#pragma unroll
            for (int r = 0; r < ROWS; r++)
                hb[c][r] = j < H && (uint32_t)r < nrows
                               ? __ldg(a.h_below + (size_t)(r0 + r) * H + j)
                               : 0.0f;
#pragma unroll
        for (int k = 0; k < FUSED_DX_CHUNK; k++)
            w[c][k] = j < H && k0 + k < HO ? __ldg(a.w_head + (size_t)(k0 + k) * H + j) : 0.0f;
    }
}

template <int ROWS>
__global__ void __launch_bounds__(FHD_LOSS_THREADS)
    fhd_head_dx_kernel(const __grid_constant__ fhd__loss_args a) {
    constexpr int COLS = ROWS <= 8 ? 2 : 1; /* registers: COLS x (2 ROWS + FUSED_DX_CHUNK) */
    extern __shared__ float s_d[];        /* the block's dout rows, (ROWS, HO) */
    const uint32_t r0 = blockIdx.x * ROWS;
    const uint32_t nrows = r0 < a.B ? (a.B - r0 < ROWS ? a.B - r0 : ROWS) : 0;
    const uint32_t H = a.H, HO = a.HO, HOs = a.HOs;
    const uint32_t step = COLS * blockDim.x;
    const float alpha = *a.alpha; /* 1, or 1/sigma from the spectral norm at the update's start */
    float hb[COLS][ROWS], w[COLS][FUSED_DX_CHUNK];
    dx_loads<ROWS, COLS>(a, threadIdx.x, r0, nrows, 0, hb, w, true);
    fhd_pdl_wait(); /* dout is the loss kernel's */
    for (uint32_t e = threadIdx.x; e < nrows * HO; e += blockDim.x) {
        const uint32_t r = e / HO, c = e - r * HO;
        s_d[e] = __ldg(a.dout + (size_t)(r0 + r) * HOs + c);
    }
    __syncthreads();
    for (uint32_t j0 = threadIdx.x; j0 < H; j0 += step) {
        if (j0 != threadIdx.x)
            dx_loads<ROWS, COLS>(a, j0, r0, nrows, 0, hb, w, true);
        float acc[COLS][ROWS];
#pragma unroll
        for (int c = 0; c < COLS; c++)
#pragma unroll
            for (int r = 0; r < ROWS; r++)
                acc[c][r] = 0.0f;
        for (uint32_t k0 = 0; k0 < HO; k0 += FUSED_DX_CHUNK) {
            if (k0 > 0)
                dx_loads<ROWS, COLS>(a, j0, r0, nrows, k0, hb, w, false);
#pragma unroll
            for (int k = 0; k < FUSED_DX_CHUNK; k++) {
                if (k0 + k >= HO)
                    break;
#pragma unroll
                for (int r = 0; r < ROWS; r++) {
                    const float d = s_d[r * HO + k0 + k];
#pragma unroll
                    for (int c = 0; c < COLS; c++)
                        acc[c][r] = fmaf(d, w[c][k], acc[c][r]);
                }
            }
        }
#pragma unroll
        for (int c = 0; c < COLS; c++) {
            const uint32_t j = j0 + c * blockDim.x;
            if (j >= H)
                break;
            float colsum = 0.0f;
#pragma unroll
            for (int r = 0; r < ROWS; r++) {
                if ((uint32_t)r < nrows) {
                    const float v = hb[c][r] > 0.0f ? alpha * acc[c][r] : 0.0f;
                    a.dz_below[(size_t)(r0 + r) * H + j] = v;
                    colsum += v;
                }
            }
            a.bpart[(size_t)blockIdx.x * H + j] = colsum;
        }
    }
}

static const void *dx_kernel(uint32_t rows) {
    return rows == 8 ? (const void *)fhd_head_dx_kernel<8> : (const void *)fhd_head_dx_kernel<32>;
}

cudaError_t fhd__cuda_head_dx_setup(fhd__loss_args *a) {
    a->dx_smem_bytes = 0;
    a->dx_pdl = 0;
    if (!a->fuse_dx)
        return cudaSuccess;
    /* its dout rows: a quarter of the loss kernel's staged tiles, which fit */
    const uint32_t rows = fhd__cuda_td_loss_rows(a->B);
    const uint64_t dxb = (uint64_t)rows * a->HO * sizeof(float);
    const cudaError_t e = fhd_allow_dynamic_smem(dx_kernel(rows), dxb);
    if (e != cudaSuccess)
        return e;
    a->dx_smem_bytes = (uint32_t)dxb;
    a->dx_pdl = fhd_pdl_allowed(dx_kernel(rows));
    return cudaSuccess;
}

cudaError_t fhd__cuda_head_dx(const fhd__loss_args *a, cudaStream_t stream) {
    cudaLaunchAttribute attr;
    const cudaLaunchConfig_t cfg =
        fhd_pdl_config(dim3(fhd__cuda_td_loss_grid(a->B)), dim3(FHD_LOSS_THREADS),
                       a->dx_smem_bytes, stream, a->dx_pdl, &attr);
    if (fhd__cuda_td_loss_rows(a->B) == 8)
        return cudaLaunchKernelEx(&cfg, fhd_head_dx_kernel<8>, *a);
    return cudaLaunchKernelEx(&cfg, fhd_head_dx_kernel<32>, *a);
}

/* Load this file's kernels now (lazy module loading must not happen inside a graph capture). */
cudaError_t fhd__cuda_head_dx_preload(void) {
    cudaFuncAttributes fa;
    const cudaError_t e = cudaFuncGetAttributes(&fa, dx_kernel(8));
    return e != cudaSuccess ? e : cudaFuncGetAttributes(&fa, dx_kernel(32));
}
