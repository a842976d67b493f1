/* spectral_norm.cuh - spectral normalisation of every normalised layer in one launch per phase
 * (host-includable declarations). Mirrors fhd__sn_power_iteration / fhd__sn_sigma of cpu_ops.h
 * for every layer at once; fhd__sn_scale is never run (the GEMMs take 1/sigma as alpha).
 *
 * A launch runs a list of jobs, each a set of blocks working on one matrix W (m, k). The power
 * iteration follows torch.nn.utils.parametrizations.spectral_norm: u first, then v.
 *   SN_JOB_U       u = normalize(W v): one warp per row (8 rows a block); the job's last block
 *                  normalises (power iteration, first half; online layers)
 *   SN_JOB_SIGMA   sigma = u . (W v) with the stored vectors (target layers each update; the
 *                  online layers for act): one warp per row, per-block partial dots, the job's
 *                  last block sums them
 *   SN_JOB_V       r = W^T u, v = normalize(r), sigma = u . (W v) = r . v (second half), and
 *                  |u|^2, |v|^2 for the gradient: blocks over 32-column tiles x 64-row chunks
 *                  (every load of a thread in flight at once), the job's last block sums the
 *                  chunks' partials per column and normalises
 * Each job is latency-bound (a matrix of at most a few MB): the work is spread over as many
 * blocks as the matrix allows, and each thread issues all its loads before using any.
 * A training update launches [U for online layers + SIGMA for target layers], then [V for online
 * layers]: two launches whatever the number of layers. The forward and backward GEMMs consume
 * 1/sigma as their alpha (cuBLASLt device pointer mode), so W / sigma is never materialised.
 */
#ifndef FHD_KERNELS_SPECTRAL_NORM_CUH
#define FHD_KERNELS_SPECTRAL_NORM_CUH

#include <cuda_runtime_api.h>
#include <stdint.h>

#define FHD_SN_MAX_JOBS 16

enum { SN_JOB_V = 0, SN_JOB_SIGMA = 1, SN_JOB_U = 2 };

typedef struct fhd__sn_job {
    const float *W;       /* (m, k) raw weight */
    float *u, *v;         /* (m), (k) power-iteration vectors (updated by V / U jobs) */
    float *scratch;       /* (fhd__cuda_sn_scratch_floats) unnormalised vector, then the V
                           * job's per-chunk column partials */
    float *sigma;         /* (1) out: sigma (SIGMA / V jobs) */
    float *inv_sigma;     /* (1) out: 1 / sigma (SIGMA / V jobs) */
    float *norms;         /* (2) out, V jobs: |u|^2, |v|^2 after the iteration (SN gradient) */
    double *partial;      /* (nblocks) per-block partial dots (SIGMA jobs) */
    unsigned int *done;   /* last-block counter of the job */
    uint32_t m, k;
    uint32_t mode;        /* SN_JOB_* */
    uint32_t block0, nblocks; /* the job's blocks in the grid (filled by fhd__cuda_sn_plan) */
} fhd__sn_job;

typedef struct fhd__sn_args {
    fhd__sn_job job[FHD_SN_MAX_JOBS];
    uint32_t njobs;
    uint32_t nblocks; /* total grid */
    int pdl;          /* launched as a programmatic dependent of the kernel before it (sm_90):
                       * the V pass after the U pass, whose u it reads only after its W loads */
} fhd__sn_args;

/* Floats of scratch a normalised (m, k) layer needs: max(m, k) for the unnormalised vector,
 * then the column pass's per-chunk partials. */
uint64_t fhd__cuda_sn_scratch_floats(uint32_t m, uint32_t k);
/* Blocks a job of this mode and shape needs. */
uint32_t fhd__cuda_sn_job_blocks(uint32_t mode, uint32_t m, uint32_t k);
/* Fill block0 / nblocks of every job and the total grid (>= 2 blocks). */
void fhd__cuda_sn_plan(fhd__sn_args *a);
/* Launch a as a programmatic dependent of the kernel before it where the device and the
 * kernel's code allow (a->pdl). */
void fhd__cuda_sn_allow_pdl(fhd__sn_args *a);
cudaError_t fhd__cuda_sn_launch(const fhd__sn_args *a, cudaStream_t stream);

cudaError_t fhd__cuda_spectral_norm_preload(void);

#endif
