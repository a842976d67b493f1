/* optim.cu - global-norm clipping (with the spectral-norm gradient folded in) and the fused
 * Adam / target-update pass (see optim.cuh). Elementwise formulas mirror cpu_ops.c with
 * uncontracted float operations. */
#include <math.h>

#include <cooperative_groups.h>

#include "common.cuh"
#include "guard.cuh"
#include "optim.cuh"

#define OPT_THREADS 256
/* A weight block's elements per thread (PER below), each loaded before any is used: 8 (chunks
 * of FHD_OPT_CHUNK elements), 4 or 2 (FHD_OPT_CHUNK_MIN), fhd__opt_args.per */
static_assert(FHD_OPT_CHUNK == OPT_THREADS * 8 && FHD_OPT_CHUNK_MIN == OPT_THREADS * 2,
              "a weight block covers its chunk");
static_assert(FHD_OPT_BIAS_COLS * (OPT_THREADS / 32) == OPT_THREADS, "bias block: 32 x 8");
static_assert(FHD_DEV_DETAIL_SEGMENTS == FHD_OPT_MAX_SEGMENTS && FHD_OPT_MAX_SEGMENTS <= OPT_THREADS,
              "detailed_metrics: every segment, a thread each");

static __device__ __forceinline__ int find_segment(const fhd__opt_args &a, uint32_t blk) {
    for (uint32_t s = 0; s < a.nseg; s++)
        if (blk >= a.seg[s].block0 && blk < a.seg[s].block0 + a.seg[s].nblocks)
            return (int)s;
    return -1;
}

/* Block blk of the norm pass: its chunk's partial sums (bias segments: the gradient itself
 * first, from the column partials) into partial[blk]. Called by whole blocks. */
template <int MAXX, bool SN, int PER> /* MAXX: the most parts a segment's extra may have
                                       * (registers: MAXX x PER); SN: a plan with spectrally
                                       * normalised layers (without, their paths are not
                                       * compiled in); PER: fhd__opt_args.per */
static __device__ void norm_block(const fhd__opt_args &a, uint32_t blk, double *red) {
    double s0 = 0.0, s1 = 0.0, s2 = 0.0, s3 = 0.0;
    const int si = find_segment(a, blk);
    if (si >= 0) {
        const fhd__opt_segment &S = a.seg[si];
        const uint64_t start = S.off + (uint64_t)(blk - S.block0) * S.chunk;
        const uint64_t end = start + S.chunk < S.off + S.len ? start + S.chunk : S.off + S.len;
        if (S.partial) { /* bias: lane = column, warp w sums parts w, w + 8, ... */
            __shared__ float cs[OPT_THREADS / 32][32];
            const uint32_t lane = threadIdx.x & 31, grp = threadIdx.x >> 5;
            const uint64_t e = start + lane;
            float acc = 0.0f;
            if (e < end) {
                const float *col = S.partial + (e - S.off);
                uint32_t p = grp;
                for (; p + 24 < S.nparts; p += 32) {
                    const float v0 = __ldcg(col + (size_t)p * S.len);
                    const float v1 = __ldcg(col + (size_t)(p + 8) * S.len);
                    const float v2 = __ldcg(col + (size_t)(p + 16) * S.len);
                    const float v3 = __ldcg(col + (size_t)(p + 24) * S.len);
                    acc += v0;
                    acc += v1;
                    acc += v2;
                    acc += v3;
                }
                for (; p < S.nparts; p += 8)
                    acc += __ldcg(col + (size_t)p * S.len);
            }
            cs[grp][lane] = acc;
            __syncthreads();
            if (grp == 0 && e < end) {
                float g = 0.0f;
                for (int w = 0; w < OPT_THREADS / 32; w++)
                    g += cs[w][lane];
                a.grad[e] = g;
                s0 = (double)g * g;
            }
        } else {
        /* every element's loads issued before the first is used */
        float g[PER];
#pragma unroll
        for (int k = 0; k < PER; k++) {
            const uint64_t e = start + (uint64_t)k * OPT_THREADS + threadIdx.x;
            g[k] = e < end ? a.grad[e] : 0.0f;
        }
        if (S.extra) { /* further parts of the gradient (a split dW GEMM's second half, or
                        * layer 0's dW partials): every part's loads first, then the sum in part
                        * order */
            float x[MAXX][PER];
#pragma unroll
            for (int q = 0; q < MAXX; q++)
#pragma unroll
                for (int k = 0; k < PER; k++) {
                    const uint64_t e = start + (uint64_t)k * OPT_THREADS + threadIdx.x;
                    x[q][k] = (uint32_t)q < S.nextra && e < end
                                  ? S.extra[(size_t)q * S.len + (e - S.off)]
                                  : 0.0f;
                }
#pragma unroll
            for (int k = 0; k < PER; k++) {
                const uint64_t e = start + (uint64_t)k * OPT_THREADS + threadIdx.x;
#pragma unroll
                for (int q = 0; q < MAXX; q++)
                    if ((uint32_t)q < S.nextra)
                        g[k] += x[q][k];
                if (e < end)
                    a.grad[e] = g[k];
            }
        }
        if (!SN || S.sn < 0) {
#pragma unroll
            for (int k = 0; k < PER; k++)
                s0 += (double)g[k] * g[k];
        } else {
            const fhd__opt_sn &L = a.sn[S.sn];
            float w[PER], ur[PER], vc[PER];
#pragma unroll
            for (int k = 0; k < PER; k++) {
                const uint64_t e = start + (uint64_t)k * OPT_THREADS + threadIdx.x;
                const bool in = e < end;
                const uint32_t loc = in ? (uint32_t)(e - S.off) : 0u; /* m k < 2^32 */
                const uint32_t row = fhd_divide(L.kdiv, loc);
                w[k] = in ? a.params[e] : 0.0f;
                ur[k] = in ? L.u[row] : 0.0f;
                vc[k] = in ? L.v[loc - row * L.k] : 0.0f;
            }
#pragma unroll
            for (int k = 0; k < PER; k++) {
                const double gd = g[k];
                s1 += gd * gd;
                s2 += gd * (double)w[k];
                s3 += gd * (double)ur[k] * (double)vc[k];
            }
        }
        }
    }
    double v[4] = {s0, s1, s2, s3};
    fhd_block_sum4_d(v, red);
    if (threadIdx.x == 0) {
        double *p = a.partial + (size_t)blk * 4;
        p[0] = v[0];
        p[1] = v[1];
        p[2] = v[2];
        p[3] = v[3];
    }
}

/* The per-segment sums of every norm block's partials, in block order, then the global norm,
 * the clip coefficient, the SN gradient coefficients and Adam's bias corrections into *ci; one
 * block a launch also each segment's squared norm for detailed_metrics into slot det_slot (the
 * update's number t % 2; -1: not this block). Called by a whole block after every norm block
 * has written its partials. */
template <bool SN>
static __device__ void finish_norm(const fhd__opt_args &a, fhd__clip_info *ci, float step,
                                   float bc2_sqrt, int det_slot) {
    __shared__ double segsum[FHD_OPT_MAX_SEGMENTS][4];
    __shared__ float sn_sigma[FHD_OPT_MAX_SN], sn_uu[FHD_OPT_MAX_SN], sn_vv[FHD_OPT_MAX_SN];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    /* the SN layers' sigma and |u|^2, |v|^2 for thread 0 below, loaded in parallel with the
     * partial sums (one L2 round trip, not three per layer in a row) */
    for (uint32_t l = threadIdx.x; SN && l < a.nsn; l += OPT_THREADS) {
        sn_sigma[l] = *a.sn[l].sigma;
        sn_uu[l] = a.sn[l].norms[0];
        sn_vv[l] = a.sn[l].norms[1];
    }
    /* a warp a segment (one round up to eight segments): without spectral norm its sum 0,
     * with it its sums 1 to 3 side by side, each in the same order as alone */
    for (uint32_t sg = warp; sg < a.nseg; sg += OPT_THREADS / 32) {
        const double *p = a.partial + (size_t)a.seg[sg].block0 * 4;
        if (SN && a.seg[sg].sn >= 0) {
            double acc[3];
            fhd_warp_sum_strided_n<double, 3>(p + 1, a.seg[sg].nblocks, 4, acc);
            if (lane == 0)
                for (int q = 0; q < 3; q++)
                    segsum[sg][1 + q] = acc[q];
        } else {
            const double acc = fhd_warp_sum_strided(p, a.seg[sg].nblocks, 4);
            if (lane == 0)
                segsum[sg][0] = acc;
        }
    }
    __syncthreads();
    if (threadIdx.x == 0) {
        double total = 0.0;
        for (uint32_t s = 0; s < a.nseg; s++) {
            const int32_t l = a.seg[s].sn;
            if (!SN || l < 0) {
                total += segsum[s][0];
                continue;
            }
            const float sigma = sn_sigma[l];
            const float inv = 1.0f / sigma;
            const float c = (float)(segsum[s][2] / ((double)sigma * sigma));
            const double uu = sn_uu[l], vv = sn_vv[l];
            double part = (double)inv * inv * segsum[s][1] - 2.0 * (double)c * inv * segsum[s][3] +
                          (double)c * c * uu * vv;
            part = part > 0.0 ? part : 0.0;
            total += part;
            segsum[s][0] = part;
            ci->sn_c[l] = c;
            ci->sn_inv[l] = inv;
        }
        const float norm = (float)sqrt(total);
        float coef = 1.0f;
        int clip = 0;
        if (a.max_norm > 0.0f) {
            const float cf = a.max_norm / (norm + 1e-6f);
            if (cf < 1.0f) {
                coef = cf;
                clip = 1;
            }
        }
        ci->step = step;
        ci->bc2_sqrt = bc2_sqrt;
        ci->norm = norm;
        ci->coef = coef;
        ci->clip = clip;
        ci->skip = fhd_guard_skip(a, norm);
    }
    __syncthreads();
    if (det_slot >= 0 && a.det && threadIdx.x < a.nseg) /* detailed_metrics (device_state.cuh) */
        a.det[det_slot].seg_sq[threadIdx.x] = segsum[threadIdx.x][0];
}

template <int MAXX, int PER>
__global__ void __launch_bounds__(OPT_THREADS)
    fhd_clip_grad_norm_kernel(const __grid_constant__ fhd__opt_args a) {
    __shared__ double red[4 * 32];
    norm_block<MAXX, true, PER>(a, blockIdx.x, red);
    if (!fhd_last_block_done(a.done_norm, gridDim.x))
        return;
    __shared__ float sc[2];
    const uint64_t t = a.st->updates + 1; /* the Adam kernel after this one raises it */
    if (threadIdx.x == 0)
        fhd_adam_scalars(a.lr, a.beta1, a.beta2, t, &sc[0], &sc[1]);
    finish_norm<true>(a, a.clip, sc[0], sc[1], (int)(t & 1)); /* its barriers publish sc */
    /* the norm reaches the record with the guard's decision, by the Adam kernel's last block */
}

/* What Adam takes from the norm pass and the configuration, for one segment. */
struct adam_coef {
    bool clip;
    float coef, b2, omb1, omb2, step, bc2_sqrt, wd, decay, sc, sinv;
};

template <bool SN>
static __device__ __forceinline__ adam_coef adam_coefs(const fhd__opt_args &a,
                                                       const fhd__opt_segment &S,
                                                       const fhd__clip_info &ci) {
    adam_coef c;
    c.clip = ci.clip != 0;
    c.coef = ci.coef;
    const double b1d = a.beta1, b2d = a.beta2;
    c.b2 = (float)b2d;
    c.omb1 = (float)(1.0 - b1d);
    c.omb2 = (float)(1.0 - b2d);
    c.step = ci.step;
    c.bc2_sqrt = ci.bc2_sqrt;
    c.wd = (float)a.weight_decay;
    c.decay = (float)__dsub_rn(1.0, __dmul_rn(a.lr, a.weight_decay));
    c.sc = 0.0f;
    c.sinv = 1.0f;
    if (SN && S.sn >= 0) {
        c.sc = ci.sn_c[S.sn];
        c.sinv = ci.sn_inv[S.sn];
    }
    return c;
}

/* Element e: g' (SN), clipping, weight decay, Adam, the target update when due. */
static __device__ __forceinline__ void adam_elem(const fhd__opt_args &a, const adam_coef &c,
                                                 bool sn, bool due, uint64_t e, float gi,
                                                 float pi, float m0, float v0, float ur,
                                                 float vc) {
    if (sn) { /* fhd__sn_weight_backward */
        const float cu = FHD_FMUL(c.sc, ur);
        gi = FHD_FSUB(FHD_FMUL(gi, c.sinv), FHD_FMUL(cu, vc));
    }
    if (c.clip)
        gi = FHD_FMUL(gi, c.coef);
    if (sn || c.clip)
        a.grad[e] = gi; /* the gradient state holds what Adam used, as on the CPU */
    if (c.wd != 0.0f) {
        if (a.decoupled)
            pi = FHD_FMUL(pi, c.decay);
        else
            gi = FHD_FADD(gi, FHD_FMUL(c.wd, pi));
    }
    const float mi = FHD_FADD(m0, FHD_FMUL(c.omb1, FHD_FSUB(gi, m0)));
    const float vi = FHD_FADD(FHD_FMUL(v0, c.b2), FHD_FMUL(FHD_FMUL(c.omb2, gi), gi));
    a.m[e] = mi;
    a.v[e] = vi;
    const float denom = FHD_FADD(__fdiv_rn(__fsqrt_rn(vi), c.bc2_sqrt), a.eps);
    const float pn = FHD_FSUB(pi, FHD_FMUL(c.step, __fdiv_rn(mi, denom)));
    a.params[e] = pn;
    if (due) { /* fhd__polyak on the fresh online value */
        float *tg = a.params + a.T + e;
        *tg = a.tau >= 1.0f ? pn : FHD_FADD(*tg, FHD_FMUL(a.tau, FHD_FSUB(pn, *tg)));
    }
}

/* The target keeps the online power-iteration state: SN-copy block blk (past the segments). */
static __device__ __forceinline__ void sn_copy_block(const fhd__opt_args &a, uint32_t blk) {
    const uint64_t start = (uint64_t)(blk - a.nblocks) * FHD_OPT_CHUNK;
    const uint64_t end = start + FHD_OPT_CHUNK < a.sn_size ? start + FHD_OPT_CHUNK : a.sn_size;
    for (uint64_t e = start + threadIdx.x; e < end; e += OPT_THREADS)
        a.sn_vec[a.sn_size + e] = a.sn_vec[e];
}

/* A block's Adam inputs: its segment's range, and (after load) every element's values. */
template <int PER> struct adam_in {
    const fhd__opt_segment *S;
    uint64_t start, end;
    float g[PER], pv[PER], m0[PER], v0[PER], ur[PER], vc[PER];
};

template <int PER>
static __device__ __forceinline__ void adam_range(const fhd__opt_args &a, int si,
                                                  adam_in<PER> &R) {
    R.S = &a.seg[si];
    R.start = R.S->off + (uint64_t)(blockIdx.x - R.S->block0) * R.S->chunk;
    R.end = R.start + R.S->chunk < R.S->off + R.S->len ? R.start + R.S->chunk
                                                        : R.S->off + R.S->len;
}

/* Loads of all PER elements but the gradient's, each issued before any is used: the
 * weights, moments and (SN) u_i, v_j. */
template <bool SN, int PER>
static __device__ __forceinline__ void adam_load(const fhd__opt_args &a, adam_in<PER> &R) {
    const fhd__opt_segment &S = *R.S;
    const bool sn = SN && S.sn >= 0;
    const float *u = sn ? a.sn[S.sn].u : nullptr, *v = sn ? a.sn[S.sn].v : nullptr;
    const uint32_t k = sn ? a.sn[S.sn].k : 1u;
    const fhd_divisor kdiv = sn ? a.sn[S.sn].kdiv : fhd_divisor{1u, 1u, 0u, 0u};
#pragma unroll
    for (int j = 0; j < PER; j++) {
        const uint64_t e = R.start + (uint64_t)j * OPT_THREADS + threadIdx.x;
        const bool in = e < R.end;
        R.pv[j] = in ? a.params[e] : 0.0f;
        R.m0[j] = in ? a.m[e] : 0.0f;
        R.v0[j] = in ? a.v[e] : 0.0f;
        if (u) { /* W is (m, k) with m k < 2^32 */
            const uint32_t loc = in ? (uint32_t)(e - S.off) : 0u;
            const uint32_t row = fhd_divide(kdiv, loc);
            R.ur[j] = in ? u[row] : 0.0f;
            R.vc[j] = in ? v[loc - row * k] : 0.0f;
        }
    }
}

/* Block blk of the Adam pass (blocks past the segments copy the SN vectors when due). Its
 * arithmetic is adam_elem's, written out: through adam_elem this kernel's code grew by 256
 * bytes, and the optimiser's time follows its code (fhd_opt_fused_kernel_one). */
template <bool SN, int PER>
static __device__ void adam_block(const fhd__opt_args &a, uint32_t blk, uint64_t t, bool due,
                                  const fhd__clip_info &ci) {
    if (blk < a.nblocks) {
        const int si = find_segment(a, blk);
        if (si >= 0) {
            const fhd__opt_segment &S = a.seg[si];
            const uint64_t start = S.off + (uint64_t)(blk - S.block0) * S.chunk;
            const uint64_t end = start + S.chunk < S.off + S.len ? start + S.chunk : S.off + S.len;
            const bool clip = ci.clip != 0;
            const float coef = ci.coef;
            const double b1d = a.beta1, b2d = a.beta2;
            const float b2 = (float)b2d;
            const float omb1 = (float)(1.0 - b1d), omb2 = (float)(1.0 - b2d);
            const float step = ci.step, bc2_sqrt = ci.bc2_sqrt;
            const float wd = (float)a.weight_decay;
            const float decay = (float)__dsub_rn(1.0, __dmul_rn(a.lr, a.weight_decay));
            const float *u = nullptr, *v = nullptr;
            float sc = 0.0f, sinv = 1.0f;
            uint32_t k = 1;
            if (SN && S.sn >= 0) {
                u = a.sn[S.sn].u;
                v = a.sn[S.sn].v;
                k = a.sn[S.sn].k;
                sc = ci.sn_c[S.sn];
                sinv = ci.sn_inv[S.sn];
            }
            /* loads of all PER elements first, then the arithmetic and the stores */
            float g[PER], pv[PER], m0[PER], v0[PER], ur[PER], vc[PER];
#pragma unroll
            for (int j = 0; j < PER; j++) {
                const uint64_t e = start + (uint64_t)j * OPT_THREADS + threadIdx.x;
                const bool in = e < end;
                g[j] = in ? a.grad[e] : 0.0f;
                pv[j] = in ? a.params[e] : 0.0f;
                m0[j] = in ? a.m[e] : 0.0f;
                v0[j] = in ? a.v[e] : 0.0f;
                if (u) { /* W is (m, k) with m k < 2^32 */
                    const uint32_t loc = in ? (uint32_t)(e - S.off) : 0u;
                    ur[j] = in ? u[loc / k] : 0.0f;
                    vc[j] = in ? v[loc % k] : 0.0f;
                }
            }
#pragma unroll
            for (int j = 0; j < PER; j++) {
                const uint64_t e = start + (uint64_t)j * OPT_THREADS + threadIdx.x;
                if (e >= end)
                    break;
                float gi = g[j];
                if (u) { /* fhd__sn_weight_backward */
                    const float cu = FHD_FMUL(sc, ur[j]);
                    gi = FHD_FSUB(FHD_FMUL(gi, sinv), FHD_FMUL(cu, vc[j]));
                }
                if (clip)
                    gi = FHD_FMUL(gi, coef);
                if (u || clip)
                    a.grad[e] = gi; /* the gradient state holds what Adam used, as on the CPU */
                float pi = pv[j];
                if (wd != 0.0f) {
                    if (a.decoupled)
                        pi = FHD_FMUL(pi, decay);
                    else
                        gi = FHD_FADD(gi, FHD_FMUL(wd, pi));
                }
                const float mi = FHD_FADD(m0[j], FHD_FMUL(omb1, FHD_FSUB(gi, m0[j])));
                const float vi =
                    FHD_FADD(FHD_FMUL(v0[j], b2), FHD_FMUL(FHD_FMUL(omb2, gi), gi));
                a.m[e] = mi;
                a.v[e] = vi;
                const float denom = FHD_FADD(__fdiv_rn(__fsqrt_rn(vi), bc2_sqrt), a.eps);
                const float pn = FHD_FSUB(pi, FHD_FMUL(step, __fdiv_rn(mi, denom)));
                a.params[e] = pn;
                if (due) { /* fhd__polyak on the fresh online value */
                    float *tg = a.params + a.T + e;
                    *tg = a.tau >= 1.0f ? pn : FHD_FADD(*tg, FHD_FMUL(a.tau, FHD_FSUB(pn, *tg)));
                }
            }
        }
    } else if (due) {
        sn_copy_block(a, blk);
    }
}

template <int PER>
__global__ void __launch_bounds__(OPT_THREADS)
    fhd_adam_step_kernel(const __grid_constant__ fhd__opt_args a) {
    const uint64_t t = a.st->updates + 1;
    const bool due = (t % a.target_interval) == 0;
    const int32_t skip = a.clip->skip; /* the guard: nothing applied */
    if (!skip)
        adam_block<true, PER>(a, blockIdx.x, t, due, *a.clip);
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
template <int MAXX, bool SN, int PER>
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
        norm_block<MAXX, SN, PER>(a, blk, red);
    /* the grid barrier orders the partials (thread 0 writes them; it is the block's master,
     * whose arrival is a release at GPU scope, and the wait an acquire): no __threadfence in
     * every thread before it, which would only delay the arrival */
    cooperative_groups::this_grid().sync();
    finish_norm<SN>(a, &ci, pre_step, pre_bc2, blockIdx.x == 0 ? (int)(t & 1) : -1);
    publish(a, ci, t);
    if (ci.skip) /* the guard: parameters, moments, target and SN copy unchanged */
        return;
    for (uint32_t blk = blockIdx.x; blk < a.nblocks + a.sn_blocks; blk += gridDim.x)
        adam_block<SN, PER>(a, blk, t, due, ci);
}

/* The fused pass where the grid covers both passes (fhd__cuda_opt_fused_grid says where that
 * pays): block i runs norm block i, then issues the loads of Adam block i's weights, moments
 * and SN vectors before the grid barrier, and the gradient's (the norm pass writes the summed
 * parts and bias gradients into it) after. A kernel of its own: one kernel with both forms
 * doubles the code of each, and is slower. */
template <int MAXX, bool SN, int PER>
__global__ void __launch_bounds__(OPT_THREADS, 1) /* the inputs held across the barrier: no spills */
    fhd_opt_fused_kernel_one(const __grid_constant__ fhd__opt_args a) {
    __shared__ double red[4 * 32];
    __shared__ fhd__clip_info ci;
    const uint64_t t = a.st->updates + 1;
    const bool due = (t % a.target_interval) == 0;
    const float pre_step = __ldcg(&a.clip->pre_step), pre_bc2 = __ldcg(&a.clip->pre_bc2_sqrt);
    const uint32_t blk = blockIdx.x;
    const int si = blk < a.nblocks ? find_segment(a, blk) : -1;
    if (blk < a.nblocks)
        norm_block<MAXX, SN, PER>(a, blk, red);
    adam_in<PER> R;
    if (si >= 0) {
        adam_range(a, si, R);
        adam_load<SN, PER>(a, R);
    }
    cooperative_groups::this_grid().sync();
    finish_norm<SN>(a, &ci, pre_step, pre_bc2, blockIdx.x == 0 ? (int)(t & 1) : -1);
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
        adam_elem(a, c, sn, due, e, R.g[j], R.pv[j], R.m0[j], R.v0[j], R.ur[j], R.vc[j]);
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
 * more, with or without the spectral-norm paths (code a plan does not run is code its SMs do
 * not fetch). */
template <bool ONE, int MAXX, bool SN, int PER> static const void *fused_instance() {
    return ONE ? (const void *)fhd_opt_fused_kernel_one<MAXX, SN, PER>
               : (const void *)fhd_opt_fused_kernel<MAXX, SN, PER>;
}

template <bool ONE, int PER> static const void *fused_instance(const fhd__opt_args *a) {
    const bool many = many_parts(a), sn = a->nsn > 0;
    if (many)
        return sn ? fused_instance<ONE, FHD_OPT_MAX_EXTRA, true, PER>()
                  : fused_instance<ONE, FHD_OPT_MAX_EXTRA, false, PER>();
    return sn ? fused_instance<ONE, 1, true, PER>() : fused_instance<ONE, 1, false, PER>();
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

template <int PER>
static void two_kernels(const fhd__opt_args *a, bool adam, cudaStream_t stream) {
    if (adam)
        fhd_adam_step_kernel<PER><<<a->nblocks + a->sn_blocks, OPT_THREADS, 0, stream>>>(*a);
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
    if (cudaDeviceGetAttribute(&coop, cudaDevAttrCooperativeLaunch, device) != cudaSuccess || !coop ||
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
    if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, fused_kernel(a, false),
                                                      OPT_THREADS, 0) != cudaSuccess ||
        cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm1, fused_kernel(a, true),
                                                      OPT_THREADS, 0) != cudaSuccess ||
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

template <int PER> static cudaError_t preload_per() {
    cudaFuncAttributes fa;
    const void *k[] = {(const void *)fhd_clip_grad_norm_kernel<1, PER>,
                       (const void *)fhd_clip_grad_norm_kernel<FHD_OPT_MAX_EXTRA, PER>,
                       (const void *)fhd_adam_step_kernel<PER>,
                       fused_instance<false, 1, false, PER>(),
                       fused_instance<false, 1, true, PER>(),
                       fused_instance<false, FHD_OPT_MAX_EXTRA, false, PER>(),
                       fused_instance<false, FHD_OPT_MAX_EXTRA, true, PER>(),
                       fused_instance<true, 1, false, PER>(),
                       fused_instance<true, 1, true, PER>(),
                       fused_instance<true, FHD_OPT_MAX_EXTRA, false, PER>(),
                       fused_instance<true, FHD_OPT_MAX_EXTRA, true, PER>()};
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
