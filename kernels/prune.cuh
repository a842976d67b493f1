/* prune.cuh - gradual magnitude pruning on the device (host-includable declarations; the rule
 * and the schedule are plugin/prune.h's, docs/design.md section 4, Pruning).
 *
 * The selection runs after the optimiser of every update and does something only on pruning
 * updates: each kernel computes the schedule from the device counter (dev->updates, already
 * the update's number t) and the guard's decision (a skipped update leaves the counter at
 * t - 1 and prunes nothing), so the one captured graph serves every update.
 *
 * Keys: key = (|w| bits (31) << 32) | flat offset, 63 bits, unique, ordered as the rule's
 * (|w|, index). A radix select finds, per group, the k-th smallest key T in FHD_PRUNE_PASSES
 * passes of FHD_PRUNE_BITS bits from the top: each pass is one multi-block kernel whose blocks
 * histogram the digit of the keys matching the group's prefix (shared-memory atomics, then
 * integer atomics into the group's global histogram), and whose last block (last-block-done)
 * picks the bucket holding rank k - 1 and extends the prefix. The apply kernel then writes the
 * masks (key <= T: 0), and zeroes the pruned weights and their Adam moments. No host sort, no
 * readback, no single-block kernel (every segment has at least two blocks).
 */
#ifndef FHD_KERNELS_PRUNE_CUH
#define FHD_KERNELS_PRUNE_CUH

#include <cuda_runtime_api.h>
#include <stdint.h>

#include "device_state.cuh"

#define FHD_PRUNE_MAX_SEGS 18 /* conv 8 + linear torso 8 + head 2 */
#define FHD_PRUNE_BITS 11
#define FHD_PRUNE_BINS (1u << FHD_PRUNE_BITS)
#define FHD_PRUNE_PASSES 6   /* 6 x 11 >= 63 key bits */
#define FHD_PRUNE_CHUNK 4096 /* elements per block (256 threads x 16) */
#define FHD_PRUNE_THREADS 256

/* One pruned weight tensor: its view of the flat buffers and its group. */
typedef struct fhd__prune_seg {
    uint64_t off;             /* first element (one network's layout) */
    uint64_t count;           /* elements */
    uint32_t group;           /* 0 with prune_global, else the segment's own index */
    uint32_t block0, nblocks; /* the blocks of every kernel's grid that cover it (>= 2) */
    uint32_t nextra;          /* further parts of its gradient (0: none) */
    float *extra;             /* (nextra, count): those parts (fhd__opt_segment.extra, which the
                               * optimiser's norm pass adds into the gradient), or NULL */
} fhd__prune_seg;

/* Per group, device scratch (zero at allocation; the apply kernel's last block zeroes it). */
typedef struct fhd__prune_group {
    uint64_t prefix, pmask; /* key bits found so far, and which */
    uint64_t rank;          /* rank of the k-th smallest among the keys matching prefix */
    uint64_t k;             /* weights pruned (written by pass 0's last block) */
} fhd__prune_group;

typedef struct fhd__prune_args {
    double sparsity;                  /* s_f (prune_sparsity, > 0) */
    uint64_t start, end, frequency;   /* the schedule (prune_start, prune_end, prune_frequency) */
    uint32_t nsegs, ngroups, nblocks; /* nblocks: the grid of every kernel */
    uint32_t pad;
    uint64_t group_n[FHD_PRUNE_MAX_SEGS]; /* elements of each group */
    fhd__prune_seg seg[FHD_PRUNE_MAX_SEGS];
    float *W, *adam_m, *adam_v, *mask; /* online parameters, moments, masks (P, one layout) */
    const fhd__dev_scalars *dev;       /* dev->updates = t */
    const int32_t *skip;               /* the training guard's decision for this update
                                        * (fhd__clip_info.skip): a skipped update selects
                                        * nothing, as on the CPU; NULL: never skipped */
    fhd__prune_group *groups;          /* (ngroups) scratch */
    uint32_t *hist;                    /* (ngroups, FHD_PRUNE_BINS) scratch, zero */
    unsigned int *counter;             /* last-block-done counter, zero */
} fhd__prune_args;

/* Fill seg[i].block0 and nblocks and a->nblocks from the segments' counts (host). */
void fhd__cuda_prune_plan(fhd__prune_args *a);

/* The selection of update dev->updates (a no-op unless it is a pruning update):
 * FHD_PRUNE_PASSES histogram kernels and the apply kernel, on `stream` (capturable). */
cudaError_t fhd__cuda_prune_select(const fhd__prune_args *a, cudaStream_t stream);

/* x = 0 where mask = 0 over the segments (a gradient, or the weights after a write); every
 * update, no predicate. Grid a->nblocks. */
cudaError_t fhd__cuda_prune_mask(const fhd__prune_args *a, float *x, cudaStream_t stream);

/* The gradient of the update masked: grad (P) as fhd__cuda_prune_mask, and each segment's
 * further parts (seg.extra) with it, so that their sum in the optimiser is masked too. */
cudaError_t fhd__cuda_prune_mask_grad(const fhd__prune_args *a, float *grad, cudaStream_t stream);

/* mask[0, n) = 1: nothing pruned (the masks' initial value). Not for a capture. */
cudaError_t fhd__cuda_prune_fill_ones(float *mask, uint64_t n, cudaStream_t stream);

/* Load this file's kernels (lazy module loading must not happen inside a graph capture). */
cudaError_t fhd__cuda_prune_preload(void);

#endif
