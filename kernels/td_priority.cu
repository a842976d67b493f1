/* td_priority.cu - after the loss kernel, on two branches: the loss scalars (the loss
 * statistics' block sums, Adam's scalars) and the priority update (the new priorities into the
 * sum tree); and the training guard's priority commit after the optimiser (see td_loss.cuh). */
#include <math.h>

#include "common.cuh"
#include "priority.h"
#include "td_loss.cuh"

#define PRIO_THREADS 128

/* New priorities of the batch (prioritized replay), by every thread of the block: the running
 * maximum, and for the last occurrence of each slot in the (sorted) batch its leaf and the
 * integer delta up the tree. A slot's ancestors near the root are shared by many rows, and
 * atomics on one address serialise: the lanes that share a node are neighbours (the indices
 * are sorted), so one prefix sum over the warp gives each run's total, and one lane per node
 * adds it. Integer adds commute (modulo 2^64), so the tree equals the CPU's sequential
 * fhd__sumtree_set_batch. */
static __device__ __forceinline__ void update_priorities(const fhd__loss_args &a, uint32_t i,
                                                         bool valid, uint64_t p) {
    const uint32_t lane = threadIdx.x & 31;
    /* lanes past the batch take the last row's slot with nothing to add: order is kept */
    const uint32_t s = a.idx[valid ? i : a.B - 1];
    uint64_t delta = 0;
    if (valid && (i == a.B - 1 || a.idx[i + 1] != s)) {
        uint64_t *leaf = a.nodes + a.leaves + s;
        delta = p - *leaf; /* modulo 2^64: adds up exactly */
        *leaf = p;
    }
    unsigned long long mx = valid ? p : 0;
    for (int o = 16; o > 0; o >>= 1) {
        const unsigned long long v = __shfl_xor_sync(FHD_FULL_MASK, mx, o);
        mx = v > mx ? v : mx;
    }
    if (lane == 0 && mx)
        atomicMax(reinterpret_cast<unsigned long long *>(&a.st->max_q), mx);
    if (!__any_sync(FHD_FULL_MASK, delta != 0))
        return;
    /* Lanes i and i + 1 share their ancestors from level m_i = bit length of (x_i ^ x_{i+1})
     * up (x = leaf node, non-decreasing over the lanes). At level h, lane i heads a run of
     * lanes sharing a node iff i == 0 or m_{i-1} > h, and the run ends at the first lane e >= i
     * with m_e > h. One prefix sum of the deltas gives the run's total; the head adds it. Each
     * lane walks up only while it heads a run: no warp-wide step per level. */
    __shared__ uint64_t pre_s[PRIO_THREADS / 32][32];
    __shared__ uint32_t m_s[PRIO_THREADS / 32][32];
    const uint32_t warp = threadIdx.x >> 5;
    const uint32_t x = a.leaves + s;
    uint64_t pre = delta;
    for (uint32_t o = 1; o < 32; o <<= 1) {
        const uint64_t v = __shfl_up_sync(FHD_FULL_MASK, pre, o);
        if (lane >= o)
            pre += v;
    }
    const uint32_t xn = __shfl_down_sync(FHD_FULL_MASK, x, 1);
    pre_s[warp][lane] = pre;
    m_s[warp][lane] = lane < 31 ? 32 - __clz(x ^ xn) : 64; /* lane 31: no right neighbour */
    __syncwarp();
    const uint32_t depth = 31 - __clz(a.leaves);
    const uint32_t head_until = lane == 0 ? depth + 1 : m_s[warp][lane - 1]; /* heads for h < it */
    const uint64_t before = lane == 0 ? 0 : pre_s[warp][lane - 1];
    uint32_t e = lane;
    for (uint32_t h = 1; h <= depth && h < head_until; h++) {
        while (m_s[warp][e] <= h)
            e++;
        const uint64_t sum = pre_s[warp][e] - before;
        if (sum)
            atomicAdd(reinterpret_cast<unsigned long long *>(a.nodes + (x >> h)),
                      (unsigned long long)sum);
    }
    __syncwarp(); /* pre_s / m_s are reused by the next call only after every lane is done */
}

/* The loss of the update from the loss blocks' partials (red: the statistics' sums, a warp
 * each, in block order: every block that calls it gets the same bits), with the diversity term
 * as cpu_net.c subtracts it: coef times the mean entropy rounded to float. */
template <bool X>
static __device__ __forceinline__ float loss_sums(const fhd__loss_args &a, double *red) {
    const uint32_t lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    constexpr uint32_t NS = fhd_loss_nstat(X);
    for (uint32_t q = warp; q < NS; q += PRIO_THREADS / 32) {
        const double sum = fhd_warp_sum_strided(a.statpart + q, a.loss_blocks, NS);
        if (lane == 0)
            red[q] = sum;
    }
    __syncthreads();
    const double n = (double)a.B * a.D;
    const float loss = (float)(red[0] / n + (double)a.cql_alpha * red[3] / n);
    if (X && a.div_coef > 0.0)
        return (float)((double)loss - a.div_coef * (double)(float)(red[4] / n));
    return loss;
}

/* On a branch of its own beside the backward pass, after the loss kernel, and what the
 * optimiser waits for. Block 0: the loss statistics, one warp each, over the loss blocks'
 * partials in block order (deterministic); block 1: Adam's scalars for the fused optimiser (its
 * two double pow were on the optimiser's path), PER's beta and the sampling counter. Done here
 * rather than by the loss kernel's last block, the fence and counter of that pattern stay off
 * the critical path. */
template <bool X> /* stat_extra */
__global__ void __launch_bounds__(PRIO_THREADS)
    fhd_loss_scalars_kernel(const __grid_constant__ fhd__loss_args a) {
    static_assert(PRIO_THREADS >= 4 * 32, "a warp per statistic of the first four");
    __shared__ double red[FHD_LOSS_NSTAT];
    fhd__dev_scalars *st = a.st;
    if (blockIdx.x == 0) {
        const float loss = loss_sums<X>(a, red);
        if (threadIdx.x == 0) {
            const double n = (double)a.B * a.D;
            /* pending: the optimiser publishes them where it applies the update (guard.cuh) */
            st->pend_loss = loss;
            st->pend_td_abs_mean = (float)(red[1] / n);
            st->pend_q_mean = (float)(red[2] / n);
            st->pend_entropy = X && a.div_coef > 0.0 ? (float)(red[4] / n) : 0.0f;
            /* q_delta: of double DQN's online(s') against target(s'), else undefined (NaN) */
            st->pend_q_delta =
                X && a.detailed && a.head_sel != a.head_tgt ? (float)(red[5] / n) : NAN;
        }
        return;
    }
    if (threadIdx.x == 0) {
        const uint64_t n_s = fhd__dev_sample_counter(st);
        st->pend_beta = a.prioritized ? fhd__beta_at(a.beta0, a.beta_steps, n_s) : 0.0f;
        /* the optimiser raises a counter after this kernel: updates, or skipped */
        st->sample_ahead = n_s + 1;
    } else if (threadIdx.x == 32 && a.adam_step) {
        fhd_adam_scalars(a.lr, a.beta1, a.beta2, st->updates + 1, a.adam_step, a.adam_bc2_sqrt);
    }
}

/* Prioritized replay, on a branch of its own beside the loss scalars (the optimiser does not
 * wait for it): the new priorities (fhd__prio_from_td of the rows' mean |td|: its fhd__det_pow
 * is off the critical path here) into the tree, one thread per batch row; the next update's
 * sampling is the first reader of the tree. */
template <bool X> /* stat_extra */
__global__ void __launch_bounds__(PRIO_THREADS)
    fhd_priority_update_kernel(const __grid_constant__ fhd__loss_args a) {
    __shared__ double red[FHD_LOSS_NSTAT];
    const uint32_t i = blockIdx.x * PRIO_THREADS + threadIdx.x;
    const bool valid = i < a.B;
    const uint64_t p = valid ? fhd__prio_from_td(a.td_row[i], a.per_alpha, a.per_eps) : 0;
    if (a.prio_stage) { /* the guard: staged for fhd_priority_commit_kernel */
        if (valid)
            a.prio_stage[i] = p;
        return;
    }
    /* no guard: a non-finite loss (a diverged update, which the optimiser skips) writes no
     * priority; every block computes the loss, so all or none of them write */
    const float loss = loss_sums<X>(a, red);
    if (!(loss - loss == 0.0f))
        return;
    update_priorities(a, i, valid, p);
}

/* The guard's priority commit (prio_stage set), after the optimiser decided: the staged
 * priorities into the tree and the running maximum where the update was applied, nothing where
 * it was skipped. One thread per batch row, as the priority update's rows. */
__global__ void __launch_bounds__(PRIO_THREADS)
    fhd_priority_commit_kernel(const __grid_constant__ fhd__loss_args a) {
    if (*a.guard_skip) /* uniform over the grid: no lane leaves a warp's shuffles alone */
        return;
    const uint32_t i = blockIdx.x * PRIO_THREADS + threadIdx.x;
    const bool valid = i < a.B;
    update_priorities(a, i, valid, valid ? a.prio_stage[i] : 0);
}

cudaError_t fhd__cuda_priority_commit(const fhd__loss_args *a, cudaStream_t stream) {
    const uint64_t g = fhd_cdiv(a->B, PRIO_THREADS);
    fhd_priority_commit_kernel<<<(unsigned)(g < 2 ? 2 : g), PRIO_THREADS, 0, stream>>>(*a);
    return cudaGetLastError();
}

cudaError_t fhd__cuda_loss_scalars(const fhd__loss_args *a, cudaStream_t stream) {
    if (a->stat_extra)
        fhd_loss_scalars_kernel<true><<<2, PRIO_THREADS, 0, stream>>>(*a);
    else
        fhd_loss_scalars_kernel<false><<<2, PRIO_THREADS, 0, stream>>>(*a);
    return cudaGetLastError();
}

cudaError_t fhd__cuda_priority_update(const fhd__loss_args *a, cudaStream_t stream) {
    /* the rows' blocks; lanes past the batch add nothing (never a one-block grid) */
    const uint64_t g = fhd_cdiv(a->B, PRIO_THREADS);
    if (a->stat_extra)
        fhd_priority_update_kernel<true><<<(unsigned)(g < 2 ? 2 : g), PRIO_THREADS, 0, stream>>>(*a);
    else
        fhd_priority_update_kernel<false>
            <<<(unsigned)(g < 2 ? 2 : g), PRIO_THREADS, 0, stream>>>(*a);
    return cudaGetLastError();
}

/* Load this file's kernels now (lazy module loading must not happen inside a graph capture). */
cudaError_t fhd__cuda_priority_preload(void) {
    cudaFuncAttributes fa;
    cudaError_t e = cudaFuncGetAttributes(&fa, (const void *)fhd_priority_commit_kernel);
    if (e == cudaSuccess)
        e = cudaFuncGetAttributes(&fa, (const void *)fhd_loss_scalars_kernel<false>);
    if (e == cudaSuccess)
        e = cudaFuncGetAttributes(&fa, (const void *)fhd_loss_scalars_kernel<true>);
    if (e == cudaSuccess)
        e = cudaFuncGetAttributes(&fa, (const void *)fhd_priority_update_kernel<false>);
    return e != cudaSuccess
               ? e
               : cudaFuncGetAttributes(&fa, (const void *)fhd_priority_update_kernel<true>);
}
