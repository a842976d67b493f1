/* td_loss.cuh - the fused loss kernel (host-includable declarations).
 *
 * One thread per batch row does, in the order of the CPU reference:
 *   fhd__head_combine (dueling) of online(s), of the argmax source at s' and of target(s'),
 *   fhd__td_target (y), the importance weight w (PER: (q_min / q_i)^beta with fhd__det_pow,
 *   bit-identical to the CPU), fhd__td_loss (Huber/MSE + CQL, dL/dQ) and
 *   fhd__head_combine_backward, writing d(head outputs) (B, HO) for the head GEMMs;
 *   then, for prioritized replay, the new priority of its sample: atomicMax into the running
 *   max, and, if the row is the last occurrence of its slot in the (sorted) batch, the leaf is
 *   set and the integer delta added up the tree with atomicAdd (integer adds commute: the tree
 *   equals the CPU's sequential fhd__sumtree_set_batch).
 * Each warp also sums its rows' d(head outputs) per column (shuffles) and each block its loss
 * statistics; the last block adds the partials in a fixed order into the head bias gradient
 * and the statistics (deterministic).
 */
#ifndef FHD_KERNELS_TD_LOSS_CUH
#define FHD_KERNELS_TD_LOSS_CUH

#include <cuda_runtime_api.h>
#include <stdint.h>

#include "device_state.cuh"

#define FHD_LOSS_MAX_BRANCHES 64

typedef struct fhd__loss_args {
    /* network outputs, (B, HO) each, row stride HOs (HO rounded up to 4: aligned GEMM ld) */
    const float *head_on;  /* online(s) */
    const float *head_sel; /* argmax source at s': online(s') (double DQN) or target(s') */
    const float *head_tgt; /* target(s') */
    /* batch */
    const int32_t *act;    /* (B, D) */
    const float *ret;      /* (B) */
    const float *disc;     /* (B) */
    const float *w_in;     /* (B) host importance weights (train_batch), or NULL */
    /* prioritized replay (train with PER) */
    int prioritized;
    const uint64_t *q_samp; /* (B) leaf priority at sampling */
    const uint64_t *qmin;   /* (1) */
    const uint32_t *idx;    /* (B) sampled slots, non-decreasing */
    uint64_t *nodes;        /* sum tree */
    uint32_t leaves;
    float per_alpha, per_eps;
    double beta0;
    uint64_t beta_steps;
    /* outputs */
    float *w_out;  /* (B) weights used */
    float *dout;   /* (B, HO), row stride HOs: d loss / d head outputs */
    float *td;     /* (B, D) Q_d(s, a_d) - y */
    float *y;      /* (B) */
    float *db_head;   /* (HO) head bias gradient (inside the flat gradient) */
    float *colpart;   /* (4 grid, HO) per-warp column sums */
    double *statpart; /* (grid, 4) per-block loss, |td|, Q, CQL sums */
    unsigned int *done;
    fhd__dev_scalars *st; /* reads updates (beta), max_q; writes the loss statistics */
    /* layout and loss */
    uint32_t B, D, KT, HO, HOs;
    int dueling;
    int huber;
    float huber_delta, cql_alpha;
    uint32_t K[FHD_LOSS_MAX_BRANCHES], k_off[FHD_LOSS_MAX_BRANCHES];
} fhd__loss_args;

unsigned int fhd__cuda_td_loss_grid(uint32_t B);
cudaError_t fhd__cuda_td_loss(const fhd__loss_args *a, cudaStream_t stream);

cudaError_t fhd__cuda_td_loss_preload(void);

#endif
