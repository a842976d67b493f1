/* sample.cu - replay sampling fused with the gather (see sample.cuh).
 *
 * One warp per sample: every lane draws the same Philox number and walks the same tree path
 * (the loads are broadcasts, so this costs what one thread would), then the warp copies the
 * row's S observation floats and S next-observation floats with coalesced (16-byte when S % 4
 * == 0) loads. Block b handles samples [8b, 8b + 8).
 */
#include "common.cuh"
#include "sample.cuh"
#include "sumtree.h"

#define SAMPLES_PER_BLOCK 8
#define SAMPLE_THREADS (32 * SAMPLES_PER_BLOCK)

static __device__ __forceinline__ void copy_row(float *dst, const float *src, uint32_t S,
                                                int lane) {
    if ((S & 3u) == 0) {
        const float4 *s4 = reinterpret_cast<const float4 *>(src);
        float4 *d4 = reinterpret_cast<float4 *>(dst);
        for (uint32_t c = lane; c < S / 4; c += 32)
            d4[c] = __ldg(s4 + c);
    } else {
        for (uint32_t c = lane; c < S; c += 32)
            dst[c] = __ldg(src + c);
    }
}

__global__ void __launch_bounds__(SAMPLE_THREADS) fhd_sample_gather_kernel(const __grid_constant__ fhd__sample_args a) {
    __shared__ uint64_t wmin[SAMPLES_PER_BLOCK];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const uint32_t j = blockIdx.x * SAMPLES_PER_BLOCK + warp;
    uint64_t qj = UINT64_MAX;
    if (j < a.B) {
        const uint64_t u = a.st->updates;
        const uint64_t r = fhd__rng_u64(a.seed, FHD_RNG_STREAM_SAMPLE, u, j);
        uint64_t s;
        if (a.prioritized) {
            const uint64_t total = a.nodes[1];
            s = total ? fhd__sumtree_descend(a.nodes, a.leaves, fhd__stratum_target(total, a.B, j, r))
                      : 0;
            qj = a.nodes[a.leaves + s];
        } else {
            s = fhd__rng_below64(r, a.st->replay_size);
        }
        if (lane == 0) {
            a.idx[j] = (uint32_t)s;
            a.g_ret[j] = a.r_ret[s];
            a.g_disc[j] = a.r_disc[s];
            if (a.prioritized)
                a.q[j] = qj;
        }
        copy_row(a.g_obs + (size_t)j * a.S, a.r_obs + s * a.S, a.S, lane);
        copy_row(a.g_next + (size_t)j * a.S, a.r_next + s * a.S, a.S, lane);
        for (uint32_t d = lane; d < a.D; d += 32)
            a.g_act[(size_t)j * a.D + d] = a.r_act[s * a.D + d];
    }
    if (!a.prioritized)
        return;
    /* batch minimum of q: per block, then across blocks by the last block */
    if (lane == 0)
        wmin[warp] = qj;
    __syncthreads();
    if (threadIdx.x == 0) {
        uint64_t m = UINT64_MAX;
        for (int w = 0; w < SAMPLES_PER_BLOCK; w++)
            m = wmin[w] < m ? wmin[w] : m;
        a.part_min[blockIdx.x] = m;
    }
    if (fhd_last_block_done(a.done, gridDim.x)) {
        uint64_t m = UINT64_MAX;
        for (uint32_t b = threadIdx.x; b < gridDim.x; b += blockDim.x) {
            uint64_t v = __ldcg(reinterpret_cast<const unsigned long long *>(a.part_min) + b);
            m = v < m ? v : m;
        }
        m = fhd_warp_min_u64(m);
        if (lane == 0)
            wmin[warp] = m;
        __syncthreads();
        if (threadIdx.x == 0) {
            uint64_t mm = UINT64_MAX;
            for (int w = 0; w < SAMPLES_PER_BLOCK; w++)
                mm = wmin[w] < mm ? wmin[w] : mm;
            *a.qmin = mm;
        }
    }
}

unsigned int fhd__cuda_sample_grid(uint32_t B) {
    uint64_t g = fhd_cdiv(B, SAMPLES_PER_BLOCK);
    return (unsigned int)(g < 2 ? 2 : g); /* never a one-block grid */
}

cudaError_t fhd__cuda_sample_gather(const fhd__sample_args *a, cudaStream_t stream) {
    fhd_sample_gather_kernel<<<fhd__cuda_sample_grid(a->B), SAMPLE_THREADS, 0, stream>>>(*a);
    return cudaGetLastError();
}

/* Load this file's kernels now (lazy module loading must not happen inside a graph
 * capture). */
cudaError_t fhd__cuda_sample_preload(void) {
    cudaFuncAttributes fa;
    cudaError_t e = cudaFuncGetAttributes(&fa, (const void *)fhd_sample_gather_kernel);
    if (e != cudaSuccess)
        return e;
    return cudaSuccess;
}
