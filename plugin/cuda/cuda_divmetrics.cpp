/* cuda_divmetrics.cpp - the kernel arguments of the action-diversity term (config diversity_coef,
 * diversity_temperature) and of config detailed_metrics (docs/design.md section 4, Loss and
 * Metrics), fixed at create once the loss and optimiser arguments are, before the capture.
 *
 * No synchronisation in either; no graph node for the diversity term and one for
 * detailed_metrics: the diversity term's gradient is the loss kernel's (kernels/diversity.cuh)
 * and its mean entropy, like q_delta, a column of the loss blocks' statistics that the priority
 * update sums (td_loss.cuh); the layer norms come from the optimiser's per-segment sums and the
 * per-branch ones from the row-norm kernel after the head's dW GEMM (kernels/metrics.cuh, the
 * node). All of them reach metrics through the device record and its snapshots (cuda_update.cpp,
 * latest_stats in cuda_state.cpp).
 */
#include <math.h>
#include <string.h>

#include "cuda_internal.h"

static_assert(FHD_DEV_DETAIL_SEGMENTS == FHD_OPT_MAX_SEGMENTS &&
                  FHD_DEV_DETAIL_BRANCHES == FHD_MAX_BRANCHES,
              "the device record holds every segment's and branch's sums");

/* The loss kernel's fields, with the CPU's roundings (cpu_net.c, cpu_diversity.c): coef and T
 * as floats in the gradient, the config's double coef in the loss. */
static void loss_fields(const fhd__backend *b, fhd__loss_args *a) {
    const fhd__config *c = &b->cfg;
    const float coef = (float)c->diversity_coef, temp = (float)c->diversity_temperature;
    a->div_coef = c->diversity_coef > 0 ? c->diversity_coef : 0.0;
    a->div_inv_t = 1.0 / (double)temp;
    a->div_g = (double)coef / ((double)b->B * b->lo.D * temp);
    a->detailed = c->detailed_metrics != 0;
    a->stat_extra = a->div_coef > 0.0 || a->detailed;
}

/* The layer (conv layers, then the linear ones) whose W or b starts at off, or -1. */
static int layer_at(const fhd__layout *lo, uint64_t off) {
    for (uint32_t c = 0; c < lo->NC; c++)
        if (lo->conv[c].w_off == off || lo->conv[c].b_off == off)
            return (int)c;
    for (uint32_t l = 0; l <= lo->L; l++)
        if (lo->layers[l].w_off == off || lo->layers[l].b_off == off)
            return (int)(lo->NC + l);
    return -1;
}

/* The row-norm kernel's arguments and the optimiser's slots (kernels/metrics.cuh,
 * device_state.cuh), the record's slots and the kernel's counter zeroed. */
static int32_t detail_args(fhd__backend *b) {
    const fhd__layout *lo = &b->lo;
    fhd__detail_args *d = &b->a_detail;
    memset(d, 0, sizeof *d);
    b->a_opt.det = NULL;
    if (!b->cfg.detailed_metrics)
        return FHD_OK;
    const fhd__layer *hd = &lo->layers[lo->L];
    const uint64_t first = hd->w_off + (uint64_t)lo->dueling * hd->in; /* the first action row */
    for (uint32_t s = 0; s < b->a_opt.nseg; s++) {
        const fhd__opt_segment *sg = &b->a_opt.seg[s];
        /* every segment one layer's W or b (the host adds a layer's two), and the head's
         * gradient whole when the row-norm kernel reads it: no parts the norm pass adds later */
        if (layer_at(lo, sg->off) < 0 || (sg->off == hd->w_off && sg->extra))
            return fhd__cuda_failf(b, FHD_ERR_INTERNAL,
                                   "detailed_metrics: optimiser segment %u (offset %llu) is not "
                                   "one layer's own whole W or b",
                                   s, (unsigned long long)sg->off);
    }
    fhd__dev_record *rec = (fhd__dev_record *)(void *)b->st;
    d->w = b->params + first;
    d->g = b->grad + first;
    /* pruning with the head in scope: its gradient is masked after this kernel (cuda_prune.cpp),
     * so the kernel applies the masks itself */
    for (uint32_t j = 0; b->mask && j < lo->num_masks; j++) {
        fhd__tensor_ref t;
        if (fhd__layout_mask(lo, j, &t) == 0 && t.offset <= first && first < t.offset + t.count)
            d->mask = b->mask + first;
    }
    d->H = hd->in;
    d->nrows = lo->KT;
    d->D = lo->D;
    for (uint32_t k = 0; k < lo->D; k++)
        d->k_off[k] = lo->k_off[k];
    d->k_off[lo->D] = lo->KT;
    d->rows = b->det_rows;
    d->done = (unsigned int *)(void *)(b->det_rows + 2 * (size_t)lo->KT);
    d->st = b->st;
    d->det = rec->detail;
    b->a_opt.det = rec->detail;
    FHD_CK(b, fhd__cuda_metrics_preload()); /* before the capture */
    /* before the capture's warm-up, which waits for the stream */
    FHD_CK(b, cudaMemsetAsync(rec->detail, 0, sizeof rec->detail, b->s_main));
    FHD_CK(b, cudaMemsetAsync(d->done, 0, sizeof(unsigned int), b->s_main));
    return FHD_OK;
}

int32_t fhd__cuda_divmetrics_prepare(fhd__backend *b) {
    loss_fields(b, &b->a_loss_train);
    loss_fields(b, &b->a_loss_batch);
    return detail_args(b);
}

/* The norms of the snapshot's update from its slot: square roots of each layer's segments'
 * sum (W and b) and of each branch's sums, in double, then rounded (as cpu_metrics.c). */
void fhd__cuda_divmetrics_stats(const fhd__backend *b, fhd__update_stats *out) {
    if (!b->cfg.detailed_metrics)
        return;
    const fhd__layout *lo = &b->lo;
    const fhd__dev_detail_slot *d = &b->snap_detail;
    double sq[FHD_MAX_CONV_LAYERS + FHD_MAX_HIDDEN_LAYERS + 1] = {0};
    out->n_layers = lo->NC + lo->L + 1;
    for (uint32_t s = 0; s < b->a_opt.nseg; s++) {
        const int l = layer_at(lo, b->a_opt.seg[s].off); /* >= 0: detail_args checked */
        if (l >= 0)
            sq[l] += d->seg_sq[s];
    }
    for (uint32_t l = 0; l < out->n_layers; l++)
        out->layer_grad_norm[l] = (float)sqrt(sq[l]);
    for (uint32_t k = 0; k < lo->D; k++) {
        out->head_weight_norm[k] = (float)sqrt(d->head_w_sq[k]);
        out->head_grad_norm[k] = (float)sqrt(d->head_g_sq[k]);
    }
}
