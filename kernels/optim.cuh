/* optim.cuh - gradient clipping and Adam over the flat buffers (host-includable declarations).
 * Fuses (plugin/cpu/cpu_ops.h): the bias gradients' partial sums (of fhd__linear_backward),
 * fhd__sn_weight_backward, fhd__clip_grad_norm, fhd__adam_step and fhd__polyak (the target
 * update), in the two passes below or one cooperative launch (fhd__cuda_opt_fused).
 *
 * Two launches per update, each over the whole flat gradient (P floats):
 *   fhd__cuda_clip_grad_norm  per-block partial sums of squares (double); for a spectrally
 *       normalised layer also sum(g W) and sum(g u_i v_j), so that the gradient through
 *       W / sigma (fhd__sn_weight_backward: g' = g / sigma - c u v^T, c = sum(g W) / sigma^2) and
 *       its norm are known without a separate pass: |g'|^2 = S1/sigma^2 - 2 c S3/sigma +
 *       c^2 |u|^2 |v|^2 (with pruning the gradient is masked after the correction: the kept
 *       entries' sum of (u_i v_j)^2 for |u|^2 |v|^2, fhd__opt_sn.mask). The last block
 *       finishes the norm and the clip coefficient (PyTorch clip_grad_norm_: max_norm / (norm
 *       + 1e-6) when below 1), and Adam's bias corrections of this step (two double pow, once
 *       per update rather than per thread).
 *   fhd__cuda_adam_step  reads them: g' (SN; 0 where pruned), clipping, Adam/AdamW (PyTorch
 *       semantics), the target update when the device counter says it is due (tau == 1 hard
 *       copy, else Polyak), the copy of the online spectral-norm vectors into the target's,
 *       and the counter increment by its last block.
 * Both kernels split the buffer into segments (each weight matrix, each bias vector) and hand
 * each block a fixed chunk of one segment; the norm kernel also turns the bias segments'
 * column partials into their gradient. The kernels are optim.cu's; the passes' device code
 * optim_norm.cuh's and optim_adam.cuh's.
 */
#ifndef FHD_KERNELS_OPTIM_CUH
#define FHD_KERNELS_OPTIM_CUH

#include <cuda_runtime_api.h>
#include <stdint.h>
#include <string.h>

#include "device_state.cuh"
#include "divisor.h"

#define FHD_OPT_MAX_SEGMENTS 36 /* 2 per layer: 9 linear, 8 conv */
#define FHD_OPT_MAX_SN 8

/* A range of the flat buffers. A bias segment's gradient arrives as per-block column partials
 * (written by the loss and ReLU-backward kernels without a cross-block pass of their own): the
 * norm kernel sums them, in part order, into the gradient before anything reads it. */
typedef struct fhd__opt_segment {
    uint64_t off, len;     /* element range of the flat buffers */
    int32_t sn;            /* index into sn[] or -1 */
    uint32_t block0, nblocks;
    uint32_t chunk;        /* elements per block: 256 x fhd__opt_args.per, or FHD_OPT_BIAS_COLS
                            * (bias) */
    const float *partial;  /* bias segment: (nparts, len) column partials; NULL otherwise */
    uint32_t nparts;
    const float *extra;    /* weight segment: (nextra, len) further parts of its gradient (the
                            * dW GEMM split in two halves of the batch, or layer 0's dW partials
                            * of the ReLU-backward chunks), added into the gradient in part order
                            * by the norm kernel; NULL otherwise */
    uint32_t nextra;       /* 1 .. FHD_OPT_MAX_EXTRA with extra */
    /* bf16 GEMMs (plan w16_opt): the copy of this segment that the GEMMs read, written by the
     * Adam pass with every new value: element e's bf16 bits at w16[e - off], or (the padded
     * head's fp32 bias) its value at f32[e - off]; the target's copy_net elements further on.
     * Both NULL: no copy. */
    uint16_t *w16;
    float *f32;
    uint64_t copy_net;
} fhd__opt_segment;

/* The segment of len elements at off (sn: index into fhd__opt_args.sn or -1; a bias segment's
 * column partials), no further parts or copies; fhd__cuda_opt_plan fills its blocks. */
static inline fhd__opt_segment fhd__opt_segment_at(uint64_t off, uint64_t len, int32_t sn,
                                                   const float *partial, uint32_t nparts) {
    fhd__opt_segment s;
    memset(&s, 0, sizeof s);
    s.off = off;
    s.len = len;
    s.sn = sn;
    s.partial = partial;
    s.nparts = nparts;
    return s;
}

#define FHD_OPT_MAX_EXTRA 3

#define FHD_OPT_CHUNK 2048    /* elements per block of a weight segment (8 a thread), and of the
                               * SN-vector copy */
#define FHD_OPT_CHUNK_MIN 512 /* the same with 2 a thread (fhd__opt_args.per) */
#define FHD_OPT_BIAS_COLS 32  /* columns per block of a bias segment */

typedef struct fhd__opt_sn {
    uint32_t m, k;          /* W (m, k) */
    fhd_divisor kdiv;       /* k: an element's row (fhd_divide) */
    const float *u, *v;     /* online vectors after this update's power iteration */
    const float *sigma;     /* (1) online sigma */
    const float *norms;     /* (2) |u|^2, |v|^2 */
    const float *mask;      /* (m k) the layer's pruning masks, as W (cuda_prune.cpp); NULL
                             * without pruning. The gradient reaches the pass masked (0 where
                             * pruned), so the CPU's mask after the correction, mask (g / sigma -
                             * c u v^T), is the correction with u_i taken as 0 where pruned, and
                             * |u|^2 |v|^2 in its norm becomes the kept entries' sum of
                             * (u_i v_j)^2: the norm pass's sum 0 of the segment */
} fhd__opt_sn;

/* Written by the norm kernel's last block, read by the Adam kernel. */
typedef struct fhd__clip_info {
    float norm;             /* global norm of the (SN-corrected) gradient */
    float coef;             /* clip coefficient (1 when not clipping) */
    int32_t clip;           /* 1 when coef < 1 */
    int32_t skip;           /* 1: the training guard skips this update (kernels/guard.cuh) */
    float sn_c[FHD_OPT_MAX_SN];   /* c of each SN layer */
    float sn_inv[FHD_OPT_MAX_SN]; /* 1 / sigma of each SN layer */
    float step;                   /* lr / (1 - beta1^t), Adam step t = updates + 1 */
    float bc2_sqrt;               /* sqrt(1 - beta2^t) */
    float pre_step, pre_bc2_sqrt; /* the same for the fused pass, written by the priority
                                   * update kernel before it (fhd__loss_args.adam_step) */
} fhd__clip_info;

typedef struct fhd__opt_args {
    float *params;     /* online [0, P), target [T, T + P) */
    float *grad, *m, *v; /* (P) */
    float *sn_vec;     /* (2 * sn_size): online u/v, then target */
    uint64_t P, T, sn_size; /* T: offset of the target network in params */
    fhd__opt_segment seg[FHD_OPT_MAX_SEGMENTS];
    uint32_t nseg;
    uint32_t nblocks;      /* norm / Adam grid (Adam adds sn_blocks) */
    uint32_t sn_blocks;    /* Adam blocks that copy the SN vectors */
    uint32_t one_pass;     /* the fused pass in one pass (fhd__cuda_opt_fused_grid) */
    uint32_t per;          /* elements a thread of a weight block: 8, 4 or 2 (fhd__cuda_opt_plan) */
    fhd__opt_sn sn[FHD_OPT_MAX_SN];
    uint32_t nsn;
    double *partial;       /* (nblocks, 4) */
    unsigned int *done_norm, *done_adam;
    fhd__clip_info *clip;
    fhd__dev_scalars *st;
    float max_norm;
    /* Adam: scalars in double as the CPU reference (PyTorch computes them from Python floats) */
    double lr, beta1, beta2, weight_decay;
    float eps;
    int decoupled;
    uint64_t target_interval;
    float tau;
    /* the training guard's bounds (kernels/guard.cuh; 0: none, and both 0 without a guard) */
    float guard_max_loss, guard_max_norm;
    /* config detailed_metrics (NULL: off): the finish of the norm writes each segment's squared
     * norm into det[(updates + 1) % 2].seg_sq (device_state.cuh) */
    fhd__dev_detail_slot *det;
} fhd__opt_args;

/* Fill block0 / nblocks of the segments (blocks of 256 x per weights, per 8, 4 or 2), the grids
 * and the norm's sum jobs. Any plan suits every kernel; fhd__cuda_opt_fused_grid re-plans. */
void fhd__cuda_opt_plan(fhd__opt_args *a, uint32_t per);
cudaError_t fhd__cuda_clip_grad_norm(const fhd__opt_args *a, cudaStream_t stream);
cudaError_t fhd__cuda_adam_step(const fhd__opt_args *a, cudaStream_t stream);
/* Grid of the fused pass: every block co-resident (cooperative launch), at most one per
 * block of the two passes; 0 when the device cannot launch cooperative kernels. Plans a again
 * (a->per) and sets a->one_pass where the grid is one block of each pass per block and the
 * one-pass form pays. */
unsigned int fhd__cuda_opt_fused_grid(fhd__opt_args *a, int device);
/* Norm, clip and Adam in one cooperative launch (the two kernels above, with a grid barrier
 * between them). */
cudaError_t fhd__cuda_opt_fused(const fhd__opt_args *a, unsigned int grid, cudaStream_t stream);

cudaError_t fhd__cuda_optim_preload(void);

#endif
