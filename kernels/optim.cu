/* optim.cu - the optimiser's kernels and their launches (see optim.cuh): global-norm clipping
 * (with the spectral-norm gradient folded in) and the Adam / target-update pass, as two kernels or
 * one cooperative launch. The passes' device code is optim_norm.cuh's and optim_adam.cuh's. */
#include <math.h>

#include <cooperative_groups.h>

#include "optim_adam.cuh"
#include "optim_norm.cuh"

/* The two-kernel pass (where cooperative launch is missing): every spectral-norm path compiled
 * in, each taken by the plan's values. */
template <int MAXX, int PER>
__global__ void __launch_bounds__(OPT_THREADS)
    fhd_clip_grad_norm_kernel(const __grid_constant__ fhd__opt_args a) {
    __shared__ double red[4 * 32];
    norm_block<MAXX, true, PER, true>(a, blockIdx.x, red);
    if (!fhd_last_block_done(a.done_norm, gridDim.x))
        return;
    __shared__ float sc[2];
    const uint64_t t = a.st->updates + 1; /* the Adam kernel after this one raises it */
    if (threadIdx.x == 0)
        fhd_adam_scalars(a.lr, a.beta1, a.beta2, t, &sc[0], &sc[1]);
    finish_norm<true, true>(a, a.clip, sc[0], sc[1], (int)(t & 1)); /* its barriers publish sc */
    /* the norm reaches the record with the guard's decision, by the Adam kernel's last block */
}

template <int PER, bool W16>
__global__ void __launch_bounds__(OPT_THREADS)
    fhd_adam_step_kernel(const __grid_constant__ fhd__opt_args a) {
    const uint64_t t = a.st->updates + 1;
    const bool due = (t % a.target_interval) == 0;
    const int32_t skip = a.clip->skip; /* the guard: nothing applied */
    if (!skip)
        adam_block<true, PER, true, W16>(a, blockIdx.x, t, due, *a.clip);
    if (fhd_last_block_done(a.done_adam, gridDim.x) && threadIdx.x == 0)
        fhd_guard_publish(a, skip, a.clip->norm, t); /* every block has read the counter */
}

/* After the fused pass's barrier, by block 0: the coefficients for the snapshots and the
 * train_batch path, the statistics, and the counter (every block read it before the barrier:
 * no counter of finished blocks, and its fence, is needed at the end). */
static __device__ __forceinline__ void publish(const fhd__opt_args &a, const fhd__clip_info &ci,
                                               uint64_t t) {
    if (blockIdx.x == 0 && threadIdx.x == 0) {
        fhd__clip_info *g = a.clip;
        g->norm = ci.norm;
        g->coef = ci.coef;
        g->clip = ci.clip;
        g->skip = ci.skip; /* the priority commit after this kernel reads it */
        for (uint32_t l = 0; l < a.nsn; l++) {
            g->sn_c[l] = ci.sn_c[l];
            g->sn_inv[l] = ci.sn_inv[l];
        }
        g->step = ci.step;
        g->bc2_sqrt = ci.bc2_sqrt;
        fhd_guard_publish(a, ci.skip, ci.norm, t);
    }
}

/* Both passes in one cooperative launch of co-resident blocks, each taking blocks blockIdx.x,
 * blockIdx.x + gridDim.x, ... of each pass: the norm pass, a grid barrier, the norm and clip
 * coefficient computed by every block (the same sums in the same order: the same values), the
 * Adam pass. One graph node instead of two on the update's critical path. */
template <int MAXX, bool SN, int PER, bool MK, bool W16>
__global__ void __launch_bounds__(OPT_THREADS)
    fhd_opt_fused_kernel(const __grid_constant__ fhd__opt_args a) {
    __shared__ double red[4 * 32];
    __shared__ fhd__clip_info ci;
    const uint64_t t = a.st->updates + 1;
    const bool due = (t % a.target_interval) == 0;
    /* Adam's scalars: by the priority update, beside the backward pass (two double pow here
     * would delay block 0's arrival at the barrier) */
    const float pre_step = __ldcg(&a.clip->pre_step), pre_bc2 = __ldcg(&a.clip->pre_bc2_sqrt);
    for (uint32_t blk = blockIdx.x; blk < a.nblocks; blk += gridDim.x)
        norm_block<MAXX, SN, PER, MK>(a, blk, red);
    /* the grid barrier orders the partials (thread 0 writes them; it is the block's master,
     * whose arrival is a release at GPU scope, and the wait an acquire): no __threadfence in
     * every thread before it, which would only delay the arrival */
    cooperative_groups::this_grid().sync();
    finish_norm<SN, MK>(a, &ci, pre_step, pre_bc2, blockIdx.x == 0 ? (int)(t & 1) : -1);
    publish(a, ci, t);
    if (ci.skip) /* the guard: parameters, moments, target and SN copy unchanged */
        return;
    for (uint32_t blk = blockIdx.x; blk < a.nblocks + a.sn_blocks; blk += gridDim.x)
        adam_block<SN, PER, MK, W16>(a, blk, t, due, ci);
}

/* The fused pass where the grid covers both passes (fhd__cuda_opt_fused_grid says where that
 * pays): block i runs norm block i, then issues the loads of Adam block i's weights, moments
 * and SN vectors before the grid barrier, and the gradient's (the norm pass writes the summed
 * parts and bias gradients into it) after. A kernel of its own: one kernel with both forms
 * doubles the code of each, and is slower. */
template <int MAXX, bool SN, int PER, bool MK, bool W16>
__global__ void __launch_bounds__(OPT_THREADS,
                                  1) /* the inputs held across the barrier: no spills */
    fhd_opt_fused_kernel_one(const __grid_constant__ fhd__opt_args a) {
    __shared__ double red[4 * 32];
    __shared__ fhd__clip_info ci;
    const uint64_t t = a.st->updates + 1;
    const bool due = (t % a.target_interval) == 0;
    const float pre_step = __ldcg(&a.clip->pre_step), pre_bc2 = __ldcg(&a.clip->pre_bc2_sqrt);
    const uint32_t blk = blockIdx.x;
    const int si = blk < a.nblocks ? find_segment(a, blk) : -1;
    if (blk < a.nblocks)
        norm_block<MAXX, SN, PER, MK>(a, blk, red);
    adam_in<PER> R;
    if (si >= 0) {
        adam_range(a, si, R);
        adam_load<SN, PER, MK>(a, R);
    }
    cooperative_groups::this_grid().sync();
    finish_norm<SN, MK>(a, &ci, pre_step, pre_bc2, blockIdx.x == 0 ? (int)(t & 1) : -1);
    publish(a, ci, t);
    if (ci.skip) /* the guard: parameters, moments, target and SN copy unchanged */
        return;
    if (si < 0) {
        if (blk >= a.nblocks && due)
            sn_copy_block(a, blk);
        return;
    }
#pragma unroll
    for (int j = 0; j < PER; j++) {
        const uint64_t e = R.start + (uint64_t)j * OPT_THREADS + threadIdx.x;
        R.g[j] = e < R.end ? a.grad[e] : 0.0f;
    }
    const adam_coef c = adam_coefs<SN>(a, *R.S, ci);
    const bool sn = SN && R.S->sn >= 0;
#pragma unroll
    for (int j = 0; j < PER; j++) {
        const uint64_t e = R.start + (uint64_t)j * OPT_THREADS + threadIdx.x;
        if (e >= R.end)
            break;
        adam_elem<W16>(a, *R.S, c, sn, due, e, R.g[j], R.pv[j], R.m0[j], R.v0[j], R.ur[j], R.vc[j]);
    }
}

void fhd__cuda_opt_plan(fhd__opt_args *a, uint32_t per) {
    a->per = per;
    uint32_t b = 0;
    for (uint32_t s = 0; s < a->nseg; s++) {
        a->seg[s].block0 = b;
        a->seg[s].chunk = a->seg[s].partial ? FHD_OPT_BIAS_COLS : per * OPT_THREADS;
        a->seg[s].nblocks = (uint32_t)fhd_cdiv(a->seg[s].len, a->seg[s].chunk);
        b += a->seg[s].nblocks;
    }
    a->nblocks = b < 2 ? 2 : b;
    a->sn_blocks = (uint32_t)fhd_cdiv(a->sn_size, FHD_OPT_CHUNK);
}

/* The kernels' instance: one further part of a segment's gradient at most (a split dW GEMM's
 * second half), or up to FHD_OPT_MAX_EXTRA (layer 0's dW partials), whose loads take registers
 * that a plan with fewer parts should not pay for. */
static bool many_parts(const fhd__opt_args *a) {
    for (uint32_t s = 0; s < a->nseg; s++)
        if (a->seg[s].extra && a->seg[s].nextra > 1)
            return true;
    return false;
}

/* The fused kernels' instance for a plan: the loop or the one-pass form, one further part or
 * more, without the spectral-norm paths, with them, or with them and their masked correction
 * (pruning: fhd__opt_sn.mask), with or without the GEMMs' bf16 copies (code a plan does not run
 * is code its SMs do not fetch). */
template <bool ONE, int MAXX, bool SN, int PER, bool MK, bool W16>
static const void *fused_instance() {
    return ONE ? (const void *)fhd_opt_fused_kernel_one<MAXX, SN, PER, MK, W16>
               : (const void *)fhd_opt_fused_kernel<MAXX, SN, PER, MK, W16>;
}

static bool masked_sn(const fhd__opt_args *a) {
    for (uint32_t l = 0; l < a->nsn; l++)
        if (a->sn[l].mask)
            return true;
    return false;
}

/* Segments that carry the GEMMs' copies (fhd__opt_segment.w16 / f32). The plan that keeps
 * them (w16_opt) has neither layer 0's dW partials nor pruning masks: their instances have
 * no copy form. */
static bool copies(const fhd__opt_args *a) {
    for (uint32_t s = 0; s < a->nseg; s++)
        if (a->seg[s].w16 || a->seg[s].f32)
            return true;
    return false;
}

template <bool ONE, int MAXX, int PER> static const void *fused_sn(const fhd__opt_args *a) {
    if (a->nsn == 0)
        return fused_instance<ONE, MAXX, false, PER, false, false>();
    return masked_sn(a) ? fused_instance<ONE, MAXX, true, PER, true, false>()
                        : fused_instance<ONE, MAXX, true, PER, false, false>();
}

template <bool ONE, int PER> static const void *fused_instance(const fhd__opt_args *a) {
    if (copies(a))
        return a->nsn ? fused_instance<ONE, 1, true, PER, false, true>()
                      : fused_instance<ONE, 1, false, PER, false, true>();
    return many_parts(a) ? fused_sn<ONE, FHD_OPT_MAX_EXTRA, PER>(a) : fused_sn<ONE, 1, PER>(a);
}

template <bool ONE> static const void *fused_instance(const fhd__opt_args *a) {
    switch (a->per) {
    case 2:
        return fused_instance<ONE, 2>(a);
    case 4:
        return fused_instance<ONE, 4>(a);
    default:
        return fused_instance<ONE, 8>(a);
    }
}

static const void *fused_kernel(const fhd__opt_args *a, bool one) {
    return one ? fused_instance<true>(a) : fused_instance<false>(a);
}

template <int PER> static void two_kernels(const fhd__opt_args *a, bool adam, cudaStream_t stream) {
    if (adam && copies(a))
        fhd_adam_step_kernel<PER, true><<<a->nblocks + a->sn_blocks, OPT_THREADS, 0, stream>>>(*a);
    else if (adam)
        fhd_adam_step_kernel<PER, false><<<a->nblocks + a->sn_blocks, OPT_THREADS, 0, stream>>>(*a);
    else if (many_parts(a))
        fhd_clip_grad_norm_kernel<FHD_OPT_MAX_EXTRA, PER>
            <<<a->nblocks, OPT_THREADS, 0, stream>>>(*a);
    else
        fhd_clip_grad_norm_kernel<1, PER><<<a->nblocks, OPT_THREADS, 0, stream>>>(*a);
}

/* The norm kernel (adam false) or the Adam kernel of a's plan. */
static cudaError_t launch_two(const fhd__opt_args *a, bool adam, cudaStream_t stream) {
    switch (a->per) {
    case 2:
        two_kernels<2>(a, adam, stream);
        break;
    case 4:
        two_kernels<4>(a, adam, stream);
        break;
    default:
        two_kernels<8>(a, adam, stream);
    }
    return cudaGetLastError();
}

cudaError_t fhd__cuda_clip_grad_norm(const fhd__opt_args *a, cudaStream_t stream) {
    return launch_two(a, false, stream);
}

cudaError_t fhd__cuda_adam_step(const fhd__opt_args *a, cudaStream_t stream) {
    return launch_two(a, true, stream);
}

unsigned int fhd__cuda_opt_fused_grid(fhd__opt_args *a, int device) {
    int per_sm = 0, per_sm1 = 0, sms = 0, coop = 0;
    if (cudaDeviceGetAttribute(&coop, cudaDevAttrCooperativeLaunch, device) != cudaSuccess ||
        !coop ||
        cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device) != cudaSuccess) {
        fhd__cuda_opt_plan(a, 8); /* the two-kernel pass: the plan as set up */
        (void)cudaGetLastError();
        return 0;
    }
    /* The fewest elements a thread whose blocks the grid holds in one round: 2 (blocks of 512)
     * where those fit two a multiprocessor, 4 (1024) where they fit one, else 8 (2048). Fewer a
     * thread is less unrolled code and fewer loads in a row, with more blocks side by side; a
     * grid that would need two rounds of blocks takes the next larger size. */
    fhd__cuda_opt_plan(a, 2);
    if ((uint64_t)a->nblocks + a->sn_blocks > 2 * (uint64_t)sms) {
        fhd__cuda_opt_plan(a, 4);
        if ((uint64_t)a->nblocks + a->sn_blocks > (uint64_t)sms)
            fhd__cuda_opt_plan(a, 8);
    }
    if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, fused_kernel(a, false), OPT_THREADS,
                                                      0) != cudaSuccess ||
        cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm1, fused_kernel(a, true), OPT_THREADS,
                                                      0) != cudaSuccess ||
        per_sm < 1) {
        fhd__cuda_opt_plan(a, 8); /* the two-kernel pass: the plan as set up */
        (void)cudaGetLastError();
        return 0;
    }
    const uint64_t want = (uint64_t)a->nblocks + a->sn_blocks;
    /* One pass where the grid has from 32 blocks to one a multiprocessor (blocks of 512: as
     * many as the multiprocessors hold). Thread 0's fence
     * before the barrier waits for its block's early loads: that pays where the blocks reach
     * the barrier spread out (a grid of 32 blocks or more), not where the grid is small or
     * the early loads of two blocks a multiprocessor crowd the norm pass. */
    const uint64_t fit = a->per == 2 ? (uint64_t)per_sm1 : 1u;
    a->one_pass = want >= 32 && want <= fit * (uint64_t)sms && per_sm1 >= 1;
    if (a->one_pass)
        return (unsigned int)want;
    const uint64_t cap = (uint64_t)per_sm * (uint64_t)sms;
    const uint64_t g = want < cap ? want : cap;
    return (unsigned int)(g < 2 ? 2 : g);
}

cudaError_t fhd__cuda_opt_fused(const fhd__opt_args *a, unsigned int grid, cudaStream_t stream) {
    cudaLaunchConfig_t cfg = {};
    cudaLaunchAttribute attr[1];
    attr[0].id = cudaLaunchAttributeCooperative;
    attr[0].val.cooperative = 1;
    cfg.gridDim = dim3(grid);
    cfg.blockDim = dim3(OPT_THREADS);
    cfg.dynamicSmemBytes = 0;
    cfg.stream = stream;
    cfg.attrs = attr;
    cfg.numAttrs = 1;
    void *args[] = {(void *)a};
    return cudaLaunchKernelExC(&cfg, fused_kernel(a, a->one_pass != 0), args);
}

/* The three spectral-norm forms of one fused kernel (fused_sn) and its two with copies. */
template <bool ONE, int MAXX, int PER> static void fused_forms(const void **k) {
    k[0] = fused_instance<ONE, MAXX, false, PER, false, false>();
    k[1] = fused_instance<ONE, MAXX, true, PER, false, false>();
    k[2] = fused_instance<ONE, MAXX, true, PER, true, false>();
}

template <bool ONE, int PER> static void copy_forms(const void **k) {
    k[0] = fused_instance<ONE, 1, false, PER, false, true>();
    k[1] = fused_instance<ONE, 1, true, PER, false, true>();
}

template <int PER> static cudaError_t preload_per() {
    cudaFuncAttributes fa;
    const void *k[20] = {(const void *)fhd_clip_grad_norm_kernel<1, PER>,
                         (const void *)fhd_clip_grad_norm_kernel<FHD_OPT_MAX_EXTRA, PER>,
                         (const void *)fhd_adam_step_kernel<PER, false>,
                         (const void *)fhd_adam_step_kernel<PER, true>};
    fused_forms<false, 1, PER>(k + 4);
    fused_forms<false, FHD_OPT_MAX_EXTRA, PER>(k + 7);
    fused_forms<true, 1, PER>(k + 10);
    fused_forms<true, FHD_OPT_MAX_EXTRA, PER>(k + 13);
    copy_forms<false, PER>(k + 16);
    copy_forms<true, PER>(k + 18);
    for (const void *f : k) {
        const cudaError_t e = cudaFuncGetAttributes(&fa, f);
        if (e != cudaSuccess)
            return e;
    }
    return cudaSuccess;
}

/* Load this file's kernels now (lazy module loading must not happen inside a graph
 * capture). */
cudaError_t fhd__cuda_optim_preload(void) {
    cudaError_t e = preload_per<2>();
    if (e == cudaSuccess)
        e = preload_per<4>();
    return e != cudaSuccess ? e : preload_per<8>();
}
