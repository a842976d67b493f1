/* dist.cuh - data-parallel training's kernels (config `distributed`, docs/design.md section 10;
 * host side plugin/cuda/cuda_dist.cpp; host-includable declarations).
 *
 * One distributed update, on the main stream after the backward's join, before the optimiser:
 *   fhd__cuda_dist_pack   the flat gradient finished (the bias gradients summed from their
 *       column partials, a weight's further parts added: the optimiser's norm blocks,
 *       kernels/optim_norm.cuh, whose sums the same kernel writes), the loss behind it, and
 *       behind that W slots of FHD_DIST_CK_WORDS floats: this rank's parameter checksum in its
 *       own slot on checksum updates, zeros elsewhere
 *   ncclAllReduce (sum, float) of that buffer, (P + 1 + 4 W) floats
 *   fhd__cuda_dist_scale  the gradient and the loss times 1 / W (the CPU's mean, cpu_dist.c),
 *       the loss into the record for the guard, and on checksum updates every rank's checksum
 *       read back from the slots (a sum of one value and zeros: exact) and compared
 * The optimiser then runs on the finished gradient (fhd__opt_args without partials or parts).
 */
#ifndef FHD_KERNELS_DIST_CUH
#define FHD_KERNELS_DIST_CUH

#include <cuda_runtime_api.h>
#include <stdint.h>

#include "device_state.cuh"
#include "optim.cuh"

#define FHD_DIST_MAX_RANKS 1024 /* the gradient buffer's tail has room for this many slots */
#define FHD_DIST_CK_WORDS 4     /* a checksum as four 16-bit words, each an exact float */

/* Device scratch of the pack kernel, zeroed once; its counter resets itself. */
typedef struct fhd__dist_state {
    unsigned long long acc; /* the checksum blocks' sum (the last block takes and clears it) */
    unsigned int done;      /* the checksum blocks' last-block counter */
    uint32_t due;           /* 1: this update's slots carry checksums */
    uint64_t pending;       /* the update whose parameters they hash */
} fhd__dist_state;

/* The latest comparison, right after the device record (fhd__dev_record) in the same
 * allocation, so that a snapshot copies it with the scalars. */
typedef struct fhd__dist_record {
    uint64_t ck_update; /* the update the compared parameters are after (0: the initial ones) */
    uint64_t ck_value;  /* this rank's checksum of them */
    uint32_t ck_differ; /* ranks whose checksum differs from rank 0's */
    uint32_t ck_count;  /* comparisons so far (set_comm's is the first) */
} fhd__dist_record;

typedef struct fhd__dist_args {
    float *buf;    /* (P + 1 + 4 world): the gradient, the loss, the checksum slots */
    uint64_t P, T; /* params: online [0, P), target [T, T + P) */
    const float *params;
    uint32_t rank, world;
    float inv;          /* 1.0f / world, as cpu_dist.c */
    uint64_t interval;  /* checksum_interval */
    uint32_t ck_blocks; /* the pack kernel's checksum blocks, after the norm blocks */
    uint32_t scale_blocks;
    fhd__dev_scalars *st;
    fhd__dist_state *ds;
    fhd__dist_record *rec;
} fhd__dist_args;

/* The parameter checksum's term of element i (online i < P, then target i - P) with bit pattern
 * x: the checksum is the sum of the terms mod 2^64, so that blocks may add theirs in any order.
 * Host and device compute the same values. */
#if defined(__CUDACC__)
__host__ __device__ __forceinline__
#else
static inline
#endif
    uint64_t
    fhd__dist_mix(uint64_t z) { /* splitmix64's finaliser */
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}
#if defined(__CUDACC__)
__host__ __device__ __forceinline__
#else
static inline
#endif
    uint64_t
    fhd__dist_term(uint64_t i, uint32_t x) {
    return fhd__dist_mix(fhd__dist_mix(i + 0x9e3779b97f4a7c15ull) ^ (uint64_t)x);
}

/* Blocks of the checksum part of the pack kernel and of the scale kernel for P parameters. */
uint32_t fhd__cuda_dist_ck_blocks(uint64_t P);
uint32_t fhd__cuda_dist_scale_blocks(uint64_t P);
/* The pack kernel: opt's norm blocks (opt: the optimiser's own arguments, with its partials and
 * parts; its plan's instance), then d's checksum blocks. */
cudaError_t fhd__cuda_dist_pack(const fhd__opt_args *opt, const fhd__dist_args *d,
                                cudaStream_t stream);
cudaError_t fhd__cuda_dist_scale(const fhd__dist_args *d, cudaStream_t stream);
cudaError_t fhd__cuda_dist_preload(void);

#endif
