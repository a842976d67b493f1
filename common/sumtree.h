/* sumtree.h - exact fixed-point sum tree for prioritized replay (CPU), plus the inline pieces
 * the CUDA implementation shares so both backends sample identically.
 *
 * Layout (shared with the CUDA implementation):
 *   capacity  number of replay slots, 1 <= capacity <= FHD_SUMTREE_MAX_CAPACITY (2^26)
 *   leaves    smallest power of two >= capacity (>= 1)
 *   nodes     uint64_t[2 * leaves]; node 1 is the root, the children of node i are 2i and 2i+1,
 *             slot j is leaf node leaves + j; node 0 is unused and always 0; leaves
 *             j >= capacity are always 0.
 *   Invariant: nodes[i] == nodes[2i] + nodes[2i + 1] for every 1 <= i < leaves.
 * Leaf values are quantised priorities (priority.h): 0 = empty slot (never sampled), otherwise
 * in [1, FHD_PRIO_MAX_Q]. Overflow is impossible: the root is at most
 * 2^26 * (2^38 - 1) < 2^64, and every other node is a partial sum of the root.
 * All arithmetic is on uint64_t, so the CPU and the GPU agree exactly. The nodes array is the
 * whole state; a checkpoint may store only the leaves and call fhd__sumtree_rebuild.
 */
#ifndef FHD_SUMTREE_H
#define FHD_SUMTREE_H

#include <stdint.h>

#include "philox.h"
#include "priority.h"

#define FHD_SUMTREE_MAX_CAPACITY (1u << 26)

/* ---- pieces shared with CUDA ---------------------------------------------------------------- */

/* Smallest power of two >= capacity (1 for capacity <= 1). capacity <= 2^31. */
FHD_HOSTDEV uint32_t fhd__sumtree_leaf_count(uint32_t capacity) {
    uint32_t leaves = 1;
    while (leaves < capacity) {
        leaves <<= 1;
    }
    return leaves;
}

/* The sampling target of stratum j of B over a total T > 0: the strata are
 * [lo, hi) = [floor(j T / B), floor((j + 1) T / B)), and target = lo + below64(r, hi - lo)
 * (lo when the stratum is empty, i.e. B > T). Always lo <= target < T.
 * floor(j T / B) is computed exactly in 64 bits: T = qB + rem, so
 * j T / B = j q + j rem / B with j q <= T and j rem < 2^32 * 2^32 (j <= B, rem < B).
 * Requires 1 <= B, j < B. r: 64 random bits (fhd__rng_u64(seed, FHD_RNG_STREAM_SAMPLE, update,
 * j)). */
FHD_HOSTDEV uint64_t fhd__stratum_bound(uint64_t total, uint32_t B, uint32_t j) {
    uint64_t q = total / B, rem = total % B;
    return (uint64_t)j * q + ((uint64_t)j * rem) / B;
}

FHD_HOSTDEV uint64_t fhd__stratum_target(uint64_t total, uint32_t B, uint32_t j, uint64_t r) {
    uint64_t lo = fhd__stratum_bound(total, B, j);
    uint64_t hi = fhd__stratum_bound(total, B, j + 1);
    return hi > lo ? lo + fhd__rng_below64(r, hi - lo) : lo;
}

/* Descent over a nodes array with the layout above: the leaf j with
 * prefix(j) <= target < prefix(j) + leaf(j). Requires target < nodes[1]; then the leaf is
 * non-zero and j < capacity. (Invariant: target < nodes[i] at every visited node.) */
FHD_HOSTDEV uint32_t fhd__sumtree_descend(const uint64_t *nodes, uint32_t leaves, uint64_t target) {
    uint32_t i = 1;
    while (i < leaves) {
        uint64_t left = nodes[2 * i];
        uint32_t right = target >= left; /* branch-free: the path is random */
        target -= right ? left : 0;
        i = 2 * i + right;
    }
    return i - leaves;
}

/* ---- CPU tree (sumtree.c) ----------------------------------------------------------------- */

#ifdef __cplusplus
extern "C" {
#endif

typedef struct fhd__sumtree {
    uint32_t capacity; /* slots */
    uint32_t leaves;   /* power of two >= capacity */
    uint64_t *nodes;   /* [2 * leaves], see the layout above */
} fhd__sumtree;

/* 0 ok; -1 bad capacity (0 or > FHD_SUMTREE_MAX_CAPACITY); -2 out of memory. All slots empty.
 * On failure *t is zeroed (safe to free). */
int fhd__sumtree_init(fhd__sumtree *t, uint32_t capacity);
/* NULL-safe, idempotent; leaves *t zeroed. */
void fhd__sumtree_free(fhd__sumtree *t);
/* Empties every slot. */
void fhd__sumtree_clear(fhd__sumtree *t);

/* Slot idx < capacity takes value q (0 empties it; q > FHD_PRIO_MAX_Q is clamped to it), and
 * every ancestor is recomputed from its children. O(log leaves). idx >= capacity is a caller
 * bug: asserted, and ignored when asserts are off (likewise for get, which then returns 0). */
void fhd__sumtree_set(fhd__sumtree *t, uint32_t idx, uint64_t q);
/* set(idx[i], q[i]) for i = 0 .. n-1 in order: with duplicate indices the last one wins. */
void fhd__sumtree_set_batch(fhd__sumtree *t, uint32_t n, const uint32_t *idx, const uint64_t *q);

uint64_t fhd__sumtree_get(const fhd__sumtree *t, uint32_t idx);
uint64_t fhd__sumtree_total(const fhd__sumtree *t);

/* The slot j with prefix(j) <= target < prefix(j) + get(j); never an empty slot.
 * Requires target < total (asserted; with asserts off, target >= total is clamped to
 * total - 1 and an empty tree returns 0). */
uint32_t fhd__sumtree_find(const fhd__sumtree *t, uint64_t target);

/* Stratified sampling of B slots: idx[j] = find(fhd__stratum_target(total, B, j, r[j])),
 * j in [0, B). r: B random 64-bit values, by convention
 * r[j] = fhd__rng_u64(seed, FHD_RNG_STREAM_SAMPLE, update_index, j). Requires total > 0
 * (asserted; with asserts off an empty tree fills idx with 0). B == 0 does nothing. */
void fhd__sumtree_sample_stratified(const fhd__sumtree *t, uint32_t B, const uint64_t *r,
                                    uint32_t *idx);
/* B consecutive strata [first, first + B) of `strata` (first + B <= strata): idx[j] =
 * find(fhd__stratum_target(total, strata, first + j, r[j])). A rank's share of one stratified
 * draw of strata slots (docs/design.md section 10); stratified is (B, B, 0). */
void fhd__sumtree_sample_strata(const fhd__sumtree *t, uint32_t B, uint32_t strata,
                                uint32_t first, const uint64_t *r, uint32_t *idx);

/* 0 if node 0 is 0, every leaf is <= FHD_PRIO_MAX_Q, leaves past capacity are 0 and every
 * internal node equals the sum of its children (without overflow); -1 otherwise. O(leaves). */
int fhd__sumtree_check(const fhd__sumtree *t);

/* Checkpoint support. The leaves are nodes + leaves (capacity values, slot order). */
const uint64_t *fhd__sumtree_leaf_values(const fhd__sumtree *t);
/* Recomputes every internal node from the leaves (after the leaves were written directly).
 * Leaves past capacity are zeroed and leaves > FHD_PRIO_MAX_Q clamped; returns 0 if no leaf
 * needed fixing, -1 otherwise (the tree is consistent either way). O(leaves). */
int fhd__sumtree_rebuild(fhd__sumtree *t);
/* Loads n <= capacity slot values (the rest become empty) and rebuilds. Returns -1 if n >
 * capacity (nothing changed) or a value was out of range (clamped, see rebuild), else 0. */
int fhd__sumtree_load_leaves(fhd__sumtree *t, uint32_t n, const uint64_t *q);

#ifdef __cplusplus
}
#endif

#endif /* FHD_SUMTREE_H */
