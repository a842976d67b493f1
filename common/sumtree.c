/* sumtree.c - the CPU fixed-point sum tree (layout and invariants: sumtree.h). */
#include "sumtree.h"

#include <assert.h>
#include <stdlib.h>
#include <string.h>

int fhd__sumtree_init(fhd__sumtree *t, uint32_t capacity) {
    uint32_t leaves;
    t->capacity = 0;
    t->leaves = 0;
    t->nodes = NULL;
    if (capacity == 0 || capacity > FHD_SUMTREE_MAX_CAPACITY) {
        return -1;
    }
    leaves = fhd__sumtree_leaf_count(capacity);
    t->nodes = (uint64_t *)calloc(2 * (size_t)leaves, sizeof(uint64_t));
    if (!t->nodes) {
        return -2;
    }
    t->capacity = capacity;
    t->leaves = leaves;
    return 0;
}

void fhd__sumtree_free(fhd__sumtree *t) {
    if (!t) {
        return;
    }
    free(t->nodes);
    t->nodes = NULL;
    t->capacity = 0;
    t->leaves = 0;
}

void fhd__sumtree_clear(fhd__sumtree *t) {
    if (t->nodes) {
        memset(t->nodes, 0, 2 * (size_t)t->leaves * sizeof(uint64_t));
    }
}

void fhd__sumtree_set(fhd__sumtree *t, uint32_t idx, uint64_t q) {
    uint64_t *nodes = t->nodes;
    uint32_t i;
    assert(idx < t->capacity);
    if (idx >= t->capacity) {
        return;
    }
    i = t->leaves + idx;
    nodes[i] = q > FHD_PRIO_MAX_Q ? FHD_PRIO_MAX_Q : q;
    /* Recompute (not increment) each ancestor: no state beyond the leaves can drift. */
    for (i >>= 1; i >= 1; i >>= 1) {
        nodes[i] = nodes[2 * i] + nodes[2 * i + 1];
    }
}

void fhd__sumtree_set_batch(fhd__sumtree *t, uint32_t n, const uint32_t *idx, const uint64_t *q) {
    uint32_t k;
    for (k = 0; k < n; ++k) {
        fhd__sumtree_set(t, idx[k], q[k]);
    }
}

uint64_t fhd__sumtree_get(const fhd__sumtree *t, uint32_t idx) {
    assert(idx < t->capacity);
    return idx < t->capacity ? t->nodes[t->leaves + idx] : 0;
}

uint64_t fhd__sumtree_total(const fhd__sumtree *t) {
    return t->nodes ? t->nodes[1] : 0;
}

uint32_t fhd__sumtree_find(const fhd__sumtree *t, uint64_t target) {
    uint64_t total = fhd__sumtree_total(t);
    assert(target < total);
    if (total == 0) {
        return 0;
    }
    if (target >= total) {
        target = total - 1;
    }
    return fhd__sumtree_descend(t->nodes, t->leaves, target);
}

void fhd__sumtree_sample_stratified(const fhd__sumtree *t, uint32_t B, const uint64_t *r,
                                    uint32_t *idx) {
    fhd__sumtree_sample_strata(t, B, B, 0, r, idx);
}

void fhd__sumtree_sample_strata(const fhd__sumtree *t, uint32_t B, uint32_t strata,
                                uint32_t first, const uint64_t *r, uint32_t *idx) {
    uint64_t total = fhd__sumtree_total(t);
    uint32_t j;
    assert(total > 0);
    if (total == 0) {
        for (j = 0; j < B; ++j) {
            idx[j] = 0;
        }
        return;
    }
    /* All B descents advance one level per pass: their loads are independent, so the cache
     * misses of different samples overlap (same result as B calls of fhd__sumtree_descend). */
    enum { CHUNK = 256 };
    uint64_t tg[CHUNK];
    uint32_t node[CHUNK];
    for (uint32_t j0 = 0; j0 < B; j0 += CHUNK) {
        const uint32_t n = B - j0 < CHUNK ? B - j0 : CHUNK;
        for (j = 0; j < n; ++j) {
            tg[j] = fhd__stratum_target(total, strata, first + j0 + j, r[j0 + j]);
            node[j] = 1;
        }
        for (uint32_t w = t->leaves; w > 1; w >>= 1) {
            for (j = 0; j < n; ++j) {
                const uint64_t left = t->nodes[2 * node[j]];
                const uint32_t right = tg[j] >= left;
                tg[j] -= right ? left : 0;
                node[j] = 2 * node[j] + right;
            }
        }
        for (j = 0; j < n; ++j)
            idx[j0 + j] = node[j] - t->leaves;
    }
}

int fhd__sumtree_check(const fhd__sumtree *t) {
    const uint64_t *nodes = t->nodes;
    uint32_t i;
    if (!nodes || t->leaves != fhd__sumtree_leaf_count(t->capacity)) {
        return -1;
    }
    if (nodes[0] != 0) {
        return -1;
    }
    for (i = 0; i < t->leaves; ++i) {
        uint64_t v = nodes[t->leaves + i];
        if (v > FHD_PRIO_MAX_Q || (i >= t->capacity && v != 0)) {
            return -1;
        }
    }
    for (i = 1; i < t->leaves; ++i) {
        uint64_t a = nodes[2 * i], b = nodes[2 * i + 1];
        if (a + b < a || nodes[i] != a + b) {
            return -1;
        }
    }
    return 0;
}

const uint64_t *fhd__sumtree_leaf_values(const fhd__sumtree *t) {
    return t->nodes + t->leaves;
}

int fhd__sumtree_rebuild(fhd__sumtree *t) {
    uint64_t *nodes = t->nodes;
    uint32_t i;
    int rc = 0;
    nodes[0] = 0;
    for (i = 0; i < t->leaves; ++i) {
        uint64_t *v = &nodes[t->leaves + i];
        if (i >= t->capacity && *v != 0) {
            *v = 0;
            rc = -1;
        } else if (*v > FHD_PRIO_MAX_Q) {
            *v = FHD_PRIO_MAX_Q;
            rc = -1;
        }
    }
    for (i = t->leaves - 1; i >= 1; --i) {
        nodes[i] = nodes[2 * i] + nodes[2 * i + 1];
    }
    return rc;
}

int fhd__sumtree_load_leaves(fhd__sumtree *t, uint32_t n, const uint64_t *q) {
    uint64_t *leaf = t->nodes + t->leaves;
    if (n > t->capacity) {
        return -1;
    }
    if (n > 0) {
        memcpy(leaf, q, (size_t)n * sizeof(uint64_t));
    }
    memset(leaf + n, 0, ((size_t)t->leaves - n) * sizeof(uint64_t));
    return fhd__sumtree_rebuild(t);
}
