/* replay.cu - replay ring append and sorted sum-tree sets (see replay.cuh). */
#include "common.cuh"
#include "replay.cuh"
#include "sumtree.h"
#include "tree_set.cuh"

#define ADD_ROWS 8 /* rows per block, one warp each */

__global__ void __launch_bounds__(32 * ADD_ROWS)
    fhd_replay_add_kernel(const __grid_constant__ fhd__replay_add_args a) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const uint32_t i = blockIdx.x * ADD_ROWS + warp;
    if (blockIdx.x == 0 && threadIdx.x == 0)
        a.st->replay_size = a.new_size;
    if (i >= a.n || (uint64_t)i + a.N < a.n)
        return; /* past the end, or overwritten later in this call */
    const uint64_t s = (a.pos + i) % a.N;
    for (uint32_t c = lane; c < a.S; c += 32) {
        a.r_obs[s * a.S + c] = a.obs[(size_t)i * a.S + c];
        a.r_next[s * a.S + c] = a.next[(size_t)i * a.S + c];
    }
    for (uint32_t d = lane; d < a.D; d += 32)
        a.r_act[s * a.D + d] = a.act[(size_t)i * a.D + d];
    if (lane == 0) {
        a.r_ret[s] = a.ret[i];
        a.r_disc[s] = a.disc[i];
        if (a.prioritized)
            fhd_tree_set(a.nodes, a.leaves, s, a.st->max_q);
    }
}

cudaError_t fhd__cuda_replay_add(const fhd__replay_add_args *a, cudaStream_t stream) {
    uint64_t g = fhd_cdiv(a->n, ADD_ROWS);
    g = g < 2 ? 2 : g;
    fhd_replay_add_kernel<<<(unsigned)g, 32 * ADD_ROWS, 0, stream>>>(*a);
    return cudaGetLastError();
}

__global__ void fhd_sumtree_set_sorted_kernel(uint64_t *nodes, uint32_t leaves, uint32_t n,
                                              const uint32_t *idx, const uint64_t *q) {
    const uint32_t i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n && (i == n - 1 || idx[i + 1] != idx[i]))
        fhd_tree_set(nodes, leaves, idx[i], q[i]);
}

cudaError_t fhd__cuda_sumtree_set_sorted(uint64_t *nodes, uint32_t leaves, uint32_t n,
                                         const uint32_t *idx, const uint64_t *q,
                                         cudaStream_t stream) {
    uint64_t g = fhd_cdiv(n, 256);
    g = g < 2 ? 2 : g;
    fhd_sumtree_set_sorted_kernel<<<(unsigned)g, 256, 0, stream>>>(nodes, leaves, n, idx, q);
    return cudaGetLastError();
}

/* Load this file's kernels now (lazy module loading must not happen inside a graph
 * capture). */
cudaError_t fhd__cuda_replay_preload(void) {
    cudaFuncAttributes fa;
    cudaError_t e = cudaFuncGetAttributes(&fa, (const void *)fhd_replay_add_kernel);
    if (e != cudaSuccess)
        return e;
    e = cudaFuncGetAttributes(&fa, (const void *)fhd_sumtree_set_sorted_kernel);
    if (e != cudaSuccess)
        return e;
    return cudaSuccess;
}
