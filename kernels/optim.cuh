/* optim.cuh - gradient clipping and Adam over the flat buffers (host-includable declarations).
 *
 * Two launches per update, each over the whole flat gradient (P floats):
 *   fhd__cuda_clip_grad_norm  per-block partial sums of squares (double); for a spectrally
 *       normalised layer also sum(g W) and sum(g u_i v_j), so that the gradient through
 *       W / sigma (fhd__sn_weight_backward: g' = g / sigma - c u v^T, c = sum(g W) / sigma^2) and
 *       its norm are known without a separate pass: |g'|^2 = S1/sigma^2 - 2 c S3/sigma +
 *       c^2 |u|^2 |v|^2. The last block finishes the norm and the clip coefficient
 *       (PyTorch clip_grad_norm_: max_norm / (norm + 1e-6) when below 1).
 *   fhd__cuda_adam_step  reads them: g' (SN), clipping, Adam/AdamW (PyTorch semantics), the
 *       target update when the device counter says it is due (tau == 1 hard copy, else Polyak),
 *       the copy of the online spectral-norm vectors into the target's, and the counter
 *       increment by its last block.
 * Both kernels split the buffer into segments (SN weight matrices and the plain rest) and hand
 * each block a fixed chunk of one segment.
 */
#ifndef FHD_KERNELS_OPTIM_CUH
#define FHD_KERNELS_OPTIM_CUH

#include <cuda_runtime_api.h>
#include <stdint.h>

#include "device_state.cuh"

#define FHD_OPT_MAX_SEGMENTS 24
#define FHD_OPT_MAX_SN 8

typedef struct fhd__opt_segment {
    uint64_t off, len;     /* element range of the flat buffers */
    int32_t sn;            /* index into sn[] or -1 */
    uint32_t block0, nblocks;
} fhd__opt_segment;

typedef struct fhd__opt_sn {
    uint32_t m, k;          /* W (m, k) */
    const float *u, *v;     /* online vectors after this update's power iteration */
    const float *sigma;     /* (1) online sigma */
    const float *norms;     /* (2) |u|^2, |v|^2 */
} fhd__opt_sn;

/* Written by the norm kernel's last block, read by the Adam kernel. */
typedef struct fhd__clip_info {
    float norm;             /* global norm of the (SN-corrected) gradient */
    float coef;             /* clip coefficient (1 when not clipping) */
    int32_t clip;           /* 1 when coef < 1 */
    int32_t pad;
    float sn_c[FHD_OPT_MAX_SN];   /* c of each SN layer */
    float sn_inv[FHD_OPT_MAX_SN]; /* 1 / sigma of each SN layer */
} fhd__clip_info;

typedef struct fhd__opt_args {
    float *params;     /* (2P): online [0, P), target [P, 2P) */
    float *grad, *m, *v; /* (P) */
    float *sn_vec;     /* (2 * sn_size): online u/v, then target */
    uint64_t P, sn_size;
    fhd__opt_segment seg[FHD_OPT_MAX_SEGMENTS];
    uint32_t nseg;
    uint32_t nblocks;      /* norm / Adam grid (Adam adds sn_blocks) */
    uint32_t sn_blocks;    /* Adam blocks that copy the SN vectors */
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
} fhd__opt_args;

/* Fill block0 / nblocks of the segments and the grids. */
void fhd__cuda_opt_plan(fhd__opt_args *a);
cudaError_t fhd__cuda_clip_grad_norm(const fhd__opt_args *a, cudaStream_t stream);
cudaError_t fhd__cuda_adam_step(const fhd__opt_args *a, cudaStream_t stream);

cudaError_t fhd__cuda_optim_preload(void);

#endif
