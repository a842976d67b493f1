/* spectral_norm.cu - all spectral-norm power iterations and sigmas of an update in one launch
 * per phase (see spectral_norm.cuh). Numerics follow cpu_ops.c: matrix-vector products in
 * float, squared norms and dots accumulated in double, normalisation by
 * inv = (float)(1 / max(norm, 1e-12)) then x *= inv in float.
 */
#include "common.cuh"
#include "spectral_norm.cuh"

#define SN_THREADS 256
#define SN_WARPS (SN_THREADS / 32)
#define SN_TILE 32      /* columns per block (V jobs) */
#define SN_CHUNK 64     /* rows per block (V jobs): 8 per warp, all loads in flight */
#define SN_VCOLS 2      /* columns (and elements of u) per thread of the V job's finish */
#define SN_VGROUP 8     /* its chunk partials in flight per column */

/* z[r] = sum_c W[r, c] v[c] of the block's row r = 8 t + warp (one warp per row, every lane's
 * loads issued before the first add, 16-byte loads when k % 4 == 0 and W, v are 16-byte
 * aligned); the full sum is returned to every lane of the warp (0 past the last row). */
static __device__ float row_dot(const fhd__sn_job &J, uint32_t r) {
    const int lane = threadIdx.x & 31;
    float acc = 0.0f;
    if (r < J.m) {
        const float *row = J.W + (size_t)r * J.k;
        if ((J.k & 3u) == 0 && ((reinterpret_cast<uintptr_t>(J.W) | reinterpret_cast<uintptr_t>(J.v)) & 15u) == 0) {
            const float4 *r4 = reinterpret_cast<const float4 *>(row);
            const float4 *v4 = reinterpret_cast<const float4 *>(J.v);
            const uint32_t n4 = J.k / 4;
            for (uint32_t c0 = lane; c0 < n4; c0 += 4 * 32) {
                float4 w[4], x[4];
#pragma unroll
                for (int i = 0; i < 4; i++) {
                    const uint32_t c = c0 + i * 32;
                    w[i] = c < n4 ? __ldg(r4 + c) : make_float4(0.f, 0.f, 0.f, 0.f);
                    x[i] = c < n4 ? __ldcg(v4 + c) : make_float4(0.f, 0.f, 0.f, 0.f);
                }
#pragma unroll
                for (int i = 0; i < 4; i++)
                    acc += w[i].x * x[i].x + w[i].y * x[i].y + w[i].z * x[i].z + w[i].w * x[i].w;
            }
        } else {
#pragma unroll 8
            for (uint32_t c = lane; c < J.k; c += 32)
                acc += __ldg(row + c) * __ldcg(J.v + c);
        }
    }
    return fhd_warp_sum(acc);
}

/* Partial column sums of W^T u for the block's tile of 32 columns and chunk of 64 rows: lane =
 * column, warp w = rows 64 q + w + 8 i, eight loads of W and u in flight; the 8 warps' sums in
 * order into part[q][c]. */
static __device__ void col_chunk(const fhd__sn_job &J, uint32_t tile, uint32_t q, float *part) {
    __shared__ float red[SN_WARPS][32];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const uint32_t c = tile * SN_TILE + lane;
    float acc = 0.0f;
    if (c >= J.k)
        fhd_pdl_wait(); /* (the branch below waits after its W loads) */
    if (c < J.k) {
        float w[SN_CHUNK / SN_WARPS], u[SN_CHUNK / SN_WARPS];
#pragma unroll
        for (int i = 0; i < SN_CHUNK / SN_WARPS; i++) {
            const uint32_t r = q * SN_CHUNK + warp + i * SN_WARPS;
            w[i] = r < J.m ? __ldg(J.W + (size_t)r * J.k + c) : 0.0f;
        }
        fhd_pdl_wait(); /* u comes from the U pass before us; W does not change in it */
#pragma unroll
        for (int i = 0; i < SN_CHUNK / SN_WARPS; i++) {
            const uint32_t r = q * SN_CHUNK + warp + i * SN_WARPS;
            u[i] = r < J.m ? __ldcg(J.u + r) : 0.0f;
        }
#pragma unroll
        for (int i = 0; i < SN_CHUNK / SN_WARPS; i++)
            acc += w[i] * u[i];
    }
    red[warp][lane] = acc;
    __syncthreads();
    if (warp == 0 && c < J.k) {
        float t = 0.0f;
        for (int g = 0; g < SN_WARPS; g++)
            t += red[g][lane];
        part[(size_t)q * J.k + c] = t;
    }
}

/* (float)(1 / max(|x|, 1e-12)) of an n-element vector held SN_VCOLS elements a thread (element
 * threadIdx.x + j SN_THREADS in x[j]), by the whole block: the squares summed in double, in
 * element order per thread, then fhd_block_sum_d. */
static __device__ __forceinline__ float inv_norm_regs(const float (&x)[SN_VCOLS], uint32_t n,
                                                     double *scratch) {
    double s = 0.0;
#pragma unroll
    for (int j = 0; j < SN_VCOLS; j++)
        if (threadIdx.x + j * SN_THREADS < n)
            s += (double)x[j] * x[j];
    s = fhd_block_sum_d(s, scratch);
    const double nrm = sqrt(s);
    return (float)(1.0 / (nrm > 1e-12 ? nrm : 1e-12));
}

/* x[i] = raw[i] * (float)(1 / max(|raw|, 1e-12)) over n elements, by the whole block of
 * SN_THREADS threads. Up to SN_VCOLS elements a thread, raw is read once, every load in flight
 * at once (the same sums in the same order as the loop below). */
static __device__ void normalize_into(float *x, const float *raw, uint32_t n, double *scratch) {
    if (n <= SN_THREADS * SN_VCOLS) {
        float r[SN_VCOLS];
#pragma unroll
        for (int j = 0; j < SN_VCOLS; j++) {
            const uint32_t i = threadIdx.x + j * SN_THREADS;
            r[j] = i < n ? __ldcg(raw + i) : 0.0f;
        }
        const float inv = inv_norm_regs(r, n, scratch);
#pragma unroll
        for (int j = 0; j < SN_VCOLS; j++) {
            const uint32_t i = threadIdx.x + j * SN_THREADS;
            if (i < n)
                x[i] = r[j] * inv;
        }
        return;
    }
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

static __device__ __forceinline__ uint32_t v_chunks(const fhd__sn_job &J) {
    return (uint32_t)fhd_cdiv(J.m, SN_CHUNK);
}

/* The V job's finish for k, m <= SN_THREADS SN_VCOLS, by the job's last block, with every value
 * a thread needs in registers: its columns' chunk partials and its elements of u are all in
 * flight at once (the general finish below walks the chunks one L2 round trip after another),
 * then two block sums instead of four. The same sums in the same order as the general finish:
 * the same bits. */
static __device__ void v_finish_regs(const fhd__sn_job &J, const float *part, double *red) {
    const uint32_t nch = v_chunks(J), k = J.k, m = J.m;
    float y[SN_VCOLS], u[SN_VCOLS];
#pragma unroll
    for (int j = 0; j < SN_VCOLS; j++) {
        const uint32_t i = threadIdx.x + j * SN_THREADS;
        u[j] = i < m ? __ldcg(J.u + i) : 0.0f;
        y[j] = 0.0f;
    }
    for (uint32_t q0 = 0; q0 < nch; q0 += SN_VGROUP) {
        float x[SN_VCOLS][SN_VGROUP];
#pragma unroll
        for (int j = 0; j < SN_VCOLS; j++) {
            const uint32_t c = threadIdx.x + j * SN_THREADS;
#pragma unroll
            for (int q = 0; q < SN_VGROUP; q++)
                x[j][q] = c < k && q0 + q < nch ? __ldcg(part + (size_t)(q0 + q) * k + c) : 0.0f;
        }
#pragma unroll
        for (int j = 0; j < SN_VCOLS; j++)
#pragma unroll
            for (int q = 0; q < SN_VGROUP; q++)
                if (q0 + q < nch)
                    y[j] += x[j][q];
    }
    const float inv = inv_norm_regs(y, k, red); /* v = y / |y|, as normalize_into */
    double sums[4] = {0.0, 0.0, 0.0, 0.0}; /* v . y, |v|^2, |u|^2 */
#pragma unroll
    for (int j = 0; j < SN_VCOLS; j++) {
        const uint32_t c = threadIdx.x + j * SN_THREADS;
        if (c < k) {
            const float v = y[j] * inv;
            J.v[c] = v;
            sums[0] += (double)v * y[j];
            sums[1] += (double)v * v;
        }
        if (c < m)
            sums[2] += (double)u[j] * u[j];
    }
    fhd_block_sum4_d(sums, red);
    if (threadIdx.x == 0) {
        const float sigma = (float)sums[0];
        *J.sigma = sigma;
        *J.inv_sigma = 1.0f / sigma;
        J.norms[0] = (float)sums[2];
        J.norms[1] = (float)sums[1];
    }
}

__global__ void __launch_bounds__(SN_THREADS) fhd_sn_kernel(const __grid_constant__ fhd__sn_args a) {
    __shared__ double red[4 * 32];
    __shared__ double wdot[SN_WARPS];
    uint32_t ji = 0;
    while (ji < a.njobs && blockIdx.x >= a.job[ji].block0 + a.job[ji].nblocks)
        ji++;
    if (ji >= a.njobs)
        return; /* padding block of a tiny grid */
    const fhd__sn_job &J = a.job[ji];
    const uint32_t t = blockIdx.x - J.block0;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    /* the V pass (a programmatic dependent of this one) may start its W loads now */
    fhd_pdl_trigger();
    if (J.mode != SN_JOB_V) /* U and sigma jobs: no loads to issue before the wait */
        fhd_pdl_wait();
    if (J.mode == SN_JOB_U) { /* u = normalize(W v) */
        const uint32_t r = t * SN_WARPS + warp;
        const float z = row_dot(J, r);
        if (lane == 0 && r < J.m)
            J.scratch[r] = z;
        if (fhd_last_block_done(J.done, J.nblocks))
            normalize_into(J.u, J.scratch, J.m, red);
    } else if (J.mode == SN_JOB_SIGMA) { /* sigma = u . (W v) with the stored vectors */
        const uint32_t r = t * SN_WARPS + warp;
        const float z = row_dot(J, r);
        if (lane == 0)
            wdot[warp] = r < J.m ? (double)__ldcg(J.u + r) * z : 0.0;
        __syncthreads();
        if (threadIdx.x == 0) {
            double s = 0.0;
            for (int w = 0; w < SN_WARPS; w++)
                s += wdot[w];
            J.partial[t] = s;
        }
        if (fhd_last_block_done(J.done, J.nblocks) && threadIdx.x < 32) {
            const double s = fhd_warp_sum_strided(J.partial, J.nblocks, 1);
            if (threadIdx.x == 0) {
                const float sigma = (float)s;
                *J.sigma = sigma;
                *J.inv_sigma = 1.0f / sigma;
            }
        }
    } else { /* SN_JOB_V: v = normalize(W^T u), sigma = u . (W v) = (W^T u) . v */
        const uint32_t tiles = (uint32_t)fhd_cdiv(J.k, SN_TILE);
        float *part = J.scratch + (J.m > J.k ? J.m : J.k); /* (chunks, k) */
        col_chunk(J, t % tiles, t / tiles, part);
        if (fhd_last_block_done(J.done, J.nblocks)) {
            if (J.k <= SN_THREADS * SN_VCOLS && J.m <= SN_THREADS * SN_VCOLS) {
                v_finish_regs(J, part, red);
                return;
            }
            /* W^T u: the chunks' partials per column, in chunk order */
            const uint32_t nch = v_chunks(J);
            for (uint32_t c = threadIdx.x; c < J.k; c += blockDim.x) {
                float sum = 0.0f;
                for (uint32_t q = 0; q < nch; q++)
                    sum += __ldcg(part + (size_t)q * J.k + c);
                J.scratch[c] = sum;
            }
            __syncthreads();
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

uint64_t fhd__cuda_sn_scratch_floats(uint32_t m, uint32_t k) {
    return (uint64_t)(m > k ? m : k) + fhd_cdiv(m, SN_CHUNK) * (uint64_t)k;
}

uint32_t fhd__cuda_sn_job_blocks(uint32_t mode, uint32_t m, uint32_t k) {
    if (mode == SN_JOB_V)
        return (uint32_t)(fhd_cdiv(k, SN_TILE) * fhd_cdiv(m, SN_CHUNK));
    return (uint32_t)fhd_cdiv(m, SN_WARPS);
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

void fhd__cuda_sn_allow_pdl(fhd__sn_args *a) {
    a->pdl = fhd_pdl_allowed((const void *)fhd_sn_kernel);
}

cudaError_t fhd__cuda_sn_launch(const fhd__sn_args *a, cudaStream_t stream) {
    if (a->njobs == 0)
        return cudaSuccess;
    cudaLaunchAttribute attr;
    const cudaLaunchConfig_t cfg =
        fhd_pdl_config(dim3(a->nblocks), dim3(SN_THREADS), 0, stream, a->pdl, &attr);
    return cudaLaunchKernelEx(&cfg, fhd_sn_kernel, *a);
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
