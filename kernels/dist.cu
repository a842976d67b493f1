/* dist.cu - data-parallel training's kernels (see dist.cuh): the gradient finished and packed
 * with the loss and the checksum slots before the all-reduce, and the mean after it. */
#include "dist.cuh"
#include "optim_norm.cuh" /* norm_block: the optimiser's own finishing of the gradient */

#define CK_ELEMS 2048 /* checksum elements a block at least (8 a thread) */
#define CK_MAX_BLOCKS 264
#define SCALE_ELEMS 2048

uint32_t fhd__cuda_dist_ck_blocks(uint64_t P) {
    const uint64_t g = fhd_cdiv(2 * P, CK_ELEMS);
    return (uint32_t)(g < 2 ? 2 : g > CK_MAX_BLOCKS ? CK_MAX_BLOCKS : g);
}

uint32_t fhd__cuda_dist_scale_blocks(uint64_t P) {
    const uint64_t g = fhd_cdiv(P + 1, SCALE_ELEMS);
    return (uint32_t)(g < 2 ? 2 : g > 4096 ? 4096 : g);
}

/* Blocks [0, opt.nblocks): the optimiser's norm blocks, which write the finished gradient (their
 * sums of squares go to opt.partial, which the optimiser's own norm pass overwrites). Blocks
 * past them: on a checksum update (the record's update count a multiple of the interval: the
 * parameters after that update) the sum of the parameters' terms; the last of them writes the
 * loss and every slot. */
template <int MAXX, int PER>
__global__ void __launch_bounds__(OPT_THREADS)
    fhd_dist_pack_kernel(const __grid_constant__ fhd__opt_args a,
                         const __grid_constant__ fhd__dist_args d) {
    __shared__ double red[4 * 32];
    __shared__ unsigned long long wsum[OPT_THREADS / 32];
    if (blockIdx.x < a.nblocks) {
        norm_block<MAXX, false, PER, false>(a, blockIdx.x, red);
        return;
    }
    const uint64_t t = d.st->updates;
    const bool due = t % d.interval == 0;
    if (due) {
        const uint64_t n = 2 * d.P, stride = (uint64_t)d.ck_blocks * OPT_THREADS;
        unsigned long long h = 0;
        for (uint64_t i = (uint64_t)(blockIdx.x - a.nblocks) * OPT_THREADS + threadIdx.x; i < n;
             i += stride) {
            const float v = i < d.P ? d.params[i] : d.params[d.T + (i - d.P)];
            h += fhd__dist_term(i, __float_as_uint(v));
        }
        for (int o = 16; o > 0; o >>= 1)
            h += __shfl_down_sync(0xffffffffu, h, o);
        if ((threadIdx.x & 31) == 0)
            wsum[threadIdx.x >> 5] = h;
        __syncthreads();
        if (threadIdx.x == 0) {
            unsigned long long s = 0;
            for (int w = 0; w < OPT_THREADS / 32; w++)
                s += wsum[w];
            atomicAdd(&d.ds->acc, s); /* integer addition: any order gives the same sum */
        }
    }
    if (!fhd_last_block_done(&d.ds->done, d.ck_blocks))
        return;
    __shared__ unsigned long long value;
    if (threadIdx.x == 0) {
        value = due ? atomicExch(&d.ds->acc, 0ull) : 0ull;
        d.buf[d.P] = d.st->pend_loss;
        d.ds->due = due ? 1u : 0u;
        d.ds->pending = t;
    }
    __syncthreads();
    float *slots = d.buf + d.P + 1;
    for (uint32_t k = threadIdx.x; k < FHD_DIST_CK_WORDS * d.world; k += OPT_THREADS) {
        const bool mine = due && k / FHD_DIST_CK_WORDS == d.rank;
        const uint32_t word = (uint32_t)(value >> (16 * (k % FHD_DIST_CK_WORDS))) & 0xffffu;
        slots[k] = mine ? (float)word : 0.0f;
    }
}

static __device__ __forceinline__ uint64_t slot_value(const float *slots, uint32_t r) {
    uint64_t v = 0;
    for (int w = 0; w < FHD_DIST_CK_WORDS; w++)
        v |= (uint64_t)(uint32_t)slots[(size_t)r * FHD_DIST_CK_WORDS + w] << (16 * w);
    return v;
}

/* After the all-reduce: buf[0, P] (the gradient and the loss) times 1 / W, the loss into
 * pend_loss (the guard and the statistics read it there); block 0 compares the checksums of a
 * checksum update. */
__global__ void __launch_bounds__(256)
    fhd_dist_scale_kernel(const __grid_constant__ fhd__dist_args d) {
    const uint64_t stride = (uint64_t)gridDim.x * blockDim.x;
    for (uint64_t i = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x; i <= d.P; i += stride) {
        const float x = __fmul_rn(d.buf[i], d.inv);
        d.buf[i] = x;
        if (i == d.P)
            d.st->pend_loss = x;
    }
    if (blockIdx.x != 0 || !d.ds->due)
        return;
    __shared__ unsigned int differ;
    if (threadIdx.x == 0)
        differ = 0;
    __syncthreads();
    const float *slots = d.buf + d.P + 1;
    const uint64_t v0 = slot_value(slots, 0);
    unsigned int mine = 0;
    for (uint32_t r = threadIdx.x; r < d.world; r += blockDim.x)
        mine += slot_value(slots, r) != v0;
    if (mine)
        atomicAdd(&differ, mine);
    __syncthreads();
    if (threadIdx.x == 0) {
        d.rec->ck_update = d.ds->pending;
        d.rec->ck_value = slot_value(slots, d.rank);
        d.rec->ck_differ = differ;
        d.rec->ck_count += 1;
    }
}

template <int PER>
static void pack_per(const fhd__opt_args *a, const fhd__dist_args *d, bool many, cudaStream_t s) {
    const unsigned int grid = a->nblocks + d->ck_blocks;
    if (many)
        fhd_dist_pack_kernel<FHD_OPT_MAX_EXTRA, PER><<<grid, OPT_THREADS, 0, s>>>(*a, *d);
    else
        fhd_dist_pack_kernel<1, PER><<<grid, OPT_THREADS, 0, s>>>(*a, *d);
}

cudaError_t fhd__cuda_dist_pack(const fhd__opt_args *a, const fhd__dist_args *d,
                                cudaStream_t stream) {
    bool many = false; /* the optimiser's instance rule (optim.cu, many_parts) */
    for (uint32_t s = 0; s < a->nseg; s++)
        many = many || (a->seg[s].extra && a->seg[s].nextra > 1);
    switch (a->per) {
    case 2:
        pack_per<2>(a, d, many, stream);
        break;
    case 4:
        pack_per<4>(a, d, many, stream);
        break;
    default:
        pack_per<8>(a, d, many, stream);
    }
    return cudaGetLastError();
}

cudaError_t fhd__cuda_dist_scale(const fhd__dist_args *d, cudaStream_t stream) {
    fhd_dist_scale_kernel<<<d->scale_blocks, 256, 0, stream>>>(*d);
    return cudaGetLastError();
}

/* Load this file's kernels now (lazy module loading must not happen inside a graph capture). */
cudaError_t fhd__cuda_dist_preload(void) {
    cudaFuncAttributes fa;
    const void *k[] = {(const void *)fhd_dist_pack_kernel<1, 2>,
                       (const void *)fhd_dist_pack_kernel<1, 4>,
                       (const void *)fhd_dist_pack_kernel<1, 8>,
                       (const void *)fhd_dist_pack_kernel<FHD_OPT_MAX_EXTRA, 2>,
                       (const void *)fhd_dist_pack_kernel<FHD_OPT_MAX_EXTRA, 4>,
                       (const void *)fhd_dist_pack_kernel<FHD_OPT_MAX_EXTRA, 8>,
                       (const void *)fhd_dist_scale_kernel};
    for (const void *f : k) {
        const cudaError_t e = cudaFuncGetAttributes(&fa, f);
        if (e != cudaSuccess)
            return e;
    }
    return cudaSuccess;
}
