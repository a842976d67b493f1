/* td_loss.cuh - the fused loss kernel and the priority update (host-includable declarations).
 * Fuses (plugin/cpu/cpu_ops.h):
 *   fhd__cuda_td_loss   [fhd__linear_forward of both heads (head_nc)], fhd__head_combine (x3),
 *                       fhd__td_target, the PER weight, fhd__td_loss, fhd__diversity_term
 *                       (cpu_diversity.c; kernels/diversity.cuh), q_delta's sum (cpu_metrics.c),
 *                       fhd__head_combine_backward and the head's db partials of
 *                       fhd__linear_backward (td_loss.cu)
 *   fhd__cuda_head_dx   the head's dx of fhd__linear_backward + fhd__relu_backward below it
 *                       (head_dx.cu)
 *   priority update     the new priorities of cpu_backend.c's update (not a cpu_ops.h op;
 *                       td_priority.cu)
 *
 * Loss kernel: each block takes fhd__cuda_td_loss_rows(B) consecutive batch rows (8 for small
 * batches, so that the work spreads over more SMs; 32 above FHD_LOSS_SMALL_BATCH). When the three
 * head-output tiles fit in shared memory (staged mode, heads up to ~200 outputs), the block
 * first copies them in with coalesced loads, so that the per-row work reads shared memory; larger
 * heads are read from global memory directly. The batch minimum of the sampled priorities comes
 * from the sampling blocks' minima. Then the threads of a row (one per branch, up to
 * 256 / rows) do, in the order of the CPU reference, each branch's sums being taken in branch
 * order:
 *   fhd__head_combine (dueling) of online(s), of the argmax source at s' and of target(s'),
 *   fhd__td_target (y), the importance weight w (PER: (q_min / q_i)^beta with fhd__det_pow,
 *   bit-identical to the CPU), fhd__td_loss (Huber/MSE + CQL, dL/dQ) and
 *   the diversity term's gradient (after CQL's, as the CPU adds it) and
 *   fhd__head_combine_backward, producing d(head outputs) (B, HO) for the head GEMMs, and the
 *   mean |td| its sample's new priority comes from (prioritized replay). The PER importance
 *   weights are computed by the block's last warp while the others stage the tiles. With
 *   head_nc, the block computes its rows of both heads itself (below) instead of staging them.
 * The block writes its column sums of d(head outputs) (row order: the head bias gradient's
 * partials, summed by the optimiser's norm kernel) and its loss statistics. For a small head
 * (HO x H <= FHD_LOSS_FUSE_MAX, and all the blocks' reads of W_head <= FHD_LOSS_FUSE_TRAFFIC)
 * a kernel with the same blocks (fhd__cuda_head_dx, the loss kernel's programmatic dependent)
 * does the head's dx and the ReLU backward of the layer below (dz_below and its bias-gradient
 * partials), so the dx GEMM and the ReLU-backward kernel of that layer are not run.
 *
 * Priority update (its own kernel, on a branch beside the backward pass, launched on every
 * update): block 0 sums the loss blocks' statistics in block order (deterministic) into the
 * device scalars and sets the counter of a batch sampled ahead (sample.cuh); with prioritized
 * replay, each row's new quantised priority (fhd__prio_from_td), the running maximum, and for the
 * last occurrence of each slot in the (sorted) batch its leaf, and the integer delta up the tree
 * with atomicAdd, one atomic per node per warp (integer adds commute: the tree equals the CPU's
 * sequential fhd__sumtree_set_batch).
 */
#ifndef FHD_KERNELS_TD_LOSS_CUH
#define FHD_KERNELS_TD_LOSS_CUH

#include <cuda_runtime_api.h>
#include <stdint.h>

#include "device_state.cuh"

#define FHD_LOSS_MAX_BRANCHES 64

typedef struct fhd__loss_args {
    /* network outputs, (B, HO) each, row stride HOs (HO rounded up to 4, or 8 with bf16 GEMMs:
     * aligned GEMM ld) */
    const float *head_on;  /* online(s) */
    const float *head_sel; /* argmax source at s': online(s') (double DQN) or target(s') */
    const float *head_tgt; /* target(s') */
    /* batch */
    const int32_t *act; /* (B, D) */
    const float *ret;   /* (B) */
    const float *disc;  /* (B) */
    const float *w_in;  /* (B) host importance weights (train_batch), or NULL */
    /* prioritized replay (train with PER) */
    int prioritized;
    const uint64_t *q_samp; /* (B) leaf priority at sampling */
    const uint64_t *qparts; /* (nqparts) per-block minima of q_samp (the sampling kernel's) */
    uint32_t nqparts;
    const uint32_t *idx; /* (B) sampled slots, non-decreasing */
    float *td_row;       /* (B) mean |td| of each row over its branches (the new priority's
                          * input; fhd__cuda_priority_update quantises it) */
    uint64_t *nodes;     /* sum tree */
    uint32_t leaves;
    float per_alpha, per_eps;
    double beta0;
    uint64_t beta_steps;
    /* outputs */
    float *w_out;         /* (B) weights used */
    float *dout;          /* (B, HO), row stride HOs: d loss / d head outputs */
    void *dout16;         /* bf16 GEMMs: dout rounded to bf16 too (row stride HOs; its padding
                           * columns are left as they are), written in staged mode only: setup
                           * clears it otherwise (the caller then converts dout) */
    float *td;            /* (B, D) Q_d(s, a_d) - y */
    float *y;             /* (B) */
    float *colpart;       /* (grid, HO) per-block column sums of dout: the head bias gradient's
                           * partials, summed by the optimiser's norm kernel */
    double *statpart;     /* (grid, fhd_loss_nstat(stat_extra)) per-block loss, |td|, Q, CQL sums,
                           * then (with stat_extra) entropy and q_delta sums, summed in block order
                           * by fhd_priority_update_kernel */
    fhd__dev_scalars *st; /* reads updates (beta), max_q; writes the loss statistics */
    /* the training guard (config `guard`) with prioritized replay: prio_stage (B) takes the new
     * priorities, which fhd__cuda_priority_commit applies after the optimiser unless *guard_skip
     * (NULL: no guard; the priorities are written at once) */
    uint64_t *prio_stage;
    const int32_t *guard_skip;
    /* Adam's scalars of the coming step for the fused optimiser, by the priority update */
    float *adam_step, *adam_bc2_sqrt;
    double lr, beta1, beta2;
    /* layout and loss */
    uint32_t B, D, KT, HO, HOs;
    int dueling;
    int huber;
    float huber_delta, cql_alpha;
    /* the action-diversity term (config diversity_coef > 0; div_coef 0: none): the loss gains
     * -div_coef x the mean entropy, dL/dQ_d the gradient of kernels/diversity.cuh with
     * div_g = coef / (B D T) and div_inv_t = 1 / T (coef and T as floats, as the CPU's) */
    double div_coef, div_g, div_inv_t;
    int detailed;   /* config detailed_metrics: q_delta's sum (with double DQN), else NaN */
    int stat_extra; /* statpart's entropy and q_delta sums are written (either of the above) */
    uint32_t K[FHD_LOSS_MAX_BRANCHES], k_off[FHD_LOSS_MAX_BRANCHES];
    /* backward through the head and the ReLU below it, fused (when fhd__cuda_td_loss_setup
     * finds the head small enough; the dx GEMM and ReLU-backward kernel are skipped then):
     *   dz (B, H) = alpha dout W_head * (h > 0), bpart (grid, H) its per-block column sums */
    const float *w_head;  /* (HO, H) online head weight */
    const float *alpha;   /* (1) 1, or 1/sigma of a normalised head */
    const float *h_below; /* (>= B, H) online activation of the last torso layer */
    float *dz_below;      /* (B, H) */
    float *bpart;         /* (grid, H) */
    uint32_t H;           /* width of the last torso layer (0: no torso) */
    /* the head forwards in the loss kernel (head_nc != 0): a narrow head (at most
     * FHD_NARROW_MAX_OUT outputs), whose narrow kernels are then not run. After its wait (for
     * the last torso layers' GEMMs) each block computes its rows of online(s), target(s') and
     * (double DQN) online(s') with the narrow kernel's sums (kernels/narrow.cuh: the same bits
     * when B is a multiple of 4), both networks' W_head copied into shared memory while the x
     * loads are in flight, instead of staging the head tiles from global memory. It lets the
     * head-dx kernel start only after that. Asked for by the caller (head_nc = the narrow
     * kernel's chunk), kept by fhd__cuda_td_loss_setup where the tiles are staged, x and W rows
     * take float4 loads (fhd__cuda_narrow_linear_vec), with 8 rows a block, a torso (H > 0)
     * and both W_head in FHD_LOSS_HEAD_SMEM bytes. */
    const float *b_head;    /* (HO) online head bias */
    const float *x_tgt;     /* (B, H) the target's last torso activation */
    const float *w_head_tg; /* (HO, H) target head weight */
    const float *b_head_tg; /* (HO) its bias */
    const float *alpha_tg;  /* (1) 1, or the target head's 1/sigma */
    uint32_t head_nc;       /* outputs a chunk (8, 16, 24, 32), or 0: the head forwards before */
    /* set by fhd__cuda_td_loss_setup */
    uint32_t wsm_off;     /* head_nc: floats into the dynamic shared memory where W_head goes */
    uint32_t HOp;         /* shared-memory row stride (odd: no bank conflicts), 0: not staged */
    uint32_t loss_blocks; /* the loss kernel's grid */
    int fuse_dx;          /* the head's dx by fhd__cuda_head_dx after the loss kernel */
    int pdl;              /* launched as a programmatic dependent of the kernel before it (sm_90) */
    uint32_t smem_bytes;
    int dx_pdl; /* the head-dx kernel as the loss kernel's programmatic dependent */
    uint32_t dx_smem_bytes;
} fhd__loss_args;

#define FHD_LOSS_NSTAT 6 /* statistics a loss block leaves in statpart (at most) */
#ifdef __CUDACC__
/* a statpart row's length: the four loss statistics, and the two of stat_extra */
static __host__ __device__ constexpr uint32_t fhd_loss_nstat(bool extra) {
    return extra ? FHD_LOSS_NSTAT : 4u;
}
#endif
#define FHD_LOSS_THREADS 256      /* rows x branches for the row work; all for tiles, sums and dz */
#define FHD_LOSS_SMALL_BATCH 4096 /* up to this batch, 8 rows per block (more blocks), else 32 */
#define FHD_LOSS_FUSE_MAX 16384   /* largest HO x H whose dx is done inside the loss kernel */
#define FHD_LOSS_FUSE_TRAFFIC (64u << 20) /* and W_head read by all the blocks, at most (bytes) */
/* both networks' W_head staged for head_nc, at most (more shared memory costs the loss
 * kernel's blocks more than the narrow head kernels do) */
#define FHD_LOSS_HEAD_SMEM (32u << 10)

/* Batch rows per block (fhd__cuda_td_loss_rows) and blocks of the loss kernel. */
uint32_t fhd__cuda_td_loss_rows(uint32_t B);
unsigned int fhd__cuda_td_loss_grid(uint32_t B);
/* Choose staged or direct mode for a's head size given the device's opt-in shared-memory limit
 * per block, and raise the kernel's limit when staging needs more than 48 KiB. Before any
 * capture. */
cudaError_t fhd__cuda_td_loss_setup(fhd__loss_args *a, int device);
cudaError_t fhd__cuda_td_loss(const fhd__loss_args *a, cudaStream_t stream);
/* fuse_dx: dz_below and its per-block column sums from the loss kernel's dout, right after it
 * on the same stream. */
cudaError_t fhd__cuda_head_dx(const fhd__loss_args *a, cudaStream_t stream);
/* Its shared memory and launch form for a (fuse_dx set), by fhd__cuda_td_loss_setup. */
cudaError_t fhd__cuda_head_dx_setup(fhd__loss_args *a);
/* The loss statistics from the loss blocks' partials, Adam's scalars, PER's beta and the
 * sampling counter, all the optimiser reads of the loss (two blocks). After the loss kernel,
 * on every update. */
cudaError_t fhd__cuda_loss_scalars(const fhd__loss_args *a, cudaStream_t stream);
/* Prioritized replay (a->prioritized): the new priorities (fhd__prio_from_td of td_row) into
 * the tree (the last occurrence of a slot sets its leaf, the integer deltas go up the tree)
 * and the running maximum, or with the guard staged in a->prio_stage. After the loss kernel,
 * beside fhd__cuda_loss_scalars; nothing the optimiser reads. */
cudaError_t fhd__cuda_priority_update(const fhd__loss_args *a, cudaStream_t stream);
/* The guard's commit of the staged priorities (a->prio_stage), after the optimiser: skipped
 * where the optimiser's guard predicate (*a->guard_skip) says the update was skipped. */
cudaError_t fhd__cuda_priority_commit(const fhd__loss_args *a, cudaStream_t stream);

/* Load the kernels of td_loss.cu (and through it head_dx.cu's and td_priority.cu's) before a
 * capture. */
cudaError_t fhd__cuda_td_loss_preload(void);
cudaError_t fhd__cuda_head_dx_preload(void);
cudaError_t fhd__cuda_priority_preload(void);

#endif
