/* metrics.cuh - config detailed_metrics on the device (docs/design.md section 4, Metrics; the
 * CPU's is plugin/cpu/cpu_metrics.c), host-includable declarations.
 *
 * What the update already reduces carries most of it: q_delta is a column of the loss blocks'
 * statistics (td_loss.cuh), each layer's gradient norm comes from the optimiser's per-segment
 * sums (its norm pass's finish writes them, kernels/optim_norm.cuh). The per-branch norms of
 * W_head's action rows (weights before the update) and of their gradient need sums over row ranges
 * that no kernel forms: the row-norm kernel here, after the head's dW GEMM on that GEMM's branch
 * beside the backward (the one graph node detailed_metrics adds): one warp a row, FHD_DETAIL_ROWS
 * rows a block, each block's row sums in double into rows; its last block (last-block-done) sums
 * each branch's rows in a fixed order into the record's slot of the update (device_state.cuh).
 */
#ifndef FHD_KERNELS_METRICS_CUH
#define FHD_KERNELS_METRICS_CUH

#include <cuda_runtime_api.h>
#include <stdint.h>

#include "device_state.cuh"

#define FHD_DETAIL_ROWS 8 /* W_head rows a block of the row-norm kernel: a warp each */

typedef struct fhd__detail_args {
    const float *w;       /* (nrows, H) W_head's action rows (after V's with dueling), online */
    const float *g;       /* (nrows, H) their gradient as the head's dW GEMM left it */
    const float *mask;    /* (nrows, H) their pruning masks where the head is pruned (the norm is
                           * the masked gradient's, as the CPU's), else NULL */
    uint32_t H, nrows, D; /* the head's input width, KT, branches */
    uint32_t k_off[FHD_DEV_DETAIL_BRANCHES + 1]; /* branch d: rows [k_off[d], k_off[d + 1]) */
    double *rows;               /* (nrows, 2) scratch: each row's sum W^2, sum g^2 */
    unsigned int *done;         /* last-block counter (zeroed once; the last block resets it) */
    const fhd__dev_scalars *st; /* updates: the slot (updates + 1) % 2 */
    fhd__dev_detail_slot *det;  /* the record's two slots */
} fhd__detail_args;

/* The row-norm kernel on stream (at least two blocks). */
cudaError_t fhd__cuda_detail_rows(const fhd__detail_args *a, cudaStream_t stream);
cudaError_t fhd__cuda_metrics_preload(void);

#endif
