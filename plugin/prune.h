/* prune.h - gradual magnitude pruning (Zhu & Gupta 2017): the schedule and the rule that picks
 * the pruned weights, shared by the backends (docs/design.md section 4, Pruning).
 *
 * Pruning updates are t = prune_start, prune_start + prune_frequency, ..., prune_end (update
 * numbers count from 1, the number after the update's increment). At a pruning update the
 * sparsity is s_t = s_f (1 - r^3), r = 1 - (t - start) / (end - start) (r = 0 when end ==
 * start), and a group of n weights (one weight tensor, or the whole scope when prune_global)
 * gets k = round_half_even(s_t n) zeros in its mask: the k smallest by the key (|w|, flat
 * index), i.e. among equal magnitudes the lower index is pruned first. PyTorch's
 * l1_unstructured / global_unstructured with amount s_t compute the same k (Python's round)
 * and prune the k smallest |w|; its tie order is torch.topk's, so the two agree exactly
 * wherever the k-th and (k+1)-th magnitudes differ.
 */
#ifndef FHD_PRUNE_H
#define FHD_PRUNE_H

#include <stdint.h>

#include "config.h"

/* 1 if update t is a pruning update of cfg (pruning on), with *sparsity = s_t; else 0. */
int fhd__prune_at(const fhd__config *cfg, uint64_t t, double *sparsity);

/* Weights of a group of n that a sparsity s prunes: round(s n), halves to even. */
uint64_t fhd__prune_count(double sparsity, uint64_t n);

/* The pruning order key of |w| (a float's bits without the sign: for finite values the
 * integer order of the keys is the order of the magnitudes, -0 and +0 equal). */
static inline uint32_t fhd__prune_key(float w) {
    union {
        float f;
        uint32_t u;
    } c = {w};
    return c.u & 0x7fffffffu;
}

#endif
