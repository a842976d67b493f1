/* td_loss.cu - fused head combine, TD target, loss, dL/dQ, head-combine backward, importance
 * weights, the rows' mean |td|, the fused head dx, and the priority update kernel (the new
 * priorities; see td_loss.cuh). Float formulas use uncontracted operations where the CPU
 * reference mixes * and +, so that equal inputs give equal outputs. */
#include <math.h>

#include "common.cuh"
#include "linear.cuh"
#include "narrow.cuh"
#include "priority.h"
#include "td_loss.cuh"

/* The per-row work below is a chain of dependent steps in a few threads per block (one per row
 * and branch). Its values are read FHD_LOSS_CHUNK at a time into registers, their loads in
 * flight together, and then used in the CPU's order: the same operations in the same order as
 * one element at a time, without a shared-memory round trip for each element. */
#define FHD_LOSS_CHUNK 8

static __device__ __forceinline__ void load_chunk(float (&v)[FHD_LOSS_CHUNK], const float *p,
                                                  uint32_t k0, uint32_t n) {
#pragma unroll
    for (int q = 0; q < FHD_LOSS_CHUNK; q++)
        v[q] = k0 + q < n ? p[k0 + q] : 0.0f;
}

/* f(k, p[k]) for k = 0, 1, ..., n - 1 in order, the loads of each chunk issued first. */
template <typename F>
static __device__ __forceinline__ void for_each_in_order(const float *p, uint32_t n, F f) {
    for (uint32_t k0 = 0; k0 < n; k0 += FHD_LOSS_CHUNK) {
        float v[FHD_LOSS_CHUNK];
        load_chunk(v, p, k0, n);
#pragma unroll
        for (int q = 0; q < FHD_LOSS_CHUNK; q++)
            if (k0 + q < n)
                f(k0 + q, v[q]);
    }
}

/* p[0] + p[1] + ... + p[n - 1], added in index order from 0.0f. */
static __device__ __forceinline__ float sum_in_order(const float *p, uint32_t n) {
    float s = 0.0f;
    for_each_in_order(p, n, [&](uint32_t, float x) { s += x; });
    return s;
}

/* The outputs of branch d in one head row (its advantages with dueling). */
static __device__ __forceinline__ const float *branch_out(const float *o, const fhd__loss_args &a,
                                                          uint32_t d) {
    return o + (a.dueling ? 1u : 0u) + a.k_off[d];
}

/* Mean advantage of branch d of one head row (dueling), summed in action order as the CPU. */
static __device__ __forceinline__ float branch_mean(const float *o, const fhd__loss_args &a,
                                                    uint32_t d) {
    if (!a.dueling)
        return 0.0f;
    return sum_in_order(branch_out(o, a, d), a.K[d]) / (float)a.K[d];
}

/* Q_d(k) from the branch output x of action k and v0 = V: V + (A_d(k) - mean) with dueling,
 * else the output itself. */
static __device__ __forceinline__ float q_from(const fhd__loss_args &a, float v0, float x,
                                               float mean) {
    return a.dueling ? v0 + (x - mean) : x;
}

/* Q_d(k) of one head row. */
static __device__ __forceinline__ float q_of(const float *o, const fhd__loss_args &a, uint32_t d,
                                             uint32_t k, float mean) {
    return q_from(a, a.dueling ? o[0] : 0.0f, branch_out(o, a, d)[k], mean);
}

/* The first action with the greatest Q_d (the CPU's loop: action k replaces the best when its Q
 * is greater). */
static __device__ __forceinline__ uint32_t branch_argmax(const float *o, const fhd__loss_args &a,
                                                         uint32_t d, float mean) {
    const float v0 = a.dueling ? o[0] : 0.0f;
    uint32_t best = 0;
    float bq = 0.0f;
    for_each_in_order(branch_out(o, a, d), a.K[d], [&](uint32_t k, float x) {
        const float qk = q_from(a, v0, x, mean);
        if (k == 0 || qk > bq) {
            best = k;
            bq = qk;
        }
    });
    return best;
}

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

/* Copy rows [r0, r0 + n) of NT (rows, HOs) head tiles into shared memory rows of stride HOp,
 * the loads of every tile in flight together (one tile after the other paid an L2 round trip
 * each); threads tid = 0 .. step - 1 take part. */
template <int NT>
static __device__ __forceinline__ void stage_rows(float *const (&dst)[NT],
                                                  const float *const (&src)[NT], uint32_t r0,
                                                  uint32_t n, uint32_t HO, uint32_t HOs,
                                                  uint32_t HOp, uint32_t tid, uint32_t step) {
    const uint32_t total = n * HO;
    for (uint32_t e0 = tid; e0 < total; e0 += 2 * step) {
        float v[2][NT];
#pragma unroll
        for (int k = 0; k < 2; k++) {
            const uint32_t e = e0 + k * step, r = e / HO, c = e - r * HO;
#pragma unroll
            for (int t = 0; t < NT; t++)
                v[k][t] = e < total ? __ldg(src[t] + (size_t)(r0 + r) * HOs + c) : 0.0f;
        }
#pragma unroll
        for (int k = 0; k < 2; k++) {
            const uint32_t e = e0 + k * step, r = e / HO, c = e - r * HO;
#pragma unroll
            for (int t = 0; t < NT; t++)
                if (e < total)
                    dst[t][r * HOp + c] = v[k][t];
        }
    }
}

/* The head's dx and the ReLU backward of the layer below, for a small head (fuse_dx): dz_below
 * rows [r0, r0 + ROWS) = alpha (dout W_head) * (h_below > 0), and the column sums of the block's
 * dz values, in row order, as its bias-gradient partials. A kernel of its own, launched as the
 * loss kernel's programmatic dependent with the loss kernel's blocks: before its wait it loads
 * its first columns of h_below and W_head (earlier kernels' data; the loss kernel lets it start
 * only after its own wait, when the head forwards, and the GEMM before them, are done), after it
 * the block's dout rows. Thread t takes columns t, t + blockDim.x, ..., COLS of them a round
 * (two with 8-row blocks), FUSED_DX_CHUNK outputs' W_head loads in flight per column with the
 * mask's, the rows' accumulators in registers (k in order, as a GEMM's inner product). A kernel
 * of its own rather than inside the loss kernel: there it would take four L2 round trips a
 * thread, the loss kernel having no registers to spare for one. */
#define FUSED_DX_CHUNK 24 /* W_head loads in flight per column (heads of up to 24 outputs: one) */

template <int ROWS, int COLS>
static __device__ __forceinline__ void dx_loads(const fhd__loss_args &a, uint32_t j0, uint32_t r0,
                                                uint32_t nrows, uint32_t k0,
                                                float (&hb)[COLS][ROWS],
                                                float (&w)[COLS][FUSED_DX_CHUNK], bool mask) {
    const uint32_t H = a.H, HO = a.HO;
#pragma unroll
    for (int c = 0; c < COLS; c++) {
        const uint32_t j = j0 + c * blockDim.x;
        if (mask)
#pragma unroll
            for (int r = 0; r < ROWS; r++)
                hb[c][r] = j < H && (uint32_t)r < nrows
                               ? __ldg(a.h_below + (size_t)(r0 + r) * H + j)
                               : 0.0f;
#pragma unroll
        for (int k = 0; k < FUSED_DX_CHUNK; k++)
            w[c][k] = j < H && k0 + k < HO ? __ldg(a.w_head + (size_t)(k0 + k) * H + j) : 0.0f;
    }
}

template <int ROWS>
__global__ void __launch_bounds__(FHD_LOSS_THREADS)
    fhd_head_dx_kernel(const __grid_constant__ fhd__loss_args a) {
    constexpr int COLS = ROWS <= 8 ? 2 : 1; /* registers: COLS x (2 ROWS + FUSED_DX_CHUNK) */
    extern __shared__ float s_d[];        /* the block's dout rows, (ROWS, HO) */
    const uint32_t r0 = blockIdx.x * ROWS;
    const uint32_t nrows = r0 < a.B ? (a.B - r0 < ROWS ? a.B - r0 : ROWS) : 0;
    const uint32_t H = a.H, HO = a.HO, HOs = a.HOs;
    const uint32_t step = COLS * blockDim.x;
    const float alpha = *a.alpha; /* 1, or 1/sigma from the spectral norm at the update's start */
    float hb[COLS][ROWS], w[COLS][FUSED_DX_CHUNK];
    dx_loads<ROWS, COLS>(a, threadIdx.x, r0, nrows, 0, hb, w, true);
    fhd_pdl_wait(); /* dout is the loss kernel's */
    for (uint32_t e = threadIdx.x; e < nrows * HO; e += blockDim.x) {
        const uint32_t r = e / HO, c = e - r * HO;
        s_d[e] = __ldg(a.dout + (size_t)(r0 + r) * HOs + c);
    }
    __syncthreads();
    for (uint32_t j0 = threadIdx.x; j0 < H; j0 += step) {
        if (j0 != threadIdx.x)
            dx_loads<ROWS, COLS>(a, j0, r0, nrows, 0, hb, w, true);
        float acc[COLS][ROWS];
#pragma unroll
        for (int c = 0; c < COLS; c++)
#pragma unroll
            for (int r = 0; r < ROWS; r++)
                acc[c][r] = 0.0f;
        for (uint32_t k0 = 0; k0 < HO; k0 += FUSED_DX_CHUNK) {
            if (k0 > 0)
                dx_loads<ROWS, COLS>(a, j0, r0, nrows, k0, hb, w, false);
#pragma unroll
            for (int k = 0; k < FUSED_DX_CHUNK; k++) {
                if (k0 + k >= HO)
                    break;
#pragma unroll
                for (int r = 0; r < ROWS; r++) {
                    const float d = s_d[r * HO + k0 + k];
#pragma unroll
                    for (int c = 0; c < COLS; c++)
                        acc[c][r] = fmaf(d, w[c][k], acc[c][r]);
                }
            }
        }
#pragma unroll
        for (int c = 0; c < COLS; c++) {
            const uint32_t j = j0 + c * blockDim.x;
            if (j >= H)
                break;
            float colsum = 0.0f;
#pragma unroll
            for (int r = 0; r < ROWS; r++) {
                if ((uint32_t)r < nrows) {
                    const float v = hb[c][r] > 0.0f ? alpha * acc[c][r] : 0.0f;
                    a.dz_below[(size_t)(r0 + r) * H + j] = v;
                    colsum += v;
                }
            }
            a.bpart[(size_t)blockIdx.x * H + j] = colsum;
        }
    }
}

/* The head forwards of a loss block (fhd__loss_args.head_nc), by its first nst threads (all
 * but the weight warp): warps 0 .. 2 ROWS / NL_RW - 1 compute the block's rows of online(s)
 * into s_on and of target(s') into s_tgt, and with s_sel (double DQN) the next ROWS / NL_RW
 * warps those of online(s') (h_below's rows B + r) into s_sel, NL_RW rows a warp, by
 * narrow.cuh's sums (the same bits as fhd__cuda_narrow_linear's). Those warps issue their first
 * x loads, then all nst threads copy both networks' W_head into w_s (online, then target) with
 * those loads in flight, and after a barrier of the nst threads the head warps do the
 * multiply-adds from shared memory: one L2 round trip for x and W together. */
#define HEAD_STAGE 8 /* W_head float4s a thread has in flight while it copies */

template <int ROWS, int HNC>
static __device__ __forceinline__ void head_rows(const fhd__loss_args &a, uint32_t r0,
                                                 uint32_t nrows, float *w_s, float *s_on,
                                                 float *s_tgt, float *s_sel, uint32_t nst) {
    static_assert(ROWS % NL_RW == 0, "whole warps of rows");
    constexpr uint32_t WT = ROWS / NL_RW, V = NL_RW * HNC;
    if (threadIdx.x >= nst)
        return;
    const uint32_t warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const uint32_t tile = warp / WT, rw = (warp % WT) * NL_RW; /* the warp's first row */
    const bool mine = tile < (s_sel ? 3u : 2u) && rw < nrows; /* whole warps */
    const uint32_t H = a.H, HO = a.HO, k4n = H >> 2;
    const bool tgt = tile == 1;
    const float *xr[NL_RW];
    float4 xv[2][NL_RW];
    if (mine) {
        const float *x = tgt ? a.x_tgt : a.h_below;
        const uint32_t x0 = (tile == 2 ? a.B : 0u) + r0 + rw;
#pragma unroll
        for (int r = 0; r < NL_RW; r++) /* rows past the end read the first (sums dropped) */
            xr[r] = x + (size_t)(rw + r < nrows ? x0 + r : x0) * H;
        fhd_narrow_load_x(xv, xr, lane, k4n);
    }
    { /* both W_head, HEAD_STAGE float4s a thread in flight at a time */
        const uint32_t n4 = HO * H / 4;
        const float4 *won = reinterpret_cast<const float4 *>(a.w_head);
        const float4 *wtg = reinterpret_cast<const float4 *>(a.w_head_tg);
        float4 *dst = reinterpret_cast<float4 *>(w_s);
        for (uint32_t e0 = threadIdx.x; e0 < 2 * n4; e0 += HEAD_STAGE * nst) {
            float4 v[HEAD_STAGE];
#pragma unroll
            for (int q = 0; q < HEAD_STAGE; q++) {
                const uint32_t e = e0 + q * nst;
                v[q] = e < n4 ? __ldg(won + e)
                              : (e < 2 * n4 ? __ldg(wtg + (e - n4))
                                            : make_float4(0.0f, 0.0f, 0.0f, 0.0f));
            }
#pragma unroll
            for (int q = 0; q < HEAD_STAGE; q++)
                if (e0 + q * nst < 2 * n4)
                    dst[e0 + q * nst] = v[q];
        }
    }
    asm volatile("bar.sync 1, %0;" ::"r"(nst) : "memory"); /* W_head staged (nst threads) */
    if (!mine)
        return;
    float acc[V];
#pragma unroll
    for (uint32_t i = 0; i < V; i++)
        acc[i] = 0.0f;
    const float *w = w_s + (tgt ? (size_t)HO * H : 0);
    for (uint32_t k40 = lane; k40 < k4n; k40 += 64) {
        if (k40 != lane)
            fhd_narrow_load_x(xv, xr, k40, k4n);
        fhd_narrow_fma_sw<HNC>(acc, xv, w, k40, k4n, H, HO);
    }
    fhd_transposed_warp_sum<V>(acc, lane);
    const float al = __ldg(tgt ? a.alpha_tg : a.alpha);
    const float *bias = tgt ? a.b_head_tg : a.b_head;
    float *dst = tile == 0 ? s_on : (tgt ? s_tgt : s_sel);
#pragma unroll
    for (uint32_t i = 0; i < V / 32; i++) {
        const uint32_t idx = lane * (V / 32) + i, r = idx / HNC, n = idx % HNC;
        if (rw + r < nrows && n < HO)
            dst[(rw + r) * a.HOp + n] = fhd_narrow_out(al, acc[i], bias, n);
    }
}

/* One block per ROWS batch rows. The per-row work is spread over the branches: thread t takes
 * row t / DT and branches t % DT, t % DT + DT, ... (DT = min(D, blockDim / ROWS)). Before the
 * first barrier the last warp computes the rows' PER importance weights while the others stage
 * the head tiles; then three phases separated by barriers, each row's cross-branch sums taken
 * in branch order from shared memory (as the CPU's loops): the branches' target terms, then y
 * and each branch's loss, dL/dQ and head-combine backward, then the row's V gradient and mean
 * |td| (the new priority's input). With HNC (= a.head_nc) the head tiles are not staged but
 * computed here after the wait (head_rows, above). */
template <int ROWS, int HNC>
__global__ void __launch_bounds__(FHD_LOSS_THREADS, 1)
    fhd_td_loss_kernel(const __grid_constant__ fhd__loss_args a) {
    /* dynamic: [staged: on | sel | tgt | dout, ROWS x HOp each] then the row scratch:
     * target terms, |delta| and gradient sums (ROWS x D each), importance weights (ROWS) */
    extern __shared__ float smem[];
    __shared__ double red[4 * 32];
    const uint32_t r0 = blockIdx.x * ROWS;
    const uint32_t nrows = r0 < a.B ? (a.B - r0 < ROWS ? a.B - r0 : ROWS) : 0;
    const uint32_t D = a.D, HO = a.HO, HOs = a.HOs, HOp = a.HOp, base = a.dueling ? 1u : 0u;
    const bool staged = HOp != 0;
    const bool sel_is_tgt = a.head_sel == a.head_tgt;
    float *s_on = smem, *s_sel = smem + ROWS * HOp, *s_tgt = s_sel + ROWS * HOp;
    float *s_out = s_tgt + ROWS * HOp;
    if (sel_is_tgt)
        s_sel = s_tgt;
    float *s_tq = smem + (staged ? 4 * ROWS * HOp : 0), *s_ad = s_tq + ROWS * D;
    float *s_gs = s_ad + ROWS * D, *s_w = s_gs + ROWS * D;
    const uint32_t DT = D < blockDim.x / ROWS ? D : blockDim.x / ROWS;
    const uint32_t t = threadIdx.x, r = t / DT, j = t - r * DT;
    const bool row = t < ROWS * DT && r < nrows;
    const uint32_t i = r0 + r;
    /* this row's batch entries (and its first branch's action), loaded now so that they
     * arrive while the tiles are staged */
    const float r_ret = row ? a.ret[i] : 0.0f, r_disc = row ? a.disc[i] : 0.0f;
    const float r_w = row && j == 0 && a.w_in ? a.w_in[i] : 1.0f;
    const uint32_t r_act = row ? (uint32_t)a.act[(size_t)i * D + j] : 0u;
    /* PER importance weights: the last warp computes the block's (ROWS <= 32, a lane per row)
     * while the others stage the tiles: the batch minimum of the sampled priorities from the
     * sampling blocks' minima, beta, and fhd__det_pow, whose chain of double operations is then
     * off the row threads' path */
    static_assert(ROWS <= 32, "a lane of the weight warp per row");
    const uint32_t nwarps = blockDim.x >> 5;
    const bool per_w = a.prioritized && !a.w_in;
    const bool w_warp = per_w && (threadIdx.x >> 5) == nwarps - 1;
    if (w_warp) {
        const uint32_t lane = threadIdx.x & 31;
        const uint64_t rq = lane < nrows ? a.q_samp[r0 + lane] : 1;
        const uint64_t upd = fhd__dev_sample_counter(a.st); /* beta: the sampling counter */
        unsigned long long m = ~0ull;
        for (uint32_t k = lane; k < a.nqparts; k += 32) {
            const unsigned long long v =
                __ldcg(reinterpret_cast<const unsigned long long *>(a.qparts) + k);
            m = v < m ? v : m;
        }
        for (int o = 16; o > 0; o >>= 1) {
            const unsigned long long v = __shfl_xor_sync(FHD_FULL_MASK, m, o);
            m = v < m ? v : m;
        }
        if (lane < nrows) {
            const float beta = fhd__beta_at(a.beta0, a.beta_steps, upd);
            const float w = (float)fhd__det_pow((double)m / (double)rq, (double)beta);
            s_w[lane] = w;
            a.w_out[r0 + lane] = w;
        }
    }
    /* launched as a programmatic dependent of the head forwards (online and, through the join,
     * target), or with HNC of the last torso layers' GEMMs: everything above reads only what
     * earlier kernels wrote; from here on their outputs */
    fhd_pdl_wait();
    /* the head-dx kernel after this one may start loading h_below and W_head: the head
     * forwards, and the GEMM before them, are done (with HNC once this kernel's heads are:
     * its resident blocks would slow this kernel's end) */
    if (HNC == 0)
        fhd_pdl_trigger();
    const uint32_t nst = per_w ? blockDim.x - 32 : blockDim.x; /* not the weight warp */
    if (HNC > 0) { /* staged (fhd__cuda_td_loss_setup) */
        /* (the HNC == 0 instances never run it; 8 only keeps their template valid) */
        head_rows<ROWS, (HNC > 0 ? HNC : 8)>(a, r0, nrows, smem + a.wsm_off, s_on, s_tgt,
                                             sel_is_tgt ? NULL : s_sel, nst);
    } else if (staged) { /* by the other warps when one computes the weights */
        if (threadIdx.x < nst) {
            if (sel_is_tgt) {
                float *const dst[2] = {s_on, s_tgt};
                const float *const src[2] = {a.head_on, a.head_tgt};
                stage_rows<2>(dst, src, r0, nrows, HO, HOs, HOp, threadIdx.x, nst);
            } else {
                float *const dst[3] = {s_on, s_tgt, s_sel};
                const float *const src[3] = {a.head_on, a.head_tgt, a.head_sel};
                stage_rows<3>(dst, src, r0, nrows, HO, HOs, HOp, threadIdx.x, nst);
            }
        }
    }
    __syncthreads(); /* the tiles and the weights */
    if (HNC > 0) /* the head-dx kernel, now that the heads are done (above) */
        fhd_pdl_trigger();
    double s_loss = 0.0, s_abs = 0.0, s_q = 0.0, s_cql = 0.0;
    const float *on = staged ? s_on + r * HOp : a.head_on + (size_t)i * HOs;
    const float *sel = staged ? s_sel + r * HOp : a.head_sel + (size_t)i * HOs;
    const float *tg = staged ? s_tgt + r * HOp : a.head_tgt + (size_t)i * HOs;
    float *go = staged ? s_out + r * HOp : a.dout + (size_t)i * HOs;
    if (row) { /* fhd__td_target's terms: each branch's target value at its argmax */
        for (uint32_t d = j; d < D; d += DT) {
            const float ms = branch_mean(sel, a, d), mt = branch_mean(tg, a, d);
            s_tq[r * D + d] = q_of(tg, a, d, branch_argmax(sel, a, d, ms), mt);
        }
        if (j == 0 && !per_w) { /* host importance weights, or 1 */
            s_w[r] = r_w;
            a.w_out[i] = r_w;
        }
    }
    __syncthreads();
    if (row) {
        const float acc = sum_in_order(s_tq + r * D, D);
        const float yi = FHD_FADD(r_ret, FHD_FMUL(r_disc, acc / (float)D));
        const float w = s_w[r];
        if (j == 0)
            a.y[i] = yi;
        /* fhd__td_loss */
        const float scale = 1.0f / ((float)a.B * (float)D);
        for (uint32_t d = j; d < D; d += DT) {
            const uint32_t o = a.k_off[d], K = a.K[d];
            const float mon = branch_mean(on, a, d);
            const uint32_t at = d == j ? r_act : (uint32_t)a.act[(size_t)i * D + d];
            const float qa = q_of(on, a, d, at, mon);
            const float delta = qa - yi;
            a.td[(size_t)i * D + d] = delta;
            s_ad[r * D + d] = delta < 0 ? -delta : delta;
            s_abs += fabsf(delta);
            s_q += qa;
            float l, dl;
            if (a.huber) {
                const float ad = fabsf(delta);
                if (ad <= a.huber_delta) {
                    l = FHD_FMUL(FHD_FMUL(0.5f, delta), delta);
                    dl = delta;
                } else {
                    l = FHD_FMUL(a.huber_delta, FHD_FSUB(ad, FHD_FMUL(0.5f, a.huber_delta)));
                    dl = delta > 0.0f ? a.huber_delta : -a.huber_delta;
                }
            } else {
                l = FHD_FMUL(delta, delta);
                dl = FHD_FMUL(2.0f, delta);
            }
            s_loss += (double)w * l;
            const float g_taken = FHD_FMUL(FHD_FMUL(w, dl), scale);
            if (a.cql_alpha > 0.0f) { /* alpha * (logsumexp_a Q - Q(a_taken)) */
                float mx = q_of(on, a, d, 0, mon);
                for (uint32_t k = 1; k < K; k++) {
                    const float qk = q_of(on, a, d, k, mon);
                    mx = qk > mx ? qk : mx;
                }
                double se = 0.0;
                for (uint32_t k = 0; k < K; k++)
                    se += exp((double)(q_of(on, a, d, k, mon) - mx));
                s_cql += ((double)mx + log(se)) - qa;
                const float as = FHD_FMUL(a.cql_alpha, scale);
                for (uint32_t k = 0; k < K; k++) {
                    const float sm = (float)(exp((double)(q_of(on, a, d, k, mon) - mx)) / se);
                    float g = k == at ? g_taken : 0.0f;
                    g = FHD_FADD(g, FHD_FMUL(FHD_FMUL(a.cql_alpha, sm), scale));
                    if (k == at)
                        g = FHD_FSUB(g, as);
                    go[base + o + k] = g;
                }
            } else {
                for (uint32_t k = 0; k < K; k++)
                    go[base + o + k] = k == at ? g_taken : 0.0f;
            }
            if (a.dueling) { /* fhd__head_combine_backward of this branch (in place) */
                float *gd = go + 1 + o;
                const float sg = sum_in_order(gd, K);
                s_gs[r * D + d] = sg;
                const float mean = sg / (float)K;
                for_each_in_order(gd, K, [&](uint32_t k, float x) { gd[k] = x - mean; });
            }
        }
    }
    __syncthreads();
    if (row && j == 0) { /* the row's sums over its branches, in branch order */
        if (a.dueling)
            go[0] = sum_in_order(s_gs + r * D, D);
        if (a.prioritized) /* fhd__cuda_priority_update makes it the priority */
            a.td_row[i] = sum_in_order(s_ad + r * D, D) / (float)D;
    }
    /* per-block statistics. With every row thread in warp 0 (ROWS x DT <= 32, as in every
     * preset) that warp's butterfly is the block's sum: the other warps hold zeros. */
    double sums[4] = {s_loss, s_abs, s_q, s_cql};
    if (ROWS * DT <= 32) {
        __syncthreads(); /* the row writes above, for the copy-out below */
        if (threadIdx.x < 32)
            fhd_warp_sum4_d(sums);
    } else {
        fhd_block_sum4_d(sums, red); /* its barriers order the row writes too */
    }
    if (threadIdx.x == 0) {
        double *sp = a.statpart + (size_t)blockIdx.x * 4;
        sp[0] = sums[0];
        sp[1] = sums[1];
        sp[2] = sums[2];
        sp[3] = sums[3];
    }
    /* d(head outputs): out to global (staged), and the block's column sums in row order */
    if (staged) { /* the barriers above ordered the row writes */
        float *dst = a.dout + (size_t)r0 * HOs;
        for (uint32_t e = threadIdx.x; e < nrows * HO; e += blockDim.x) {
            const uint32_t rr = e / HO, c = e - rr * HO;
            dst[(size_t)rr * HOs + c] = s_out[rr * HOp + c];
        }
    } /* direct mode: the barriers above made the other rows' writes visible */
    { /* warp w: columns w, w + 8, ...; lane l: rows l, l + 32, ..., then the butterfly */
        const uint32_t lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
        for (uint32_t c = warp; c < HO; c += nw) {
            float sum = 0.0f;
#pragma unroll
            for (uint32_t rr = lane; rr < ROWS; rr += 32)
                if (rr < nrows)
                    sum += staged ? s_out[rr * HOp + c] : a.dout[(size_t)(r0 + rr) * HOs + c];
            sum = fhd_warp_sum(sum);
            if (lane == 0)
                a.colpart[(size_t)blockIdx.x * HO + c] = sum;
        }
    }
    /* a small head's dx and the ReLU backward below it: fhd_head_dx_kernel, next */
    /* the statistics' sums over the blocks: fhd_priority_update_kernel, off the critical path */
}

/* The loss of the update from the loss blocks' partials (red: the four statistics' sums, by
 * warps 0-3, in block order: every block that calls it gets the same bits). */
static __device__ __forceinline__ float loss_sums(const fhd__loss_args &a, double *red) {
    const uint32_t lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    if (warp < 4) {
        const double sum = fhd_warp_sum_strided(a.statpart + warp, a.loss_blocks, 4);
        if (lane == 0)
            red[warp] = sum;
    }
    __syncthreads();
    const double n = (double)a.B * a.D;
    return (float)(red[0] / n + (double)a.cql_alpha * red[3] / n);
}

/* On a branch of its own beside the backward pass, after the loss kernel. Block 0: the loss
 * statistics, one warp each, over the loss blocks' partials in block order (deterministic), and
 * Adam's scalars for the fused optimiser (its two double pow were on the optimiser's path). The
 * blocks after it: the new priorities (fhd__prio_from_td of the rows' mean |td|: its
 * fhd__det_pow is off the critical path here) into the tree, one thread per batch row (the next
 * update's sampling is the first reader of the tree). Done here rather than by the loss kernel's
 * last block, the fence and counter of that pattern stay off the critical path. */
__global__ void __launch_bounds__(PRIO_THREADS)
    fhd_priority_update_kernel(const __grid_constant__ fhd__loss_args a) {
    static_assert(PRIO_THREADS >= 4 * 32, "a warp per statistic");
    __shared__ double red[4];
    if (blockIdx.x == 0) {
        const uint64_t u = a.st->updates;
        const uint64_t n_s = fhd__dev_sample_counter(a.st);
        const float loss = loss_sums(a, red);
        if (threadIdx.x == 0) {
            const double n = (double)a.B * a.D;
            /* pending: the optimiser publishes them where it applies the update (guard.cuh) */
            fhd__dev_scalars *st = a.st;
            st->pend_loss = loss;
            st->pend_td_abs_mean = (float)(red[1] / n);
            st->pend_q_mean = (float)(red[2] / n);
            st->pend_beta = a.prioritized ? fhd__beta_at(a.beta0, a.beta_steps, n_s) : 0.0f;
            /* the optimiser raises a counter after this kernel: updates, or skipped */
            a.st->sample_ahead = n_s + 1;
        } else if (threadIdx.x == 32 && a.adam_step) {
            fhd_adam_scalars(a.lr, a.beta1, a.beta2, u + 1, a.adam_step, a.adam_bc2_sqrt);
        }
        return;
    }
    if (!a.prioritized)
        return;
    const uint32_t i = (blockIdx.x - 1) * PRIO_THREADS + threadIdx.x;
    const bool valid = i < a.B;
    const uint64_t p = valid ? fhd__prio_from_td(a.td_row[i], a.per_alpha, a.per_eps) : 0;
    if (a.prio_stage) { /* the guard: staged for fhd_priority_commit_kernel */
        if (valid)
            a.prio_stage[i] = p;
        return;
    }
    /* no guard: a non-finite loss (a diverged update, which the optimiser skips) writes no
     * priority; every block computes block 0's loss, so all or none of them write */
    const float loss = loss_sums(a, red);
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

cudaError_t fhd__cuda_priority_update(const fhd__loss_args *a, cudaStream_t stream) {
    /* block 0, then the rows' blocks (one empty block without PER: never a one-block grid) */
    const uint64_t g = 1 + (a->prioritized ? fhd_cdiv(a->B, PRIO_THREADS) : 1);
    fhd_priority_update_kernel<<<(unsigned)g, PRIO_THREADS, 0, stream>>>(*a);
    return cudaGetLastError();
}

uint32_t fhd__cuda_td_loss_rows(uint32_t B) {
    return B <= FHD_LOSS_SMALL_BATCH ? 8u : 32u;
}

unsigned int fhd__cuda_td_loss_grid(uint32_t B) {
    uint64_t g = fhd_cdiv(B, fhd__cuda_td_loss_rows(B));
    return (unsigned int)(g < 2 ? 2 : g);
}

/* The loss kernel's instance for its rows a block and head_nc (the heads inside: 8 rows a block
 * only). */
typedef void (*loss_fn)(const fhd__loss_args);
static loss_fn loss_kernel(uint32_t rows, uint32_t nc) {
    if (rows != 8)
        return fhd_td_loss_kernel<32, 0>;
    switch (nc) {
    case 8:
        return fhd_td_loss_kernel<8, 8>;
    case 16:
        return fhd_td_loss_kernel<8, 16>;
    case 24:
        return fhd_td_loss_kernel<8, 24>;
    case 32:
        return fhd_td_loss_kernel<8, 32>;
    default:
        return fhd_td_loss_kernel<8, 0>;
    }
}

static const void *dx_kernel(uint32_t rows) {
    return rows == 8 ? (const void *)fhd_head_dx_kernel<8> : (const void *)fhd_head_dx_kernel<32>;
}

/* Let kernel k take bytes of dynamic shared memory: above the default 48 KiB it has to opt in. */
static cudaError_t allow_dynamic_smem(const void *k, uint64_t bytes) {
    if (bytes <= 48u * 1024u)
        return cudaSuccess;
    return cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes);
}

cudaError_t fhd__cuda_td_loss_setup(fhd__loss_args *a, int device) {
    int optin = 0;
    cudaError_t e = cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device);
    if (e != cudaSuccess)
        return e;
    const uint32_t rows = fhd__cuda_td_loss_rows(a->B);
    const uint64_t static_bytes = 4 * 32 * sizeof(double) + 64; /* red[], last-block flag */
    const uint64_t scratch = (uint64_t)(3 * rows * a->D + rows) * sizeof(float);
    const uint32_t HOp = a->HO | 1u;
    const uint64_t tiles = (uint64_t)4 * rows * HOp * sizeof(float);
    a->HOp = 0;
    a->fuse_dx = 0;
    a->smem_bytes = 0;
    a->loss_blocks = fhd__cuda_td_loss_grid(a->B);
    /* the head forwards inside: W_head of both networks after the tiles and the scratch */
    const uint64_t wsm_off = (4 * rows * HOp + 3 * rows * a->D + rows + 3) / 4 * 4;
    const uint64_t wsm = 2 * (uint64_t)a->HO * a->H * sizeof(float);
    const int head_vec = a->H > 0 &&
                         fhd__cuda_narrow_linear_vec(a->h_below, a->H, a->w_head, a->H) &&
                         fhd__cuda_narrow_linear_vec(a->x_tgt, a->H, a->w_head_tg, a->H);
    if (a->head_nc != 0 &&
        (rows != 8 || !head_vec || a->HO > a->head_nc ||
         a->head_nc % 8 != 0 || a->head_nc > FHD_NARROW_MAX_OUT || wsm > FHD_LOSS_HEAD_SMEM ||
         wsm_off * sizeof(float) + wsm + static_bytes > (uint64_t)optin))
        a->head_nc = 0; /* the head forwards run before the loss kernel */
    a->wsm_off = a->head_nc ? (uint32_t)wsm_off : 0;
    a->pdl = fhd_pdl_allowed((const void *)loss_kernel(rows, a->head_nc));
    if (scratch + static_bytes > (uint64_t)optin)
        return cudaErrorInvalidValue; /* FHD_LOSS_MAX_BRANCHES keeps this far away */
    uint64_t bytes = scratch;
    if (tiles + scratch + static_bytes <= (uint64_t)optin) {
        a->HOp = HOp;
        bytes += tiles;
        /* the head's dx in the loss blocks: each block reads all of W_head (from L2) */
        const uint64_t w = (uint64_t)a->HO * a->H;
        if (a->H > 0 && w <= FHD_LOSS_FUSE_MAX &&
            w * sizeof(float) * fhd__cuda_td_loss_grid(a->B) <= FHD_LOSS_FUSE_TRAFFIC)
            a->fuse_dx = 1;
    }
    if (a->head_nc) /* staged (the tiles fit, since W_head does), then W_head */
        bytes = wsm_off * sizeof(float) + wsm;
    e = allow_dynamic_smem((const void *)loss_kernel(rows, a->head_nc), bytes);
    if (e != cudaSuccess)
        return e;
    a->smem_bytes = (uint32_t)bytes;
    a->dx_smem_bytes = 0;
    a->dx_pdl = 0;
    if (a->fuse_dx) { /* its dout rows: a quarter of the staged tiles, which fit */
        const uint64_t dxb = (uint64_t)rows * a->HO * sizeof(float);
        e = allow_dynamic_smem(dx_kernel(rows), dxb);
        if (e != cudaSuccess)
            return e;
        a->dx_smem_bytes = (uint32_t)dxb;
        a->dx_pdl = fhd_pdl_allowed(dx_kernel(rows));
    }
    return cudaSuccess;
}

cudaError_t fhd__cuda_head_dx(const fhd__loss_args *a, cudaStream_t stream) {
    cudaLaunchAttribute attr;
    const cudaLaunchConfig_t cfg =
        fhd_pdl_config(dim3(fhd__cuda_td_loss_grid(a->B)), dim3(FHD_LOSS_THREADS),
                       a->dx_smem_bytes, stream, a->dx_pdl, &attr);
    if (fhd__cuda_td_loss_rows(a->B) == 8)
        return cudaLaunchKernelEx(&cfg, fhd_head_dx_kernel<8>, *a);
    return cudaLaunchKernelEx(&cfg, fhd_head_dx_kernel<32>, *a);
}

cudaError_t fhd__cuda_td_loss(const fhd__loss_args *a, cudaStream_t stream) {
    cudaLaunchAttribute attr;
    const cudaLaunchConfig_t cfg = fhd_pdl_config(dim3(fhd__cuda_td_loss_grid(a->B)),
                                                  dim3(FHD_LOSS_THREADS), a->smem_bytes, stream,
                                                  a->pdl, &attr);
    return cudaLaunchKernelEx(&cfg, loss_kernel(fhd__cuda_td_loss_rows(a->B), a->head_nc), *a);
}

/* Load this file's kernels now (lazy module loading must not happen inside a graph
 * capture). */
cudaError_t fhd__cuda_td_loss_preload(void) {
    cudaFuncAttributes fa;
    cudaError_t e = cudaFuncGetAttributes(&fa, (const void *)loss_kernel(32, 0));
    for (uint32_t nc = 0; nc <= FHD_NARROW_MAX_OUT && e == cudaSuccess; nc += 8)
        e = cudaFuncGetAttributes(&fa, (const void *)loss_kernel(8, nc));
    if (e == cudaSuccess)
        e = cudaFuncGetAttributes(&fa, dx_kernel(8));
    if (e == cudaSuccess)
        e = cudaFuncGetAttributes(&fa, dx_kernel(32));
    if (e != cudaSuccess)
        return e;
    e = cudaFuncGetAttributes(&fa, (const void *)fhd_priority_commit_kernel);
    return e != cudaSuccess ? e : cudaFuncGetAttributes(&fa, (const void *)fhd_priority_update_kernel);
}
