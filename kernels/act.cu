/* act.cu - head combine + per-branch argmax for acting (see act.cuh). */
#include "act.cuh"
#include "common.cuh"

#define ACT_THREADS 128

__global__ void __launch_bounds__(ACT_THREADS)
    fhd_act_head_kernel(const __grid_constant__ fhd__act_args a) {
    const uint32_t i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= a.n)
        return;
    const float *o = a.head + (size_t)i * a.HOs;
    for (uint32_t d = 0; d < a.D; d++) {
        const uint32_t off = a.k_off[d], K = a.K[d];
        float mean = 0.0f;
        if (a.dueling) {
            float s = 0.0f;
            for (uint32_t k = 0; k < K; k++)
                s += o[1 + off + k];
            mean = s / (float)K;
        }
        uint32_t best = 0;
        float bq = 0.0f;
        for (uint32_t k = 0; k < K; k++) {
            const float q = a.dueling ? o[0] + (o[1 + off + k] - mean) : o[off + k];
            if (a.q)
                a.q[(size_t)i * a.KT + off + k] = q;
            if (k == 0 || q > bq) {
                best = k;
                bq = q;
            }
        }
        a.greedy[(size_t)i * a.D + d] = (int32_t)best;
    }
}

cudaError_t fhd__cuda_act_head(const fhd__act_args *a, cudaStream_t stream) {
    uint64_t g = fhd_cdiv(a->n, ACT_THREADS);
    g = g < 2 ? 2 : g;
    fhd_act_head_kernel<<<(unsigned)g, ACT_THREADS, 0, stream>>>(*a);
    return cudaGetLastError();
}

/* Load this file's kernels now (lazy module loading must not happen inside a graph
 * capture). */
cudaError_t fhd__cuda_act_preload(void) {
    cudaFuncAttributes fa;
    cudaError_t e = cudaFuncGetAttributes(&fa, (const void *)fhd_act_head_kernel);
    if (e != cudaSuccess)
        return e;
    return cudaSuccess;
}
