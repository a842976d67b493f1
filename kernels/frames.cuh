/* frames.cuh - the device side of image observations (host-includable declarations): the
 * uint8 / scaled input conversion, the flat uint8 replay append, and the frame-once replay's
 * transition scatter and kills (plugin/cuda/cuda_frames.cpp keeps the bookkeeping; the CPU
 * reference is plugin/cpu/cpu_replay_frames.c; docs/design.md section 8).
 */
#ifndef FHD_KERNELS_FRAMES_CUH
#define FHD_KERNELS_FRAMES_CUH

#include <cuda_runtime_api.h>
#include <stdint.h>

#include "device_state.cuh"
#include "replay.cuh"

/* dst[i] = scale * (float)src[i], i < n: src uint8 (src_u8) or float32; dst may equal a float
 * src (in place). The same single rounding as the CPU's as_input (cpu_net.c). */
cudaError_t fhd__cuda_convert(float *dst, const void *src, int src_u8, uint64_t n, float scale,
                              cudaStream_t stream);

/* fhd__cuda_replay_add for uint8 observation rows (S bytes each): a's float obs pointers are
 * unused; the rows come from obs / next and go to the uint8 rings r_obs / r_next (N, S). */
cudaError_t fhd__cuda_replay_add_u8(const fhd__replay_add_args *a, const uint8_t *obs,
                                    const uint8_t *next, uint8_t *r_obs, uint8_t *r_next,
                                    cudaStream_t stream);

/* n staged transitions numbered t0, t0 + 1, ... into slots t mod N: k obs ids and k next ids
 * (uint64), D actions, R, disc. The leaf of each written slot becomes the running max priority
 * when its transition is live (t >= lo) and 0 when it died before this launch; a transition
 * written again later in the same launch (t + N < t0 + n) is skipped. Also sets
 * st->replay_size = t0 + n - lo and *first_live = lo (launched with n = 0 to set only those). */
typedef struct fhd__frames_scatter_args {
    const uint64_t *obs_ids, *next_ids; /* (n, k) staged */
    const int32_t *act;                 /* (n, D) staged */
    const float *ret, *disc;            /* (n) staged */
    uint32_t n, k, D;
    uint64_t t0, lo, N;
    uint64_t *t_obs, *t_next; /* (N, k) */
    int32_t *r_act;           /* (N, D) */
    float *r_ret, *r_disc;    /* (N) */
    int prioritized;
    uint64_t *nodes;
    uint32_t leaves;
    fhd__dev_scalars *st;
    uint64_t *first_live; /* (1) the first live transition number (sampling) */
} fhd__frames_scatter_args;

cudaError_t fhd__cuda_frames_scatter(const fhd__frames_scatter_args *a, cudaStream_t stream);

/* Transitions numbered [from, to) died (to - from <= N): their leaves become 0. */
cudaError_t fhd__cuda_frames_kill(uint64_t *nodes, uint32_t leaves, uint64_t N, uint64_t from,
                                  uint64_t to, cudaStream_t stream);

/* Observation rows from the ring for act: dst (n, k fbytes) bytes, row r's frame j the ring's
 * row ids[r k + j] mod M (frames (M, fbytes); the ids still stored). One block a 2 KB piece
 * of a frame. */
cudaError_t fhd__cuda_frames_gather(void *dst, const void *frames, const uint64_t *ids, uint32_t n,
                                    uint32_t k, uint64_t M, uint64_t fbytes, cudaStream_t stream);

cudaError_t fhd__cuda_frames_preload(void);

#endif
