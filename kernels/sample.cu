/* sample.cu - replay sampling fused with the gather (see sample.cuh).
 *
 * One warp per sample: every lane draws the same Philox number; the warp descends the sum tree
 * five levels per step (the 32 descendants of a node five levels down are 32 consecutive nodes:
 * one coalesced load, an exact integer prefix sum across the lanes, and a ballot pick the same
 * leaf as fhd__sumtree_descend's one-level-at-a-time walk, in a quarter of the dependent loads;
 * the first step's load goes out with the total's and the counter's, before the target is
 * known), then copies the row's S observation floats and S next-observation floats with coalesced
 * (16-byte when S % 4 == 0) loads. Block b handles samples [8b, 8b + 8).
 */
#include <cuda_bf16.h>

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

/* fe elements of one source row (uint8 or float) into a batch row in the form a.dst asks for:
 * 16-byte accesses where the row and its offsets allow them. */
static __device__ __forceinline__ void copy_elems(const fhd__sample_args &a, size_t dst_off,
                                                  const void *src, uint32_t fe, int lane) {
    const bool v4 = (fe & 3u) == 0 && (dst_off & 3u) == 0;
    if (a.dst == FHD_GATHER_U8) { /* uint8 -> uint8 */
        const uint8_t *s8 = static_cast<const uint8_t *>(src);
        uint8_t *d8 = a.g_obs8 + dst_off;
        if ((fe & 15u) == 0 && (dst_off & 15u) == 0 && ((uintptr_t)s8 & 15u) == 0) {
            const uint4 *s16 = reinterpret_cast<const uint4 *>(s8);
            uint4 *d16 = reinterpret_cast<uint4 *>(d8);
            for (uint32_t c = lane; c < fe / 16; c += 32)
                d16[c] = __ldg(s16 + c);
        } else {
            for (uint32_t c = lane; c < fe; c += 32)
                d8[c] = __ldg(s8 + c);
        }
        return;
    }
    if (a.dst == FHD_GATHER_BF16) { /* scale * value, rounded once (float or uint8 rows) */
        __nv_bfloat16 *d16 = static_cast<__nv_bfloat16 *>(a.g_obs16) + dst_off;
        if (!a.src_u8 && v4 && ((uintptr_t)src & 15u) == 0) { /* float4 in, 8 bytes out */
            const float4 *s4 = static_cast<const float4 *>(src);
            for (uint32_t c = lane; c < fe / 4; c += 32) {
                const float4 v = __ldg(s4 + c);
                const __nv_bfloat162 lo = __floats2bfloat162_rn(__fmul_rn(a.scale, v.x),
                                                                __fmul_rn(a.scale, v.y)),
                                     hi = __floats2bfloat162_rn(__fmul_rn(a.scale, v.z),
                                                                __fmul_rn(a.scale, v.w));
                uint2 w;
                memcpy(&w.x, &lo, sizeof w.x);
                memcpy(&w.y, &hi, sizeof w.y);
                reinterpret_cast<uint2 *>(d16)[c] = w;
            }
            return;
        }
        for (uint32_t c = lane; c < fe; c += 32) {
            const float v = a.src_u8 ? (float)__ldg(static_cast<const uint8_t *>(src) + c)
                                     : __ldg(static_cast<const float *>(src) + c);
            d16[c] = __float2bfloat16_rn(__fmul_rn(a.scale, v));
        }
        return;
    }
    float *d = a.g_obs + dst_off;
    const float sc = a.dst == FHD_GATHER_SCALED ? a.scale : 1.0f;
    const bool scaled = a.dst == FHD_GATHER_SCALED;
    if (a.src_u8) {
        const uint8_t *s8 = static_cast<const uint8_t *>(src);
        if (v4 && ((uintptr_t)s8 & 3u) == 0) {
            const uchar4 *s4 = reinterpret_cast<const uchar4 *>(s8);
            float4 *d4 = reinterpret_cast<float4 *>(d);
            for (uint32_t c = lane; c < fe / 4; c += 32) {
                const uchar4 u = s4[c];
                d4[c] = make_float4(__fmul_rn(sc, (float)u.x), __fmul_rn(sc, (float)u.y),
                                    __fmul_rn(sc, (float)u.z), __fmul_rn(sc, (float)u.w));
            }
        } else {
            for (uint32_t c = lane; c < fe; c += 32)
                d[c] = __fmul_rn(sc, (float)__ldg(s8 + c));
        }
        return;
    }
    const float *sf = static_cast<const float *>(src);
    if (v4 && ((uintptr_t)sf & 15u) == 0) {
        const float4 *s4 = reinterpret_cast<const float4 *>(sf);
        float4 *d4 = reinterpret_cast<float4 *>(d);
        for (uint32_t c = lane; c < fe / 4; c += 32) {
            float4 v = __ldg(s4 + c);
            if (scaled)
                v = make_float4(__fmul_rn(sc, v.x), __fmul_rn(sc, v.y), __fmul_rn(sc, v.z),
                                __fmul_rn(sc, v.w));
            d4[c] = v;
        }
    } else {
        for (uint32_t c = lane; c < fe; c += 32)
            d[c] = scaled ? __fmul_rn(sc, __ldg(sf + c)) : __ldg(sf + c);
    }
}

/* Slot s's obs (next = 0) or next_obs (next = 1) into batch row `row` of 2B (obs rows [0, B),
 * next rows [B, 2B)): the plain float copy, or for uint8 rings, scaled rows and frames the k
 * frames by id (row id mod M of the frame ring) in the form a.dst asks for. */
static __device__ __forceinline__ void gather_obs(const fhd__sample_args &a, uint64_t s, int next,
                                                  uint32_t row, int lane) {
    if (!a.frames && !a.src_u8 && a.dst == FHD_GATHER_F32) {
        copy_row(a.g_obs + (size_t)row * a.S, (next ? a.r_next : a.r_obs) + s * a.S, a.S, lane);
        return;
    }
    const size_t esize = a.src_u8 ? 1 : 4;
    if (!a.frames) {
        const void *src = a.src_u8 ? (const void *)((next ? a.r_next8 : a.r_obs8) + s * a.S)
                                   : (const void *)((next ? a.r_next : a.r_obs) + s * a.S);
        copy_elems(a, (size_t)row * a.S, src, a.S, lane);
        return;
    }
    const uint32_t k = a.fk, fe = a.S / k;
    const uint64_t *ids = (next ? a.t_next : a.t_obs) + s * k;
    for (uint32_t f = 0; f < k; f++) {
        const uint64_t r = __ldg(reinterpret_cast<const unsigned long long *>(ids) + f) % a.M;
        copy_elems(a, (size_t)row * a.S + (size_t)f * fe,
                   static_cast<const char *>(a.frames) + r * fe * esize, fe, lane);
    }
}

/* fhd__sumtree_descend by a whole warp, FHD_WARP_LEVELS levels per step. Among the 2^k
 * descendants c_0.. of node i, k levels down, the one-level walk ends at the first c_t whose
 * inclusive prefix sum exceeds the target (the last one if none does: it compares the target
 * with each left subtree's total, and the subtree totals are exact integer sums of the c's),
 * with the target reduced by the exclusive prefix. Returns the slot; *leaf gets its value. */
#define FHD_WARP_LEVELS 5
static __device__ __forceinline__ uint32_t first_step_levels(uint32_t leaves) {
    const uint32_t depth = 31 - __clz(leaves); /* leaves is a power of two */
    return depth < FHD_WARP_LEVELS ? depth : FHD_WARP_LEVELS;
}

/* This lane's node of the descent's first step (the root's descendants first_step_levels
 * down), which depends on nothing but the tree: loaded with the total, before the target. */
static __device__ __forceinline__ uint64_t first_step_node(const uint64_t *nodes, uint32_t leaves,
                                                           int lane) {
    const uint32_t k = first_step_levels(leaves);
    return k > 0 && (uint32_t)lane < (1u << k)
               ? __ldg(reinterpret_cast<const unsigned long long *>(nodes) + (1u << k) + lane)
               : 0;
}

static __device__ __forceinline__ uint32_t warp_descend(const uint64_t *nodes, uint32_t leaves,
                                                        uint64_t c0, uint64_t total,
                                                        uint64_t target, int lane, uint64_t *leaf) {
    uint32_t i = 1, depth = 31 - __clz(leaves); /* leaves is a power of two */
    uint64_t value = total;
    bool first_step = true;
    while (depth > 0) {
        const uint32_t k = depth < FHD_WARP_LEVELS ? depth : FHD_WARP_LEVELS, w = 1u << k;
        const uint32_t first = i << k;
        const uint64_t c =
            first_step ? c0
            : (uint32_t)lane < w ? __ldg(reinterpret_cast<const unsigned long long *>(nodes) + first + lane)
                                 : 0;
        first_step = false;
        uint64_t incl = c;
#pragma unroll
        for (int o = 1; o < 32; o <<= 1) {
            const uint64_t up = __shfl_up_sync(FHD_FULL_MASK, incl, o);
            if (lane >= o)
                incl += up;
        }
        const unsigned below = __ballot_sync(FHD_FULL_MASK, (uint32_t)lane < w && incl <= target);
        uint32_t t = (uint32_t)__popc(below);
        t = t < w - 1 ? t : w - 1;
        const uint64_t excl = __shfl_sync(FHD_FULL_MASK, incl - c, (int)t);
        value = __shfl_sync(FHD_FULL_MASK, c, (int)t);
        target -= excl;
        i = first + t;
        depth -= k;
    }
    *leaf = value;
    return i - leaves;
}

__global__ void __launch_bounds__(SAMPLE_THREADS) fhd_sample_gather_kernel(const __grid_constant__ fhd__sample_args a) {
    __shared__ uint64_t wmin[SAMPLES_PER_BLOCK];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const uint32_t j = blockIdx.x * SAMPLES_PER_BLOCK + warp;
    if (a.part == FHD_SAMPLE_OBS) { /* the slots sampled by a FHD_SAMPLE_NO_OBS launch before */
        if (j < a.B)
            gather_obs(a, a.idx[j], 0, j, lane);
        return;
    }
    uint64_t qj = UINT64_MAX;
    if (j < a.B) {
        /* the total and the first step's nodes go out with the counter's load */
        const uint64_t total = a.prioritized ? a.nodes[1] : 0;
        const uint64_t c0 = a.prioritized ? first_step_node(a.nodes, a.leaves, lane) : 0;
        const uint64_t u = a.ahead ? a.st->sample_ahead : fhd__dev_sample_counter(a.st);
        const uint64_t r = fhd__rng_u64(a.seed, FHD_RNG_STREAM_SAMPLE, u, a.first + j);
        uint64_t s;
        if (a.prioritized) {
            if (total) {
                const uint32_t draws = a.draws ? a.draws : a.B;
                s = warp_descend(a.nodes, a.leaves, c0, total,
                                 fhd__stratum_target(total, draws, a.first + j, r), lane, &qj);
            } else {
                s = 0;
                qj = a.nodes[a.leaves];
            }
        } else {
            s = fhd__rng_below64(r, a.st->replay_size);
            if (a.frames) /* the live range [first_live, T) of the frame-once replay */
                s = (*a.first_live + s) % a.N;
        }
        if (lane == 0) {
            a.idx[j] = (uint32_t)s;
            a.g_ret[j] = a.r_ret[s];
            a.g_disc[j] = a.r_disc[s];
            if (a.prioritized)
                a.q[j] = qj;
        }
        if (a.part != FHD_SAMPLE_NO_OBS)
            gather_obs(a, s, 0, j, lane);
        gather_obs(a, s, 1, a.B + j, lane);
        for (uint32_t d = lane; d < a.D; d += 32)
            a.g_act[(size_t)j * a.D + d] = a.r_act[s * a.D + d];
    }
    if (!a.prioritized)
        return;
    /* this block's minimum of q (the loss kernel reduces the blocks' minima) */
    if (lane == 0)
        wmin[warp] = qj;
    __syncthreads();
    if (threadIdx.x == 0) {
        uint64_t m = UINT64_MAX;
        for (int w = 0; w < SAMPLES_PER_BLOCK; w++)
            m = wmin[w] < m ? wmin[w] : m;
        a.part_min[blockIdx.x] = m;
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
