/* spectral_norm.cu - all spectral-norm power iterations and sigmas of an update in one launch
 * per phase (see spectral_norm.cuh). Numerics follow cpu_ops.c: matrix-vector products in
 * float, squared norms and dots accumulated in double, normalisation by
 * inv = (float)(1 / max(norm, 1e-12)) then x *= inv in float.
 */
#include "common.cuh"
#include "spectral_norm.cuh"

#define SN_THREADS 256
#define SN_WARPS (SN_THREADS / 32)
#define SN_TILE 32 /* columns (V jobs) or rows (SIGMA / U jobs) per block */

/* v_raw[c] = sum_r W[r, c] u[r] for the block's 32 columns: warp w takes rows w, w + 8, ...,
 * lane l column c0 + l (each warp reads 128 contiguous bytes of a row). */
static __device__ void job_colpass(const fhd__sn_job &J, uint32_t t) {
    __shared__ float part[SN_WARPS][32];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const uint32_t c = t * SN_TILE + lane;
    float acc = 0.0f;
    if (c < J.k)
#pragma unroll 8
        for (uint32_t r = warp; r < J.m; r += SN_WARPS)
            acc += J.W[(size_t)r * J.k + c] * J.u[r];
    part[warp][lane] = acc;
    __syncthreads();
    if (warp == 0 && c < J.k) {
        float s = 0.0f;
        for (int w = 0; w < SN_WARPS; w++)
            s += part[w][lane];
        J.scratch[c] = s;
    }
}

/* z[r] = sum_c W[r, c] v[c] for the block's 32 rows (warp w: rows w, w + 8, w + 16, w + 24);
 * returns, in thread 0, the block's sum of u[r] * z[r] in double when want_dot. */
static __device__ double job_rowpass(const fhd__sn_job &J, uint32_t t, bool write_z,
                                     bool want_dot) {
    __shared__ double wdot[SN_WARPS];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    double dot = 0.0;
    for (uint32_t rr = warp; rr < SN_TILE; rr += SN_WARPS) {
        const uint32_t r = t * SN_TILE + rr;
        if (r >= J.m)
            break;
        const float *row = J.W + (size_t)r * J.k;
        float acc = 0.0f;
#pragma unroll 8
        for (uint32_t c = lane; c < J.k; c += 32)
            acc += row[c] * J.v[c];
        acc = fhd_warp_sum(acc);
        if (lane == 0) {
            if (write_z)
                J.scratch[r] = acc;
            if (want_dot)
                dot += (double)J.u[r] * acc;
        }
    }
    if (!want_dot)
        return 0.0;
    if (lane == 0)
        wdot[warp] = dot;
    __syncthreads();
    double s = 0.0;
    if (threadIdx.x == 0)
        for (int w = 0; w < SN_WARPS; w++)
            s += wdot[w];
    return s;
}

/* x[i] = raw[i] * (float)(1 / max(|raw|, 1e-12)) over n elements, by the whole block; returns
 * the block-wide sum of squares of the result's source (double) to every thread. */
static __device__ void normalize_into(float *x, const float *raw, uint32_t n, double *scratch) {
    double s = 0.0;
    for (uint32_t i = threadIdx.x; i < n; i += blockDim.x) {
        float r = __ldcg(raw + i);
        s += (double)r * r;
    }
    s = fhd_block_sum_d(s, scratch);
    const double nrm = sqrt(s);
    const float inv = (float)(1.0 / (nrm > 1e-12 ? nrm : 1e-12));
    for (uint32_t i = threadIdx.x; i < n; i += blockDim.x)
        x[i] = __ldcg(raw + i) * inv;
}

__global__ void __launch_bounds__(SN_THREADS) fhd_sn_kernel(const __grid_constant__ fhd__sn_args a) {
    __shared__ double red[32];
    uint32_t ji = 0;
    while (ji < a.njobs && blockIdx.x >= a.job[ji].block0 + a.job[ji].nblocks)
        ji++;
    if (ji >= a.njobs)
        return; /* padding block of a tiny grid */
    const fhd__sn_job &J = a.job[ji];
    const uint32_t t = blockIdx.x - J.block0;
    if (J.mode == SN_JOB_U) { /* u = normalize(W v) */
        job_rowpass(J, t, true, false);
        if (fhd_last_block_done(J.done, J.nblocks))
            normalize_into(J.u, J.scratch, J.m, red);
    } else if (J.mode == SN_JOB_SIGMA) {
        double d = job_rowpass(J, t, false, true);
        if (threadIdx.x == 0)
            J.partial[t] = d;
        if (fhd_last_block_done(J.done, J.nblocks) && threadIdx.x < 32) {
            const double s = fhd_warp_sum_strided(J.partial, J.nblocks, 1);
            if (threadIdx.x == 0) {
                const float sigma = (float)s;
                *J.sigma = sigma;
                *J.inv_sigma = 1.0f / sigma;
            }
        }
    } else { /* SN_JOB_V: v = normalize(W^T u), sigma = u . (W v) = (W^T u) . v */
        job_colpass(J, t);
        if (fhd_last_block_done(J.done, J.nblocks)) {
            normalize_into(J.v, J.scratch, J.k, red);
            __syncthreads(); /* v complete before the dot */
            double dot = 0.0, vv = 0.0;
            for (uint32_t i = threadIdx.x; i < J.k; i += blockDim.x) {
                const float vi = J.v[i];
                dot += (double)vi * __ldcg(J.scratch + i);
                vv += (double)vi * vi;
            }
            dot = fhd_block_sum_d(dot, red);
            vv = fhd_block_sum_d(vv, red);
            double uu = 0.0;
            for (uint32_t i = threadIdx.x; i < J.m; i += blockDim.x) {
                const float ui = J.u[i];
                uu += (double)ui * ui;
            }
            uu = fhd_block_sum_d(uu, red);
            if (threadIdx.x == 0) {
                const float sigma = (float)dot;
                *J.sigma = sigma;
                *J.inv_sigma = 1.0f / sigma;
                J.norms[0] = (float)uu;
                J.norms[1] = (float)vv;
            }
        }
    }
}

uint32_t fhd__cuda_sn_job_blocks(uint32_t mode, uint32_t m, uint32_t k) {
    return (uint32_t)fhd_cdiv(mode == SN_JOB_V ? k : m, SN_TILE);
}

void fhd__cuda_sn_plan(fhd__sn_args *a) {
    uint32_t b = 0;
    for (uint32_t j = 0; j < a->njobs; j++) {
        a->job[j].block0 = b;
        a->job[j].nblocks = fhd__cuda_sn_job_blocks(a->job[j].mode, a->job[j].m, a->job[j].k);
        b += a->job[j].nblocks;
    }
    a->nblocks = b < 2 ? 2 : b;
}

cudaError_t fhd__cuda_sn_launch(const fhd__sn_args *a, cudaStream_t stream) {
    if (a->njobs == 0)
        return cudaSuccess;
    fhd_sn_kernel<<<a->nblocks, SN_THREADS, 0, stream>>>(*a);
    return cudaGetLastError();
}

/* Load this file's kernels now (lazy module loading must not happen inside a graph
 * capture). */
cudaError_t fhd__cuda_spectral_norm_preload(void) {
    cudaFuncAttributes fa;
    cudaError_t e = cudaFuncGetAttributes(&fa, (const void *)fhd_sn_kernel);
    if (e != cudaSuccess)
        return e;
    return cudaSuccess;
}
