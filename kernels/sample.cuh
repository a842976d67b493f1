/* sample.cuh - replay sampling fused with the batch gather (host-includable declarations).
 *
 * Mirrors the CPU reference's sample_batch (plugin/cpu/cpu_backend.c): for update u = the device
 * counter, row j draws r = Philox(seed, SAMPLE, u, j); prioritized: stratified target
 * fhd__stratum_target(total, B, j, r) and the integer tree descent of sumtree.h; uniform:
 * fhd__rng_below64(r, replay_size). The sampled rows are gathered straight into the batch
 * buffers, and the leaf priority of each sample and each block's minimum of them (for the IS
 * weights' batch minimum) are kept for the loss kernel.
 *
 * Sampling ahead: within one train(n) call, update u + 1's batch is sampled at the end of update
 * u, beside its backward's tail and the optimiser, so that update u + 1 starts with its forward:
 * the descent with every row but the obs rows after the priority update (the last writer of the
 * tree; FHD_SAMPLE_NO_OBS), the obs rows after layer 0's backward (their last reader;
 * FHD_SAMPLE_OBS). The tree, the replay and the RNG counter are those the in-update sampling
 * would see: the same batch.
 */
#ifndef FHD_KERNELS_SAMPLE_CUH
#define FHD_KERNELS_SAMPLE_CUH

#include <cuda_runtime_api.h>
#include <stdint.h>

#include "device_state.cuh"

typedef struct fhd__sample_args {
    const fhd__dev_scalars *st; /* updates (RNG counter), replay_size */
    const uint64_t *nodes;      /* (2 * leaves) sum tree, prioritized only */
    uint32_t leaves;
    int prioritized;
    uint64_t seed;
    uint32_t B, S, D;
    /* config distributed: this rank's rows are draws [first, first + B) of one draw of `draws`
     * (RNG counters and strata; docs/design.md section 10); one process: 0 and B (draws 0
     * reads as B) */
    uint32_t first, draws;
    const float *r_obs, *r_next;   /* (N, S) */
    const int32_t *r_act;          /* (N, D) */
    const float *r_ret, *r_disc;   /* (N) */
    float *g_obs, *g_next;         /* (B, S) each, g_next = g_obs + B S: the gather writes
                                    * 2B rows from g_obs (obs rows, then next_obs rows) */
    int32_t *g_act;                /* (B, D) */
    float *g_ret, *g_disc;         /* (B) */
    uint32_t *idx;                 /* (B) sampled slots, non-decreasing when prioritized */
    uint64_t *q;                   /* (B) leaf priority of each sample (prioritized) */
    uint64_t *part_min;            /* (grid) per-block minimum of q (the loss kernel takes the
                                    * batch minimum from these) */
    int ahead;                     /* 0: the batch of this update (counter st->updates); 1: of
                                    * the next, sampled at the end of this one (counter
                                    * st->sample_ahead) */
    int part;                      /* FHD_SAMPLE_* below */
    /* image observations (all 0 / NULL otherwise; plugin/cuda/cuda_frames.cpp fills them) */
    int src_u8;                    /* replay rows / frames are uint8 */
    const uint8_t *r_obs8, *r_next8; /* (N, S) flat uint8 rings (src_u8, no frames) */
    const void *frames;            /* (M, S / fk) frame ring of the frame-once replay */
    const uint64_t *t_obs, *t_next; /* (N, fk) frame ids of each slot's obs / next_obs */
    const uint64_t *first_live;    /* (1) frames: a uniform draw r is slot (first_live + r) % N */
    uint64_t M, N;
    uint32_t fk;                   /* frames per observation (frame_stack; 1 without frames) */
    int dst;                       /* FHD_GATHER_* below: what the batch rows get */
    float scale;                   /* FHD_GATHER_SCALED: obs_scale */
    uint8_t *g_obs8;               /* (2B, S) FHD_GATHER_U8: obs rows, then next_obs rows */
    void *g_obs16;   /* (2B, S) __nv_bfloat16 FHD_GATHER_BF16: the same rows */
} fhd__sample_args;

/* The batch rows' form: raw floats into g_obs / g_next (float32 replay rows or frames), raw
 * bytes into g_obs8 (uint8, for a conv torso that converts), obs_scale * value as float into
 * g_obs / g_next (the MLP's input where there is no conv), or scale * value rounded to bf16
 * into g_obs16 (the MLP's input with bf16 GEMMs: the layer-0 operand itself; scale is obs_scale
 * where the rows are scaled, else 1). */
enum { FHD_GATHER_F32 = 0, FHD_GATHER_U8 = 1, FHD_GATHER_SCALED = 2, FHD_GATHER_BF16 = 3 };

/* What a launch does: everything; everything but the obs rows (the descent, as soon as the
 * tree is final); only the obs rows of the slots in idx (once layer 0's backward, their last
 * reader, is done). */
enum { FHD_SAMPLE_ALL = 0, FHD_SAMPLE_NO_OBS = 1, FHD_SAMPLE_OBS = 2 };

/* Blocks of the launch (sizes part_min). */
unsigned int fhd__cuda_sample_grid(uint32_t B);
cudaError_t fhd__cuda_sample_gather(const fhd__sample_args *a, cudaStream_t stream);

cudaError_t fhd__cuda_sample_preload(void);

#endif
