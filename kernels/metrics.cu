/* metrics.cu - detailed_metrics' row-norm kernel (see metrics.cuh). */
#include "common.cuh"
#include "metrics.cuh"

#define DETAIL_THREADS (32 * FHD_DETAIL_ROWS)

/* Block j: rows j FHD_DETAIL_ROWS + warp, the lanes over a row's columns then the butterfly;
 * thread 0 stores the block's row sums. The last block: warp w the branches w, w + 8, ..., each
 * lane its rows in order, then the butterfly, into the update's slot. */
__global__ void __launch_bounds__(DETAIL_THREADS)
    fhd_detail_rows_kernel(const __grid_constant__ fhd__detail_args a) {
    __shared__ double s_sum[FHD_DETAIL_ROWS][2];
    const uint32_t lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const uint32_t r0 = blockIdx.x * FHD_DETAIL_ROWS, row = r0 + warp;
    double sw = 0.0, sg = 0.0;
    if (row < a.nrows) {
        const float *w = a.w + (size_t)row * a.H, *g = a.g + (size_t)row * a.H;
        const float *m = a.mask ? a.mask + (size_t)row * a.H : NULL;
        for (uint32_t c = lane; c < a.H; c += 32) {
            const float x = w[c], y = m && m[c] == 0.0f ? 0.0f : g[c];
            sw += (double)x * x;
            sg += (double)y * y;
        }
    }
    sw = fhd_warp_sum_d(sw);
    sg = fhd_warp_sum_d(sg);
    if (lane == 0) {
        s_sum[warp][0] = sw;
        s_sum[warp][1] = sg;
    }
    __syncthreads();
    if (threadIdx.x == 0)
        for (uint32_t k = 0; k < FHD_DETAIL_ROWS && r0 + k < a.nrows; k++) {
            a.rows[2 * (size_t)(r0 + k)] = s_sum[k][0];
            a.rows[2 * (size_t)(r0 + k) + 1] = s_sum[k][1];
        }
    if (!fhd_last_block_done(a.done, gridDim.x))
        return;
    fhd__dev_detail_slot *out = a.det + ((a.st->updates + 1) & 1);
    for (uint32_t d = warp; d < a.D; d += FHD_DETAIL_ROWS) {
        double bw = 0.0, bg = 0.0;
        for (uint32_t r = a.k_off[d] + lane; r < a.k_off[d + 1]; r += 32) {
            bw += __ldcg(a.rows + 2 * (size_t)r);
            bg += __ldcg(a.rows + 2 * (size_t)r + 1);
        }
        bw = fhd_warp_sum_d(bw);
        bg = fhd_warp_sum_d(bg);
        if (lane == 0) {
            out->head_w_sq[d] = bw;
            out->head_g_sq[d] = bg;
        }
    }
}

cudaError_t fhd__cuda_detail_rows(const fhd__detail_args *a, cudaStream_t stream) {
    const uint64_t g = fhd_cdiv(a->nrows, FHD_DETAIL_ROWS);
    fhd_detail_rows_kernel<<<(unsigned)(g < 2 ? 2 : g), DETAIL_THREADS, 0, stream>>>(*a);
    return cudaGetLastError();
}

/* Load this file's kernel now (lazy module loading must not happen inside a graph capture). */
cudaError_t fhd__cuda_metrics_preload(void) {
    cudaFuncAttributes fa;
    return cudaFuncGetAttributes(&fa, (const void *)fhd_detail_rows_kernel);
}
