/* optim_adam.cuh - the optimiser's Adam pass (device code only; included by optim.cu, see
 * optim.cuh): per element the spectral-norm correction, clipping, weight decay, Adam/AdamW and the
 * target update, from the coefficients the norm pass finished, with bf16 GEMMs the bf16 copy of
 * each new value; and the copy of the online spectral-norm vectors into the target's.
 * Elementwise formulas mirror cpu_ops.c with uncontracted float operations. */
#ifndef FHD_KERNELS_OPTIM_ADAM_CUH
#define FHD_KERNELS_OPTIM_ADAM_CUH

#include <cuda_bf16.h>

#include "optim_norm.cuh" /* OPT_THREADS, find_segment */

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

/* The GEMMs' copy of element e's new value x (fhd__opt_segment.w16 / f32), of the target's
 * (net 1) or the online network's (net 0); W16: the plan keeps copies (instances without them
 * carry none of this code). */
template <bool W16>
static __device__ __forceinline__ void copy_out(const fhd__opt_segment &S, uint64_t e, int net,
                                                float x) {
    if (!W16)
        return;
    const uint64_t i = e - S.off + (net ? S.copy_net : 0u);
    if (S.w16)
        S.w16[i] = __bfloat16_as_ushort(__float2bfloat16_rn(x));
    else if (S.f32)
        S.f32[i] = x;
}

/* The new online value pn of element e, its copy, and the target update when due. */
template <bool W16>
static __device__ __forceinline__ void put_param(const fhd__opt_args &a, const fhd__opt_segment &S,
                                                 bool due, uint64_t e, float pn) {
    a.params[e] = pn;
    copy_out<W16>(S, e, 0, pn);
    if (due) { /* fhd__polyak on the fresh online value */
        float *tg = a.params + a.T + e;
        const float tn = a.tau >= 1.0f ? pn : FHD_FADD(*tg, FHD_FMUL(a.tau, FHD_FSUB(pn, *tg)));
        *tg = tn;
        copy_out<W16>(S, e, 1, tn);
    }
}

/* Element e of segment S: g' (SN), clipping, weight decay, Adam, the target update when due. */
template <bool W16>
static __device__ __forceinline__ void
adam_elem(const fhd__opt_args &a, const fhd__opt_segment &S, const adam_coef &c, bool sn, bool due,
          uint64_t e, float gi, float pi, float m0, float v0, float ur, float vc) {
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
    put_param<W16>(a, S, due, e, FHD_FSUB(pi, FHD_FMUL(c.step, __fdiv_rn(mi, denom))));
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
static __device__ __forceinline__ void adam_range(const fhd__opt_args &a, int si, adam_in<PER> &R) {
    R.S = &a.seg[si];
    R.start = R.S->off + (uint64_t)(blockIdx.x - R.S->block0) * R.S->chunk;
    R.end = R.start + R.S->chunk < R.S->off + R.S->len ? R.start + R.S->chunk : R.S->off + R.S->len;
}

/* Loads of all PER elements but the gradient's, each issued before any is used: the
 * weights, moments and (SN) u_i, v_j (pruned: the mask). */
template <bool SN, int PER, bool MK>
static __device__ __forceinline__ void adam_load(const fhd__opt_args &a, adam_in<PER> &R) {
    const fhd__opt_segment &S = *R.S;
    const bool sn = SN && S.sn >= 0;
    const float *u = sn ? a.sn[S.sn].u : nullptr, *v = sn ? a.sn[S.sn].v : nullptr;
    const float *mk = MK && sn ? a.sn[S.sn].mask : nullptr;
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
            if (mk) /* pruned: u_i taken as 0, so that g' is 0 (fhd__opt_sn.mask) */
                R.ur[j] = in && mk[loc] != 0.0f ? R.ur[j] : 0.0f;
        }
    }
}

/* Block blk of the Adam pass (blocks past the segments copy the SN vectors when due). Its
 * arithmetic is adam_elem's, written out: through adam_elem this kernel's code grew by 256
 * bytes, and the optimiser's time follows its code (fhd_opt_fused_kernel_one). */
template <bool SN, int PER, bool MK, bool W16>
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
            const float *u = nullptr, *v = nullptr, *mk = nullptr;
            float sc = 0.0f, sinv = 1.0f;
            uint32_t k = 1;
            if (SN && S.sn >= 0) {
                u = a.sn[S.sn].u;
                v = a.sn[S.sn].v;
                mk = MK ? a.sn[S.sn].mask : nullptr;
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
                    if (mk) /* pruned: u_i taken as 0, so that g' is 0 (fhd__opt_sn.mask) */
                        ur[j] = in && mk[loc] != 0.0f ? ur[j] : 0.0f;
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
                const float vi = FHD_FADD(FHD_FMUL(v0[j], b2), FHD_FMUL(FHD_FMUL(omb2, gi), gi));
                a.m[e] = mi;
                a.v[e] = vi;
                const float denom = FHD_FADD(__fdiv_rn(__fsqrt_rn(vi), bc2_sqrt), a.eps);
                put_param<W16>(a, S, due, e, FHD_FSUB(pi, FHD_FMUL(step, __fdiv_rn(mi, denom))));
            }
        }
    } else if (due) {
        sn_copy_block(a, blk);
    }
}

#endif
