/* cuda_prune.cpp - gradual magnitude pruning on the CUDA backend (docs/design.md section 4,
 * Pruning): the selection's arguments, what it records into the update graph, and the masks
 * kept applied across writes. The rule and the schedule are plugin/prune.h's; the kernels are
 * kernels/prune.cuh's.
 *
 * b->mask (P) has the layout of one network, 1 kept and 0 pruned; its segments are the mask
 * views of the layout (fhd__layout_mask: conv, torso, head weights in scope), each its own
 * group or all one group (prune_global). Invariant, as on the CPU: the online weights are 0
 * wherever the mask is 0, and so are their Adam moments after a selection. In the update:
 *   s0  (after every dW GEMM and the conv permutation back) the gradient masked, with layer
 *       0's further dW parts (split_dw0 / fuse_dw0), which the optimiser's norm pass adds in:
 *       clipping, the norm and Adam see the masked gradient, so a pruned weight stays 0; a
 *       spectrally normalised layer's correction, which the optimiser applies, is masked there
 *       (its masks in fhd__opt_sn.mask; optim.cuh)
 *   s0  optimiser (Adam, target update, counter + 1)
 *   s0  the selection: FHD_PRUNE_PASSES histogram kernels and the apply kernel, each reading
 *       the device counter and the guard's decision and returning at once off a pruning update
 * No host decision and no synchronisation: train(n) replays the same graph for every update.
 */
#include <string.h>

#include "cuda_internal.h"

int32_t fhd__cuda_prune_prepare(fhd__backend *b) {
    if (!b->plan.prune)
        return FHD_OK;
    const fhd__layout *lo = &b->lo;
    const fhd__config *c = &b->cfg;
    fhd__prune_args *a = &b->a_prune;
    memset(a, 0, sizeof *a);
    if (lo->num_masks > FHD_PRUNE_MAX_SEGS)
        return fhd__cuda_failf(b, FHD_ERR_INTERNAL, "pruning: %u weight tensors, at most %d",
                               lo->num_masks, FHD_PRUNE_MAX_SEGS);
    a->sparsity = c->prune_sparsity;
    a->start = c->prune_start;
    a->end = c->prune_end;
    a->frequency = c->prune_frequency;
    a->nsegs = lo->num_masks;
    a->ngroups = c->prune_global ? 1u : lo->num_masks;
    for (uint32_t j = 0; j < lo->num_masks; j++) {
        fhd__tensor_ref t;
        if (fhd__layout_mask(lo, j, &t) != 0)
            return fhd__cuda_failf(b, FHD_ERR_INTERNAL, "pruning: no mask view %u", j);
        fhd__prune_seg *sg = &a->seg[j];
        sg->off = t.offset;
        sg->count = t.count;
        sg->group = c->prune_global ? 0u : j;
        a->group_n[sg->group] += t.count;
        /* the optimiser's further parts of this weight's gradient, if it has any, and the
         * masks of a spectrally normalised one for its correction (optim.cuh, fhd__opt_sn) */
        for (uint32_t s = 0; s < b->a_opt.nseg; s++) {
            fhd__opt_segment *os = &b->a_opt.seg[s];
            if (os->off != t.offset)
                continue;
            if (os->extra) {
                sg->extra = (float *)os->extra;
                sg->nextra = os->nextra;
            }
            if (os->sn >= 0) {
                if (os->len != t.count)
                    return fhd__cuda_failf(b, FHD_ERR_INTERNAL,
                                           "pruning: mask view %u is not its layer's whole W", j);
                b->a_opt.sn[os->sn].mask = b->mask + t.offset;
            }
        }
    }
    fhd__cuda_prune_plan(a);
    a->W = b->params;
    a->adam_m = b->adam_m;
    a->adam_v = b->adam_v;
    a->mask = b->mask;
    a->dev = b->st;
    a->skip = &b->clip->skip;
    a->groups = b->prune_groups;
    a->hist = b->prune_hist;
    a->counter = b->prune_done;
    FHD_CK(b, fhd__cuda_prune_preload());
    /* nothing pruned yet; the scratch zero (the kernels leave it zero after each selection) */
    cudaStream_t s = b->s_main;
    FHD_CK(b, fhd__cuda_prune_fill_ones(b->mask, b->P, s));
    FHD_CK(b, cudaMemsetAsync(b->prune_groups, 0, lo->num_masks * sizeof(fhd__prune_group), s));
    FHD_CK(b, cudaMemsetAsync(b->prune_hist, 0, (size_t)lo->num_masks * FHD_PRUNE_BINS * 4, s));
    FHD_CK(b, cudaMemsetAsync(b->prune_done, 0, 4, s));
    return fhd__cuda_sync(b, s);
}

int32_t fhd__cuda_prune_record_mask(fhd__backend *b, cudaStream_t s) {
    if (b->plan.prune)
        FHD_CK(b, fhd__cuda_prune_mask_grad(&b->a_prune, b->grad, s));
    return FHD_OK;
}

int32_t fhd__cuda_prune_record_select(fhd__backend *b, cudaStream_t s) {
    if (b->plan.prune)
        FHD_CK(b, fhd__cuda_prune_select(&b->a_prune, s));
    return FHD_OK;
}

int32_t fhd__cuda_prune_after_write(fhd__backend *b, int kind, uint64_t offset) {
    if (!b->plan.prune || !(kind == FHD_STATE_MASK || (kind == FHD_STATE_PARAMS && offset < b->P)))
        return FHD_OK;
    FHD_CK(b, fhd__cuda_prune_mask(&b->a_prune, b->params, b->s_main));
    return fhd__cuda_sync(b, b->s_main);
}
