/* prune.cu - the pruning selection and masks on the device (see prune.cuh). Integer atomics
 * only (histogram counts), so the result is exact and independent of block order. */
#include "common.cuh"
#include "prune.cuh"

/* The schedule of plugin/prune.c, in uncontracted double operations (bitwise the host's). */
static __device__ bool prune_at(const fhd__prune_args &a, uint64_t t, double *s) {
    if (t < a.start || t > a.end || (t - a.start) % a.frequency != 0 || (a.skip && *a.skip))
        return false;
    const uint64_t span = a.end - a.start;
    const double r = span ? __dsub_rn(1.0, __ddiv_rn((double)(t - a.start), (double)span)) : 0.0;
    *s = __dmul_rn(a.sparsity, __dsub_rn(1.0, __dmul_rn(__dmul_rn(r, r), r)));
    return true;
}

/* round(s n), halves to even (fhd__prune_count). */
static __device__ uint64_t prune_count(double s, uint64_t n) {
    const double x = __dmul_rn(s, (double)n), f = floor(x), d = __dsub_rn(x, f);
    double k = d > 0.5 ? f + 1.0 : (d < 0.5 ? f : ((((uint64_t)f) & 1u) == 0 ? f : f + 1.0));
    return k <= 0.0 ? 0 : (k >= (double)n ? n : (uint64_t)k);
}

static __device__ __forceinline__ uint64_t prune_key(float w, uint64_t index) {
    return ((uint64_t)(__float_as_uint(w) & 0x7fffffffu) << 32) | index;
}

/* The segment of block b. */
static __device__ __forceinline__ int seg_of(const fhd__prune_args &a, uint32_t b) {
    int s = 0;
    while (s + 1 < (int)a.nsegs && b >= a.seg[s + 1].block0)
        s++;
    return s;
}

/* Bits [lo, lo + width) of the key are pass p's digit. */
static __device__ __forceinline__ void digit_bits(int pass, int *lo, int *width) {
    const int hi = 63 - FHD_PRUNE_BITS * pass;
    *lo = hi - FHD_PRUNE_BITS > 0 ? hi - FHD_PRUNE_BITS : 0;
    *width = hi - *lo;
}

__global__ void __launch_bounds__(FHD_PRUNE_THREADS)
    prune_hist_kernel(const fhd__prune_args a, int pass) {
    __shared__ uint32_t sh[FHD_PRUNE_BINS];
    __shared__ uint64_t cum[FHD_PRUNE_THREADS];
    double s;
    if (!prune_at(a, a.dev->updates, &s))
        return; /* every block returns: the counter is untouched */
    int lo, width;
    digit_bits(pass, &lo, &width);
    const uint64_t dmask = (UINT64_C(1) << width) - 1;
    for (uint32_t i = threadIdx.x; i < FHD_PRUNE_BINS; i += blockDim.x)
        sh[i] = 0;
    __syncthreads();
    const fhd__prune_seg &sg = a.seg[seg_of(a, blockIdx.x)];
    const fhd__prune_group gr = a.groups[sg.group];
    if (pass == 0 || gr.k > 0) {
        const uint64_t per = (sg.count + sg.nblocks - 1) / sg.nblocks;
        const uint64_t b0 = (uint64_t)(blockIdx.x - sg.block0) * per;
        const uint64_t b1 = b0 + per < sg.count ? b0 + per : sg.count;
        for (uint64_t i = b0 + threadIdx.x; i < b1; i += blockDim.x) {
            const uint64_t key = prune_key(__ldg(a.W + sg.off + i), sg.off + i);
            if ((key & gr.pmask) == gr.prefix)
                atomicAdd(&sh[(key >> lo) & dmask], 1u);
        }
    }
    __syncthreads();
    uint32_t *gh = a.hist + (size_t)sg.group * FHD_PRUNE_BINS;
    for (uint32_t i = threadIdx.x; i < FHD_PRUNE_BINS; i += blockDim.x)
        if (sh[i])
            atomicAdd(gh + i, sh[i]);
    if (!fhd_last_block_done(a.counter, gridDim.x))
        return;
    /* the last block: per group, the bucket holding the rank, then the histogram cleared */
    const uint32_t per_t = FHD_PRUNE_BINS / FHD_PRUNE_THREADS; /* 8 bins a thread */
    for (uint32_t g = 0; g < a.ngroups; g++) {
        uint32_t *h = a.hist + (size_t)g * FHD_PRUNE_BINS;
        fhd__prune_group *G = a.groups + g;
        if (pass == 0 && threadIdx.x == 0) {
            G->k = prune_count(s, a.group_n[g]);
            G->rank = G->k ? G->k - 1 : 0;
        }
        __syncthreads();
        const uint64_t k = *(volatile uint64_t *)&G->k, rank = *(volatile uint64_t *)&G->rank;
        uint64_t mine = 0;
        for (uint32_t j = 0; j < per_t; j++)
            mine += __ldcg(h + threadIdx.x * per_t + j);
        cum[threadIdx.x] = mine;
        __syncthreads();
        if (threadIdx.x == 0) { /* exclusive prefix over the threads' sums, in order */
            uint64_t run = 0;
            for (uint32_t t = 0; t < FHD_PRUNE_THREADS; t++) {
                const uint64_t c = cum[t];
                cum[t] = run;
                run += c;
            }
        }
        __syncthreads();
        const uint64_t before = cum[threadIdx.x];
        if (k > 0 && rank >= before && rank < before + mine) { /* exactly one thread */
            uint64_t r = rank - before;
            uint32_t bin = threadIdx.x * per_t;
            for (;; bin++) {
                const uint64_t c = __ldcg(h + bin);
                if (r < c)
                    break;
                r -= c;
            }
            G->prefix |= (uint64_t)bin << lo;
            G->pmask |= dmask << lo;
            G->rank = r;
        }
        __syncthreads();
        for (uint32_t j = threadIdx.x; j < FHD_PRUNE_BINS; j += blockDim.x)
            h[j] = 0;
        __syncthreads();
    }
}

__global__ void __launch_bounds__(FHD_PRUNE_THREADS) prune_apply_kernel(const fhd__prune_args a) {
    double s;
    if (!prune_at(a, a.dev->updates, &s))
        return;
    const fhd__prune_seg &sg = a.seg[seg_of(a, blockIdx.x)];
    const fhd__prune_group gr = a.groups[sg.group];
    const uint64_t per = (sg.count + sg.nblocks - 1) / sg.nblocks;
    const uint64_t b0 = (uint64_t)(blockIdx.x - sg.block0) * per;
    const uint64_t b1 = b0 + per < sg.count ? b0 + per : sg.count;
    for (uint64_t i = b0 + threadIdx.x; i < b1; i += blockDim.x) {
        const uint64_t o = sg.off + i;
        const bool pruned = gr.k > 0 && prune_key(a.W[o], o) <= gr.prefix;
        a.mask[o] = pruned ? 0.0f : 1.0f;
        if (pruned) {
            a.W[o] = 0.0f;
            a.adam_m[o] = 0.0f;
            a.adam_v[o] = 0.0f;
        }
    }
    if (!fhd_last_block_done(a.counter, gridDim.x))
        return;
    for (uint32_t g = threadIdx.x; g < a.ngroups; g += blockDim.x)
        a.groups[g] = fhd__prune_group{0, 0, 0, 0}; /* the next selection starts from scratch */
}

/* extra: the segments' further gradient parts too (fhd__cuda_prune_mask_grad) */
__global__ void __launch_bounds__(FHD_PRUNE_THREADS)
    prune_mask_kernel(const fhd__prune_args a, float *x, bool extra) {
    const fhd__prune_seg &sg = a.seg[seg_of(a, blockIdx.x)];
    const uint64_t per = (sg.count + sg.nblocks - 1) / sg.nblocks;
    const uint64_t b0 = (uint64_t)(blockIdx.x - sg.block0) * per;
    const uint64_t b1 = b0 + per < sg.count ? b0 + per : sg.count;
    const uint32_t nx = extra && sg.extra ? sg.nextra : 0u;
    for (uint64_t i = b0 + threadIdx.x; i < b1; i += blockDim.x)
        if (__ldg(a.mask + sg.off + i) == 0.0f) {
            x[sg.off + i] = 0.0f;
            for (uint32_t q = 0; q < nx; q++)
                sg.extra[(size_t)q * sg.count + i] = 0.0f;
        }
}

__global__ void prune_fill_kernel(float *mask, uint64_t n) {
    for (uint64_t i = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (uint64_t)gridDim.x * blockDim.x)
        mask[i] = 1.0f;
}

void fhd__cuda_prune_plan(fhd__prune_args *a) {
    uint32_t b = 0;
    for (uint32_t i = 0; i < a->nsegs; i++) {
        const uint64_t n = (a->seg[i].count + FHD_PRUNE_CHUNK - 1) / FHD_PRUNE_CHUNK;
        a->seg[i].block0 = b;
        a->seg[i].nblocks = n < 2 ? 2u : (uint32_t)n;
        b += a->seg[i].nblocks;
    }
    a->nblocks = b;
}

cudaError_t fhd__cuda_prune_select(const fhd__prune_args *a, cudaStream_t stream) {
    for (int p = 0; p < FHD_PRUNE_PASSES; p++)
        prune_hist_kernel<<<a->nblocks, FHD_PRUNE_THREADS, 0, stream>>>(*a, p);
    prune_apply_kernel<<<a->nblocks, FHD_PRUNE_THREADS, 0, stream>>>(*a);
    return cudaGetLastError();
}

cudaError_t fhd__cuda_prune_mask(const fhd__prune_args *a, float *x, cudaStream_t stream) {
    prune_mask_kernel<<<a->nblocks, FHD_PRUNE_THREADS, 0, stream>>>(*a, x, false);
    return cudaGetLastError();
}

cudaError_t fhd__cuda_prune_mask_grad(const fhd__prune_args *a, float *grad, cudaStream_t stream) {
    prune_mask_kernel<<<a->nblocks, FHD_PRUNE_THREADS, 0, stream>>>(*a, grad, true);
    return cudaGetLastError();
}

cudaError_t fhd__cuda_prune_fill_ones(float *mask, uint64_t n, cudaStream_t stream) {
    const uint64_t blocks = (n + FHD_PRUNE_CHUNK - 1) / FHD_PRUNE_CHUNK;
    const unsigned int grid = blocks < 2 ? 2u : (blocks > 65535 ? 65535u : (unsigned int)blocks);
    prune_fill_kernel<<<grid, FHD_PRUNE_THREADS, 0, stream>>>(mask, n);
    return cudaGetLastError();
}

cudaError_t fhd__cuda_prune_preload(void) {
    cudaFuncAttributes fa;
    const void *k[] = {(const void *)prune_hist_kernel, (const void *)prune_apply_kernel,
                       (const void *)prune_mask_kernel, (const void *)prune_fill_kernel};
    for (const void *f : k) {
        const cudaError_t e = cudaFuncGetAttributes(&fa, f);
        if (e != cudaSuccess)
            return e;
    }
    return cudaSuccess;
}
