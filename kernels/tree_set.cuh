/* tree_set.cuh - one sum-tree leaf set on the device (device code only; include from .cu files).
 * Leaf `slot` := q (capped at FHD_PRIO_MAX_Q); the integer difference goes up the tree with
 * atomicAdd, so that a launch may set many distinct leaves at once (replay.cu, frames.cu). */
#ifndef FHD_KERNELS_TREE_SET_CUH
#define FHD_KERNELS_TREE_SET_CUH

#include <stdint.h>

#include "sumtree.h"

static __device__ __forceinline__ void fhd_tree_set(uint64_t *nodes, uint32_t leaves, uint64_t slot,
                                                    uint64_t q) {
    uint32_t n = leaves + (uint32_t)slot;
    q = q > FHD_PRIO_MAX_Q ? FHD_PRIO_MAX_Q : q;
    const uint64_t delta = q - nodes[n]; /* modulo 2^64 */
    nodes[n] = q;
    if (delta)
        for (n >>= 1; n >= 1; n >>= 1)
            atomicAdd(reinterpret_cast<unsigned long long *>(nodes + n), (unsigned long long)delta);
}

#endif
