/* device_state.cuh - the small device-resident state the kernels share (host-includable).
 *
 * One 128-byte struct lives in device memory. The training kernels read the update counter from
 * it (sampling counter, beta annealing, Adam step, target-update interval: all decided on the
 * device, so a captured graph replays unchanged), and write their statistics into it. After each
 * train() call the whole struct is copied asynchronously into a pinned snapshot buffer.
 */
#ifndef FHD_KERNELS_DEVICE_STATE_CUH
#define FHD_KERNELS_DEVICE_STATE_CUH

#include <stdint.h>

typedef struct fhd__dev_scalars {
    uint64_t updates;      /* updates done; read by every kernel of an update, +1 at its end by
                            * the optimiser (fused: block 0 after the grid barrier; else the
                            * Adam kernel's last block) */
    uint64_t replay_size;  /* filled replay slots (uniform sampling draws below it) */
    uint64_t max_q;        /* running max of quantised priorities (new transitions get it) */
    uint64_t stats_update; /* the update the statistics below belong to (0: none yet) */
    float loss, td_abs_mean, q_mean, grad_norm, beta;
    float reserved;
    uint64_t sample_ahead; /* updates + skipped + 1, written by the priority update (before the
                            * optimiser raises a counter): the sampling counter of a batch sampled
                            * ahead, for the next update, beside the optimiser */
    /* the training guard (config `guard`, common/guard.h, docs/design.md section 4) */
    uint64_t skipped;      /* updates skipped: the sampling counter (and beta's) is updates +
                            * skipped; +1 by the optimiser (where it raises updates otherwise) */
    uint64_t skip_update;  /* the latest skipped update's number (updates + skipped then), 0: none */
    float skip_loss, skip_grad_norm; /* its loss and gradient norm */
    /* the priority update leaves this update's loss statistics here, and the optimiser moves
     * them into loss, td_abs_mean, q_mean, beta when it applies the update (kernels/guard.cuh) */
    float pend_loss, pend_td_abs_mean, pend_q_mean, pend_beta;
    /* the same way: the diversity term's mean entropy (config diversity_coef) and q_delta
     * (config detailed_metrics; NaN without double DQN), pending, then applied */
    float pend_entropy, pend_q_delta, entropy, q_delta;
    float reserved2[2];
} fhd__dev_scalars;

/* Config detailed_metrics' sums of squares (docs/design.md section 4, Metrics), right after the
 * scalars in the same device allocation (fhd__dev_record), so that one copy takes both into a
 * snapshot. Update t (its number if applied: updates + 1) writes slot t % 2; the guard's skip
 * leaves stats_update as it was, so slot stats_update % 2 always holds the update the statistics
 * belong to, with no copy at the decision. The host takes the square roots and adds each layer's
 * segments (plugin/cuda/cuda_divmetrics.cpp). */
#define FHD_DEV_DETAIL_SEGMENTS 36 /* FHD_OPT_MAX_SEGMENTS (kernels/optim.cuh) */
#define FHD_DEV_DETAIL_BRANCHES 64 /* FHD_MAX_BRANCHES (plugin/config.h) */
typedef struct fhd__dev_detail_slot {
    double seg_sq[FHD_DEV_DETAIL_SEGMENTS]; /* each optimiser segment's squared gradient norm
                                             * before clipping (the norm pass's finish) */
    double head_w_sq[FHD_DEV_DETAIL_BRANCHES]; /* branch d's action rows of W_head, squared norm
                                                * before the update (kernels/metrics.cu) */
    double head_g_sq[FHD_DEV_DETAIL_BRANCHES]; /* and of their gradient */
} fhd__dev_detail_slot;

typedef struct fhd__dev_record {
    fhd__dev_scalars s;
    fhd__dev_detail_slot detail[2];
} fhd__dev_record;

#ifdef __cplusplus
static_assert(sizeof(fhd__dev_scalars) == 128, "fhd__dev_scalars is one 128-byte record");
static_assert(sizeof(fhd__dev_record) == 128 + 2 * sizeof(fhd__dev_detail_slot),
              "the detail follows the scalars unpadded");
#endif

/* The sampling counter of the update the record is at (the RNG event of its batch, and beta's
 * annealing step): every update run, applied or skipped by the guard. */
#if defined(__CUDACC__)
__host__ __device__ __forceinline__
#else
static inline
#endif
uint64_t fhd__dev_sample_counter(const fhd__dev_scalars *s) {
    return s->updates + s->skipped;
}

/* Beta of update u (PER importance-sampling exponent annealed linearly to 1), computed in double
 * exactly as the CPU reference: beta0 + (1 - beta0) * min(1, u / steps), then rounded to float.
 * Written with uncontracted operations so host and device agree bit for bit. */
#if defined(__CUDACC__)
__host__ __device__ __forceinline__
#else
static inline
#endif
float fhd__beta_at(double beta0, uint64_t steps, uint64_t u) {
#if defined(__CUDA_ARCH__)
    double f = __ddiv_rn((double)u, (double)steps);
    if (f > 1.0)
        f = 1.0;
    return (float)__dadd_rn(beta0, __dmul_rn(__dsub_rn(1.0, beta0), f));
#else
    double f = (double)u / (double)steps;
    if (f > 1.0)
        f = 1.0;
    return (float)(beta0 + (1.0 - beta0) * f);
#endif
}

#endif
