/* sumtree_model.h - what the sum tree tests (test_sumtree.c, test_sumtree_sampling.c) hold
 * sumtree.h to: a naive model of the leaves (an array, a prefix-sum array and a binary search),
 * the stratified target with 128-bit products, and the priorities the random tests draw. */
#ifndef FHD_SUMTREE_MODEL_H
#define FHD_SUMTREE_MODEL_H

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "priority.h"
#include "sumtree.h"
#include "test_util.h"

__extension__ typedef unsigned __int128 u128;

#define SEED UINT64_C(0x5EED5EED12345678)

/* ---- the naive model: an array of leaves, a prefix-sum array and a binary search ------------ */

typedef struct {
    uint32_t cap;
    uint64_t *leaf;   /* [cap] */
    uint64_t *prefix; /* [cap + 1], prefix[j] = sum of leaf[0 .. j-1]; valid when !dirty */
    int dirty;
    uint64_t total;       /* maintained incrementally by naive_set */
    long prefix_mismatch; /* times prefix[cap] != total after a rebuild of prefix */
} naive;

static inline void naive_init(naive *m, uint32_t cap) {
    m->cap = cap;
    m->leaf = (uint64_t *)calloc(cap, sizeof(uint64_t));
    m->prefix = (uint64_t *)calloc((size_t)cap + 1, sizeof(uint64_t));
    m->dirty = 0;
    m->total = 0;
    m->prefix_mismatch = 0;
}

static inline void naive_free(naive *m) {
    free(m->leaf);
    free(m->prefix);
}

static inline void naive_set(naive *m, uint32_t idx, uint64_t q) {
    q = q > FHD_PRIO_MAX_Q ? FHD_PRIO_MAX_Q : q;
    m->total = m->total - m->leaf[idx] + q;
    m->leaf[idx] = q;
    m->dirty = 1;
}

static inline void naive_refresh(naive *m) {
    uint32_t j;
    if (!m->dirty) {
        return;
    }
    m->prefix[0] = 0;
    for (j = 0; j < m->cap; ++j) {
        m->prefix[j + 1] = m->prefix[j] + m->leaf[j];
    }
    m->prefix_mismatch += m->prefix[m->cap] != m->total;
    m->dirty = 0;
}

static inline uint64_t naive_total(naive *m) {
    return m->total;
}

static inline uint64_t naive_prefix(naive *m, uint32_t j) {
    naive_refresh(m);
    return m->prefix[j];
}

/* The j with prefix[j] <= target < prefix[j + 1]; requires target < total. */
static inline uint32_t naive_find(naive *m, uint64_t target) {
    uint32_t lo = 0, hi = m->cap - 1; /* answer in [lo, hi] */
    naive_refresh(m);
    while (lo < hi) {
        uint32_t mid = lo + (hi - lo) / 2;
        if (m->prefix[mid + 1] > target) {
            hi = mid;
        } else {
            lo = mid + 1;
        }
    }
    return lo;
}

/* The stratified target with 128-bit products, written independently of sumtree.h. */
static inline uint64_t ref_stratum_target(uint64_t T, uint32_t B, uint32_t j, uint64_t r) {
    uint64_t lo = (uint64_t)(((u128)j * T) / B);
    uint64_t hi = (uint64_t)(((u128)(j + 1) * T) / B);
    return hi == lo ? lo : lo + (uint64_t)(((u128)r * (hi - lo)) >> 64);
}

static inline int tree_equals_model(const fhd__sumtree *t, naive *m) {
    return memcmp(fhd__sumtree_leaf_values(t), m->leaf, (size_t)m->cap * sizeof(uint64_t)) == 0 &&
           fhd__sumtree_total(t) == naive_total(m);
}

/* A priority value for the random tests: 0 (empty), 1, MAX_Q, above MAX_Q (clamped), small,
 * or anything. */
static inline uint64_t rand_q(test_rng *r) {
    uint64_t c = rng_below(r, 100);
    if (c < 10) {
        return 0;
    }
    if (c < 15) {
        return 1;
    }
    if (c < 20) {
        return FHD_PRIO_MAX_Q;
    }
    if (c < 23) {
        return FHD_PRIO_MAX_Q + 1 + rng_below(r, 1000);
    }
    if (c < 60) {
        return 1 + rng_below(r, 64);
    }
    return 1 + rng_below(r, FHD_PRIO_MAX_Q);
}

#endif
