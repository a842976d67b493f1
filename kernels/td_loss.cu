/* td_loss.cu - the loss kernel: fused head combine, TD target, loss (with CQL and the
 * diversity term), dL/dQ, head-combine backward, importance weights, the rows' mean |td| and the
 * blocks' loss statistics (see td_loss.cuh; the fused head dx is head_dx.cu's, the priority
 * update td_priority.cu's). Float formulas use uncontracted operations where the CPU reference
 * mixes * and +, so that equal inputs give equal outputs. */
#include <math.h>

#include <cuda_bf16.h>

#include "common.cuh"
#include "diversity.cuh"
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

/* Copy rows [r0, r0 + n) of NT (rows, HOs) head tiles into shared memory rows of stride HOp,
 * the loads of every tile in flight together (one tile after the other paid an L2 round trip
 * each); threads tid = 0 .. step - 1 take part. */
template <int NT>
static __device__ __forceinline__ void
stage_rows(float *const (&dst)[NT], const float *const (&src)[NT], uint32_t r0, uint32_t n,
           uint32_t HO, uint32_t HOs, uint32_t HOp, uint32_t tid, uint32_t step) {
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
    const bool mine = tile < (s_sel ? 3u : 2u) && rw < nrows;  /* whole warps */
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
template <int ROWS, int HNC, bool X>
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
    if (HNC > 0)     /* the head-dx kernel, now that the heads are done (above) */
        fhd_pdl_trigger();
    double s_loss = 0.0, s_abs = 0.0, s_q = 0.0, s_cql = 0.0;
    double s_ent = 0.0, s_qd = 0.0; /* the diversity term's entropies, q_delta's |differences| */
    const bool qd = X && a.detailed && !sel_is_tgt; /* q_delta: double DQN's online(s') only */
    const float *on = staged ? s_on + r * HOp : a.head_on + (size_t)i * HOs;
    const float *sel = staged ? s_sel + r * HOp : a.head_sel + (size_t)i * HOs;
    const float *tg = staged ? s_tgt + r * HOp : a.head_tgt + (size_t)i * HOs;
    float *go = staged ? s_out + r * HOp : a.dout + (size_t)i * HOs;
    if (row) { /* fhd__td_target's terms: each branch's target value at its argmax */
        for (uint32_t d = j; d < D; d += DT) {
            const float ms = branch_mean(sel, a, d), mt = branch_mean(tg, a, d);
            const uint32_t best = branch_argmax(sel, a, d, ms);
            const float qt = q_of(tg, a, d, best, mt);
            s_tq[r * D + d] = qt;
            if (qd) /* |Q_online(s', a*) - Q_target(s', a*)| (cpu_metrics.c) */
                s_qd += fabs((double)q_of(sel, a, d, best, ms) - (double)qt);
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
            if (X && a.div_coef > 0.0) /* the action-diversity term, after CQL as on the CPU */
                s_ent += fhd_diversity_branch(
                    K, a.div_inv_t, a.div_g, [&](uint32_t k) { return q_of(on, a, d, k, mon); },
                    [&](uint32_t k, float v) { go[base + o + k] += v; });
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
     * preset) that warp's butterfly is the block's sum: the other warps hold zeros. The
     * entropy and q_delta sums only in the X instances (stat_extra). */
    double sums[4] = {s_loss, s_abs, s_q, s_cql}, more[4] = {s_ent, s_qd, 0.0, 0.0};
    if (ROWS * DT <= 32) {
        __syncthreads(); /* the row writes above, for the copy-out below */
        if (threadIdx.x < 32) {
            fhd_warp_sum4_d(sums);
            if (X) {
                more[0] = fhd_warp_sum_d(more[0]);
                more[1] = fhd_warp_sum_d(more[1]);
            }
        }
    } else {
        fhd_block_sum4_d(sums, red); /* its barriers order the row writes too */
        if (X)
            fhd_block_sum4_d(more, red);
    }
    if (threadIdx.x == 0) {
        double *sp = a.statpart + (size_t)blockIdx.x * fhd_loss_nstat(X);
        sp[0] = sums[0];
        sp[1] = sums[1];
        sp[2] = sums[2];
        sp[3] = sums[3];
        if (X) {
            sp[4] = more[0];
            sp[5] = more[1];
        }
    }
    /* d(head outputs): out to global (staged), and the block's column sums in row order */
    if (staged) { /* the barriers above ordered the row writes */
        float *dst = a.dout + (size_t)r0 * HOs;
        __nv_bfloat16 *dst16 = a.dout16 ? (__nv_bfloat16 *)a.dout16 + (size_t)r0 * HOs : nullptr;
        for (uint32_t e = threadIdx.x; e < nrows * HO; e += blockDim.x) {
            const uint32_t rr = e / HO, c = e - rr * HO;
            const float v = s_out[rr * HOp + c];
            dst[(size_t)rr * HOs + c] = v;
            if (dst16) /* the head GEMMs' operand (fhd__bf16_round_n's bits) */
                dst16[(size_t)rr * HOs + c] = __float2bfloat16_rn(v);
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
    /* the statistics' sums over the blocks: fhd_loss_scalars_kernel, off the critical path */
}

uint32_t fhd__cuda_td_loss_rows(uint32_t B) {
    return B <= FHD_LOSS_SMALL_BATCH ? 8u : 32u;
}

unsigned int fhd__cuda_td_loss_grid(uint32_t B) {
    uint64_t g = fhd_cdiv(B, fhd__cuda_td_loss_rows(B));
    return (unsigned int)(g < 2 ? 2 : g);
}

/* The loss kernel's instance for its rows a block, head_nc (the heads inside: 8 rows a block
 * only) and stat_extra (the diversity and q_delta sums: compiled out of the others). */
typedef void (*loss_fn)(const fhd__loss_args);
template <bool X> static loss_fn loss_kernel_x(uint32_t rows, uint32_t nc) {
    if (rows != 8)
        return fhd_td_loss_kernel<32, 0, X>;
    switch (nc) {
    case 8:
        return fhd_td_loss_kernel<8, 8, X>;
    case 16:
        return fhd_td_loss_kernel<8, 16, X>;
    case 24:
        return fhd_td_loss_kernel<8, 24, X>;
    case 32:
        return fhd_td_loss_kernel<8, 32, X>;
    default:
        return fhd_td_loss_kernel<8, 0, X>;
    }
}

static loss_fn loss_kernel(uint32_t rows, uint32_t nc, int extra) {
    return extra ? loss_kernel_x<true>(rows, nc) : loss_kernel_x<false>(rows, nc);
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
    if (a->head_nc != 0 && (rows != 8 || !head_vec || a->HO > a->head_nc || a->head_nc % 8 != 0 ||
                            a->head_nc > FHD_NARROW_MAX_OUT || wsm > FHD_LOSS_HEAD_SMEM ||
                            wsm_off * sizeof(float) + wsm + static_bytes > (uint64_t)optin))
        a->head_nc = 0; /* the head forwards run before the loss kernel */
    a->wsm_off = a->head_nc ? (uint32_t)wsm_off : 0;
    a->pdl = fhd_pdl_allowed((const void *)loss_kernel(rows, a->head_nc, 0));
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
    /* both instances: stat_extra is set after this setup (fhd__cuda_divmetrics_prepare) */
    for (int x = 0; x < 2 && e == cudaSuccess; x++)
        e = fhd_allow_dynamic_smem((const void *)loss_kernel(rows, a->head_nc, x), bytes);
    if (e != cudaSuccess)
        return e;
    a->smem_bytes = (uint32_t)bytes;
    if (!a->HOp) /* direct mode writes dout row by row: the caller converts it */
        a->dout16 = nullptr;
    return fhd__cuda_head_dx_setup(a); /* head_dx.cu */
}

cudaError_t fhd__cuda_td_loss(const fhd__loss_args *a, cudaStream_t stream) {
    cudaLaunchAttribute attr;
    const cudaLaunchConfig_t cfg =
        fhd_pdl_config(dim3(fhd__cuda_td_loss_grid(a->B)), dim3(FHD_LOSS_THREADS), a->smem_bytes,
                       stream, a->pdl, &attr);
    return cudaLaunchKernelEx(
        &cfg, loss_kernel(fhd__cuda_td_loss_rows(a->B), a->head_nc, a->stat_extra), *a);
}

/* Load this file's kernels now (lazy module loading must not happen inside a graph
 * capture). */
cudaError_t fhd__cuda_td_loss_preload(void) {
    cudaFuncAttributes fa;
    cudaError_t e = cudaSuccess;
    for (int x = 0; x < 2 && e == cudaSuccess; x++) {
        e = cudaFuncGetAttributes(&fa, (const void *)loss_kernel(32, 0, x));
        for (uint32_t nc = 0; nc <= FHD_NARROW_MAX_OUT && e == cudaSuccess; nc += 8)
            e = cudaFuncGetAttributes(&fa, (const void *)loss_kernel(8, nc, x));
    }
    if (e == cudaSuccess)
        e = fhd__cuda_head_dx_preload();
    return e != cudaSuccess ? e : fhd__cuda_priority_preload();
}
