/* cpu_prune.c - gradual magnitude pruning on the CPU (docs/design.md section 4, Pruning;
 * the schedule and the tie rule are in prune.h).
 *
 * b->mask (P) has the layout of one network: 1 kept, 0 pruned; only the weight views of the
 * scope (fhd__layout_mask) are ever 0. Invariant: the online weights are 0 wherever the mask
 * is 0. A selection zeroes the pruned weights and their Adam moments; the update masks the
 * gradient, so Adam leaves them 0 (m = v = 0, step 0 / (0 + eps)); a write of the parameters
 * or the masks applies the mask.
 *
 * The selection is a radix select over the 31-bit magnitude key of prune.h, 8 bits a pass
 * from the top (7, 8, 8, 8 bits): each pass histograms the digit of the keys that match the
 * prefix found so far and takes the bucket holding rank k - 1. That gives T, the key of the
 * k-th smallest weight, and r + 1, how many weights of key T are pruned: those of lowest
 * index (the tie rule). The CUDA selection is the same algorithm, multi-block.
 */
#include <string.h>

#include "cpu_internal.h"
#include "prune.h"

/* The masks in one group: all of them (global) or mask j alone. */
typedef struct {
    const fhd__layout *lo;
    uint32_t first, last; /* mask indices [first, last) */
} group;

static uint64_t group_size(const group *g) {
    uint64_t n = 0;
    for (uint32_t j = g->first; j < g->last; j++) {
        fhd__tensor_ref t;
        fhd__layout_mask(g->lo, j, &t);
        n += t.count;
    }
    return n;
}

/* Prune the k smallest weights of group g (key, then index in layout order): mask 0 for
 * them, 1 for the rest of the group. W: the online parameters. */
static void select_group(const group *g, const float *W, float *mask, uint64_t k) {
    uint32_t prefix = 0, pmask = 0;
    uint64_t r = k ? k - 1 : 0; /* rank (0-based) of the k-th smallest among the matches */
    static const int shifts[4] = {24, 16, 8, 0};
    for (int p = 0; p < 4 && k; p++) {
        uint64_t hist[256] = {0};
        for (uint32_t j = g->first; j < g->last; j++) {
            fhd__tensor_ref t;
            fhd__layout_mask(g->lo, j, &t);
            for (uint64_t i = 0; i < t.count; i++) {
                const uint32_t key = fhd__prune_key(W[t.offset + i]);
                if ((key & pmask) == prefix)
                    hist[(key >> shifts[p]) & 0xffu]++;
            }
        }
        uint32_t d = 0;
        while (r >= hist[d]) /* the bucket holding rank r (it exists: r < matches) */
            r -= hist[d++];
        prefix |= d << shifts[p];
        pmask |= 0xffu << shifts[p];
    }
    const uint32_t T = prefix;
    uint64_t ties = k ? r + 1 : 0; /* weights of key T still to prune, lowest index first */
    for (uint32_t j = g->first; j < g->last; j++) {
        fhd__tensor_ref t;
        fhd__layout_mask(g->lo, j, &t);
        for (uint64_t i = 0; i < t.count; i++) {
            const uint32_t key = fhd__prune_key(W[t.offset + i]);
            int pruned = k && key < T;
            if (k && key == T && ties) {
                pruned = 1;
                ties--;
            }
            mask[t.offset + i] = pruned ? 0.0f : 1.0f;
        }
    }
}

void fhd__cpu_prune_apply(fhd__backend *b, float *W) {
    for (uint32_t j = 0; j < b->lo.num_masks; j++) {
        fhd__tensor_ref t;
        fhd__layout_mask(&b->lo, j, &t);
        for (uint64_t i = 0; i < t.count; i++)
            if (b->mask[t.offset + i] == 0.0f)
                W[t.offset + i] = 0.0f;
    }
}

void fhd__cpu_prune_select(fhd__backend *b, double sparsity) {
    const fhd__layout *lo = &b->lo;
    if (b->cfg.prune_global) {
        group g = {lo, 0, lo->num_masks};
        select_group(&g, b->params, b->mask, fhd__prune_count(sparsity, group_size(&g)));
    } else {
        for (uint32_t j = 0; j < lo->num_masks; j++) {
            group g = {lo, j, j + 1};
            select_group(&g, b->params, b->mask, fhd__prune_count(sparsity, group_size(&g)));
        }
    }
    fhd__cpu_prune_apply(b, b->params);
    fhd__cpu_prune_apply(b, b->adam_m); /* a pruned weight's moments: it is never used again */
    fhd__cpu_prune_apply(b, b->adam_v);
}

void fhd__cpu_prune_after_update(fhd__backend *b) {
    double s;
    if (b->lo.num_masks && fhd__prune_at(&b->cfg, b->updates, &s))
        fhd__cpu_prune_select(b, s);
}
