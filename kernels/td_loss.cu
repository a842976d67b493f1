/* td_loss.cu - fused head combine, TD target, loss, dL/dQ, head-combine backward, importance
 * weights and priority update (see td_loss.cuh). Float formulas use uncontracted operations
 * where the CPU reference mixes * and +, so that equal inputs give equal outputs. */
#include <math.h>

#include "common.cuh"
#include "priority.h"
#include "td_loss.cuh"

#define LOSS_THREADS 128

/* Mean advantage of branch d of one head row (dueling), summed in action order as the CPU. */
static __device__ __forceinline__ float branch_mean(const float *o, const fhd__loss_args &a,
                                                    uint32_t d) {
    if (!a.dueling)
        return 0.0f;
    const float *adv = o + 1 + a.k_off[d];
    float s = 0.0f;
    for (uint32_t k = 0; k < a.K[d]; k++)
        s += adv[k];
    return s / (float)a.K[d];
}

/* Q_d(k) of one head row: V + (A_d(k) - mean) with dueling, else the output itself. */
static __device__ __forceinline__ float q_of(const float *o, const fhd__loss_args &a, uint32_t d,
                                             uint32_t k, float mean) {
    if (!a.dueling)
        return o[a.k_off[d] + k];
    return o[0] + (o[1 + a.k_off[d] + k] - mean);
}

__global__ void __launch_bounds__(LOSS_THREADS)
    fhd_td_loss_kernel(const __grid_constant__ fhd__loss_args a) {
    __shared__ double red[32];
    const uint32_t i = blockIdx.x * blockDim.x + threadIdx.x;
    const uint32_t D = a.D, HO = a.HO, HOs = a.HOs, base = a.dueling ? 1u : 0u;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    double s_loss = 0.0, s_abs = 0.0, s_q = 0.0, s_cql = 0.0;
    float beta = 0.0f;
    if (a.prioritized)
        beta = fhd__beta_at(a.beta0, a.beta_steps, a.st->updates);
    if (i < a.B) {
        const float *on = a.head_on + (size_t)i * HOs;
        const float *sel = a.head_sel + (size_t)i * HOs;
        const float *tg = a.head_tgt + (size_t)i * HOs;
        /* fhd__td_target */
        float acc = 0.0f;
        for (uint32_t d = 0; d < D; d++) {
            const float ms = branch_mean(sel, a, d);
            uint32_t best = 0;
            float bq = q_of(sel, a, d, 0, ms);
            for (uint32_t k = 1; k < a.K[d]; k++) {
                const float qk = q_of(sel, a, d, k, ms);
                if (qk > bq) {
                    best = k;
                    bq = qk;
                }
            }
            acc += q_of(tg, a, d, best, branch_mean(tg, a, d));
        }
        const float yi = FHD_FADD(a.ret[i], FHD_FMUL(a.disc[i], acc / (float)D));
        a.y[i] = yi;
        /* importance weight */
        float w = 1.0f;
        if (a.w_in) {
            w = a.w_in[i];
        } else if (a.prioritized) {
            const double ratio = (double)*a.qmin / (double)a.q_samp[i];
            w = (float)fhd__det_pow(ratio, (double)beta);
        }
        a.w_out[i] = w;
        /* fhd__td_loss */
        const float scale = 1.0f / ((float)a.B * (float)D);
        float *go = a.dout + (size_t)i * HOs;
        for (uint32_t d = 0; d < D; d++) {
            const uint32_t o = a.k_off[d], K = a.K[d];
            const float mon = branch_mean(on, a, d);
            const uint32_t at = (uint32_t)a.act[(size_t)i * D + d];
            const float qa = q_of(on, a, d, at, mon);
            const float delta = qa - yi;
            a.td[(size_t)i * D + d] = delta;
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
        }
        /* fhd__head_combine_backward (in place on the row) */
        if (a.dueling) {
            float dv = 0.0f;
            for (uint32_t d = 0; d < D; d++) {
                float *gd = go + 1 + a.k_off[d];
                float s = 0.0f;
                for (uint32_t k = 0; k < a.K[d]; k++)
                    s += gd[k];
                dv += s;
                const float mean = s / (float)a.K[d];
                for (uint32_t k = 0; k < a.K[d]; k++)
                    gd[k] = gd[k] - mean;
            }
            go[0] = dv;
        }
        /* priority of this sample; the last occurrence of a slot sets its leaf */
        if (a.prioritized) {
            float tabs = 0.0f;
            for (uint32_t d = 0; d < D; d++) {
                const float t = a.td[(size_t)i * D + d];
                tabs += t < 0 ? -t : t;
            }
            const uint64_t p = fhd__prio_from_td(tabs / (float)D, a.per_alpha, a.per_eps);
            atomicMax(reinterpret_cast<unsigned long long *>(&a.st->max_q),
                      (unsigned long long)p);
            const uint32_t s = a.idx[i];
            if (i == a.B - 1 || a.idx[i + 1] != s) {
                uint32_t n = a.leaves + s;
                const uint64_t delta = p - a.nodes[n]; /* modulo 2^64: adds up exactly */
                a.nodes[n] = p;
                if (delta)
                    for (n >>= 1; n >= 1; n >>= 1)
                        atomicAdd(reinterpret_cast<unsigned long long *>(a.nodes + n),
                                  (unsigned long long)delta);
            }
        }
    }
    /* per-block statistics and head-bias column sums */
    s_loss = fhd_block_sum_d(s_loss, red);
    s_abs = fhd_block_sum_d(s_abs, red);
    s_q = fhd_block_sum_d(s_q, red);
    s_cql = fhd_block_sum_d(s_cql, red);
    if (threadIdx.x == 0) {
        double *sp = a.statpart + (size_t)blockIdx.x * 4;
        sp[0] = s_loss;
        sp[1] = s_abs;
        sp[2] = s_q;
        sp[3] = s_cql;
    }
    /* per-warp column sums of d(head outputs): each thread reads back its own row */
    {
        const float *go = a.dout + (size_t)i * HOs;
        float *cp = a.colpart + ((size_t)blockIdx.x * (LOSS_THREADS / 32) + warp) * HO;
#pragma unroll 4
        for (uint32_t c = 0; c < HO; c++) {
            float v = i < a.B ? go[c] : 0.0f;
            v = fhd_warp_sum(v);
            if (lane == 0)
                cp[c] = v;
        }
    }
    if (fhd_last_block_done(a.done, gridDim.x)) {
        /* head bias gradient: 32 columns at a time, warp w sums the partials w, w + 4, ... */
        __shared__ float csum[LOSS_THREADS / 32][32];
        const uint32_t nparts = gridDim.x * (LOSS_THREADS / 32);
        for (uint32_t c0 = 0; c0 < HO; c0 += 32) {
            const uint32_t c = c0 + lane;
            float s = 0.0f;
            if (c < HO)
                for (uint32_t p = warp; p < nparts; p += LOSS_THREADS / 32)
                    s += __ldcg(a.colpart + (size_t)p * HO + c);
            csum[warp][lane] = s;
            __syncthreads();
            if (warp == 0 && c < HO) {
                float t = 0.0f;
                for (int w = 0; w < LOSS_THREADS / 32; w++)
                    t += csum[w][lane];
                a.db_head[c] = t;
            }
            __syncthreads();
        }
        if (threadIdx.x < 4) {
            double s = 0.0;
            for (uint32_t b = 0; b < gridDim.x; b++)
                s += __ldcg(a.statpart + (size_t)b * 4 + threadIdx.x);
            red[threadIdx.x] = s; /* red is free: the block sums above are complete */
        }
        __syncthreads();
        if (threadIdx.x == 0) {
            const double n = (double)a.B * D;
            a.st->loss = (float)(red[0] / n + (double)a.cql_alpha * red[3] / n);
            a.st->td_abs_mean = (float)(red[1] / n);
            a.st->q_mean = (float)(red[2] / n);
            a.st->beta = beta;
        }
    }
}

unsigned int fhd__cuda_td_loss_grid(uint32_t B) {
    uint64_t g = fhd_cdiv(B, LOSS_THREADS);
    return (unsigned int)(g < 2 ? 2 : g);
}

cudaError_t fhd__cuda_td_loss(const fhd__loss_args *a, cudaStream_t stream) {
    fhd_td_loss_kernel<<<fhd__cuda_td_loss_grid(a->B), LOSS_THREADS, 0, stream>>>(*a);
    return cudaGetLastError();
}

/* Load this file's kernels now (lazy module loading must not happen inside a graph
 * capture). */
cudaError_t fhd__cuda_td_loss_preload(void) {
    cudaFuncAttributes fa;
    cudaError_t e = cudaFuncGetAttributes(&fa, (const void *)fhd_td_loss_kernel);
    if (e != cudaSuccess)
        return e;
    return cudaSuccess;
}
