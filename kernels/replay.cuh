/* replay.cuh - appending transitions to the device replay ring (host-includable declarations).
 * Mirrors cpu_replay_add: rows go to slots pos, pos + 1, ... (mod N); with prioritized replay
 * each written slot's leaf takes the running max priority (read on the device) and the integer
 * difference is added up the tree with atomicAdd. When a call wraps the ring more than once only
 * the last row written to a slot counts, as in the sequential CPU loop. */
#ifndef FHD_KERNELS_REPLAY_CUH
#define FHD_KERNELS_REPLAY_CUH

#include <cuda_runtime_api.h>
#include <stdint.h>

#include "device_state.cuh"

typedef struct fhd__replay_add_args {
    /* staged rows, device memory */
    const float *obs, *next;     /* (n, S) */
    const int32_t *act;          /* (n, D) */
    const float *ret, *disc;     /* (n) */
    uint32_t n;
    uint64_t pos;                /* first slot */
    uint64_t N;                  /* capacity */
    uint32_t S, D;
    float *r_obs, *r_next;       /* (N, S) */
    int32_t *r_act;              /* (N, D) */
    float *r_ret, *r_disc;       /* (N) */
    int prioritized;
    uint64_t *nodes;
    uint32_t leaves;
    fhd__dev_scalars *st;        /* reads max_q; replay_size := new_size */
    uint64_t new_size;
} fhd__replay_add_args;

cudaError_t fhd__cuda_replay_add(const fhd__replay_add_args *a, cudaStream_t stream);

/* Set n leaves idx[i] (non-decreasing) to q[i], the last occurrence of a slot winning, with
 * integer deltas added up the tree: the parallel equivalent of fhd__sumtree_set_batch for
 * sorted indices (the priority update of td_loss.cu uses the same scheme; tests use this). */
cudaError_t fhd__cuda_sumtree_set_sorted(uint64_t *nodes, uint32_t leaves, uint32_t n,
                                         const uint32_t *idx, const uint64_t *q,
                                         cudaStream_t stream);

cudaError_t fhd__cuda_replay_preload(void);

#endif
