/* frames.cu - input conversion, uint8 replay append, frame-replay scatter and kills, and act's
 * gather of observations from the ring (see frames.cuh). */
#include "common.cuh"
#include "frames.cuh"
#include "tree_set.cuh"

#define ADD_ROWS 8 /* rows per block, one warp each (as replay.cu) */

__global__ void fhd_convert_kernel(float *dst, const void *src, int src_u8, uint64_t n,
                                   float scale) {
    const uint64_t stride = (uint64_t)gridDim.x * blockDim.x;
    for (uint64_t i = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        const float v = src_u8 ? (float)static_cast<const uint8_t *>(src)[i]
                               : static_cast<const float *>(src)[i];
        dst[i] = __fmul_rn(scale, v);
    }
}

cudaError_t fhd__cuda_convert(float *dst, const void *src, int src_u8, uint64_t n, float scale,
                              cudaStream_t stream) {
    uint64_t g = fhd_cdiv(n, 256);
    g = g < 2 ? 2 : (g > 4096 ? 4096 : g);
    fhd_convert_kernel<<<(unsigned)g, 256, 0, stream>>>(dst, src, src_u8, n, scale);
    return cudaGetLastError();
}

__global__ void __launch_bounds__(32 * ADD_ROWS)
    fhd_replay_add_u8_kernel(const __grid_constant__ fhd__replay_add_args a, const uint8_t *obs,
                             const uint8_t *next, uint8_t *r_obs, uint8_t *r_next) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const uint32_t i = blockIdx.x * ADD_ROWS + warp;
    if (blockIdx.x == 0 && threadIdx.x == 0)
        a.st->replay_size = a.new_size;
    if (i >= a.n || (uint64_t)i + a.N < a.n)
        return; /* past the end, or overwritten later in this call */
    const uint64_t s = (a.pos + i) % a.N;
    for (uint32_t c = lane; c < a.S; c += 32) {
        r_obs[s * a.S + c] = obs[(size_t)i * a.S + c];
        r_next[s * a.S + c] = next[(size_t)i * a.S + c];
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

cudaError_t fhd__cuda_replay_add_u8(const fhd__replay_add_args *a, const uint8_t *obs,
                                    const uint8_t *next, uint8_t *r_obs, uint8_t *r_next,
                                    cudaStream_t stream) {
    uint64_t g = fhd_cdiv(a->n, ADD_ROWS);
    g = g < 2 ? 2 : g;
    fhd_replay_add_u8_kernel<<<(unsigned)g, 32 * ADD_ROWS, 0, stream>>>(*a, obs, next, r_obs,
                                                                        r_next);
    return cudaGetLastError();
}

__global__ void fhd_frames_scatter_kernel(const __grid_constant__ fhd__frames_scatter_args a) {
    const uint32_t i = blockIdx.x * blockDim.x + threadIdx.x;
    const uint64_t T = a.t0 + a.n;
    if (i == 0) {
        a.st->replay_size = T - a.lo;
        *a.first_live = a.lo;
    }
    if (i >= a.n)
        return;
    const uint64_t t = a.t0 + i;
    if (t + a.N < T)
        return; /* its slot is written again later in this launch */
    const uint64_t s = t % a.N;
    for (uint32_t j = 0; j < a.k; j++) {
        a.t_obs[s * a.k + j] = a.obs_ids[(size_t)i * a.k + j];
        a.t_next[s * a.k + j] = a.next_ids[(size_t)i * a.k + j];
    }
    for (uint32_t d = 0; d < a.D; d++)
        a.r_act[s * a.D + d] = a.act[(size_t)i * a.D + d];
    a.r_ret[s] = a.ret[i];
    a.r_disc[s] = a.disc[i];
    if (a.prioritized)
        fhd_tree_set(a.nodes, a.leaves, s, t >= a.lo ? a.st->max_q : 0);
}

cudaError_t fhd__cuda_frames_scatter(const fhd__frames_scatter_args *a, cudaStream_t stream) {
    uint64_t g = fhd_cdiv(a->n, 128);
    g = g < 2 ? 2 : g;
    fhd_frames_scatter_kernel<<<(unsigned)g, 128, 0, stream>>>(*a);
    return cudaGetLastError();
}

__global__ void fhd_frames_kill_kernel(uint64_t *nodes, uint32_t leaves, uint64_t N, uint64_t from,
                                       uint64_t to) {
    const uint64_t stride = (uint64_t)gridDim.x * blockDim.x;
    for (uint64_t t = from + (uint64_t)blockIdx.x * blockDim.x + threadIdx.x; t < to; t += stride)
        fhd_tree_set(nodes, leaves, t % N, 0);
}

cudaError_t fhd__cuda_frames_kill(uint64_t *nodes, uint32_t leaves, uint64_t N, uint64_t from,
                                  uint64_t to, cudaStream_t stream) {
    uint64_t g = fhd_cdiv(to - from, 256);
    g = g < 2 ? 2 : (g > 4096 ? 4096 : g);
    fhd_frames_kill_kernel<<<(unsigned)g, 256, 0, stream>>>(nodes, leaves, N, from, to);
    return cudaGetLastError();
}

/* Load this file's kernels now (lazy module loading must not happen inside a graph capture:
 * the act graph holds the conversion). */
#define GATHER_PIECE 2048 /* bytes of a frame one block copies */

__global__ void fhd_frames_gather_kernel(unsigned char *dst, const unsigned char *frames,
                                         const uint64_t *ids, uint32_t nf, uint32_t pieces,
                                         uint64_t M, uint64_t fbytes) {
    const uint64_t total = (uint64_t)nf * pieces;
    for (uint64_t b = blockIdx.x; b < total; b += gridDim.x) {
        const uint64_t f = b / pieces, p0 = (b % pieces) * GATHER_PIECE;
        const uint64_t p1 = p0 + GATHER_PIECE < fbytes ? p0 + GATHER_PIECE : fbytes;
        const unsigned char *src = frames + (ids[f] % M) * fbytes;
        unsigned char *out = dst + f * fbytes;
        if (fbytes % 16 == 0) { /* rows of whole 16-byte words: both sides aligned */
            const uint4 *s4 = reinterpret_cast<const uint4 *>(src);
            uint4 *o4 = reinterpret_cast<uint4 *>(out);
            for (uint64_t i = p0 / 16 + threadIdx.x; i < p1 / 16; i += blockDim.x)
                o4[i] = s4[i];
        } else {
            for (uint64_t i = p0 + threadIdx.x; i < p1; i += blockDim.x)
                out[i] = src[i];
        }
    }
}

cudaError_t fhd__cuda_frames_gather(void *dst, const void *frames, const uint64_t *ids, uint32_t n,
                                    uint32_t k, uint64_t M, uint64_t fbytes, cudaStream_t stream) {
    const uint32_t nf = n * k, pieces = (uint32_t)((fbytes + GATHER_PIECE - 1) / GATHER_PIECE);
    const uint64_t blocks = (uint64_t)nf * pieces;
    const unsigned g = blocks < 2 ? 2u : (blocks > 8192 ? 8192u : (unsigned)blocks);
    fhd_frames_gather_kernel<<<g, 128, 0, stream>>>(static_cast<unsigned char *>(dst),
                                                     static_cast<const unsigned char *>(frames),
                                                     ids, nf, pieces, M, fbytes);
    return cudaGetLastError();
}

cudaError_t fhd__cuda_frames_preload(void) {
    cudaFuncAttributes fa;
    const void *k[] = {(const void *)fhd_convert_kernel, (const void *)fhd_replay_add_u8_kernel,
                       (const void *)fhd_frames_scatter_kernel,
                       (const void *)fhd_frames_kill_kernel,
                       (const void *)fhd_frames_gather_kernel};
    for (size_t i = 0; i < sizeof k / sizeof k[0]; i++) {
        cudaError_t e = cudaFuncGetAttributes(&fa, k[i]);
        if (e != cudaSuccess)
            return e;
    }
    return cudaSuccess;
}
