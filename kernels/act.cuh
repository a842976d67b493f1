/* act.cuh - greedy actions from head outputs (host-includable declarations), one thread per row.
 * Fuses (plugin/cpu/cpu_ops.h): fhd__head_combine, then fhd__argmax_branches (first maximum). */
#ifndef FHD_KERNELS_ACT_CUH
#define FHD_KERNELS_ACT_CUH

#include <cuda_runtime_api.h>
#include <stdint.h>

#define FHD_ACT_MAX_BRANCHES 64

typedef struct fhd__act_args {
    const float *head;  /* (n, HO), row stride HOs */
    float *q;           /* (n, KT) out, or NULL */
    int32_t *greedy;    /* (n, D) out */
    uint32_t n, D, KT, HO, HOs;
    int dueling;
    uint32_t K[FHD_ACT_MAX_BRANCHES], k_off[FHD_ACT_MAX_BRANCHES];
} fhd__act_args;

cudaError_t fhd__cuda_act_head(const fhd__act_args *a, cudaStream_t stream);

cudaError_t fhd__cuda_act_preload(void);

#endif
