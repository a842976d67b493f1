/* optim_norm.cuh - the optimiser's norm pass (device code only; included by optim.cu, see
 * optim.cuh): each block's partial sums of squares of its chunk of the flat gradient (with the
 * bias gradients summed from their column partials and a weight's further parts added in first),
 * and the finish that turns them into the global norm, the clip coefficient and the spectral-norm
 * gradient coefficients. */
#ifndef FHD_KERNELS_OPTIM_NORM_CUH
#define FHD_KERNELS_OPTIM_NORM_CUH

#include "common.cuh"
#include "guard.cuh"
#include "optim.cuh"

#define OPT_THREADS 256
/* A weight block's elements per thread (PER below), each loaded before any is used: 8 (chunks
 * of FHD_OPT_CHUNK elements), 4 or 2 (FHD_OPT_CHUNK_MIN), fhd__opt_args.per */
static_assert(FHD_OPT_CHUNK == OPT_THREADS * 8 && FHD_OPT_CHUNK_MIN == OPT_THREADS * 2,
              "a weight block covers its chunk");
static_assert(FHD_OPT_BIAS_COLS * (OPT_THREADS / 32) == OPT_THREADS, "bias block: 32 x 8");
static_assert(FHD_DEV_DETAIL_SEGMENTS == FHD_OPT_MAX_SEGMENTS &&
                  FHD_OPT_MAX_SEGMENTS <= OPT_THREADS,
              "detailed_metrics: every segment, a thread each");

static __device__ __forceinline__ int find_segment(const fhd__opt_args &a, uint32_t blk) {
    for (uint32_t s = 0; s < a.nseg; s++)
        if (blk >= a.seg[s].block0 && blk < a.seg[s].block0 + a.seg[s].nblocks)
            return (int)s;
    return -1;
}

/* Block blk of the norm pass: its chunk's partial sums (bias segments: the gradient itself
 * first, from the column partials) into partial[blk]. Called by whole blocks. MAXX: the most
 * parts a segment's extra may have (registers: MAXX x PER); SN: a plan with spectrally
 * normalised layers, MK: some of them pruned (fhd__opt_sn.mask; without either, its paths are
 * not compiled in); PER: fhd__opt_args.per. */
template <int MAXX, bool SN, int PER, bool MK>
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
                float w[PER], ur[PER], vc[PER], mk[PER];
#pragma unroll
                for (int k = 0; k < PER; k++) {
                    const uint64_t e = start + (uint64_t)k * OPT_THREADS + threadIdx.x;
                    const bool in = e < end;
                    const uint32_t loc = in ? (uint32_t)(e - S.off) : 0u; /* m k < 2^32 */
                    const uint32_t row = fhd_divide(L.kdiv, loc);
                    w[k] = in ? a.params[e] : 0.0f;
                    ur[k] = in ? L.u[row] : 0.0f;
                    vc[k] = in ? L.v[loc - row * L.k] : 0.0f;
                    mk[k] = MK && in && L.mask ? L.mask[loc] : 0.0f;
                }
#pragma unroll
                for (int k = 0; k < PER; k++) {
                    const double gd = g[k];
                    s1 += gd * gd;
                    s2 += gd * (double)w[k];
                    s3 += gd * (double)ur[k] * (double)vc[k];
                }
                if (MK && L.mask) { /* pruned: sum 0 is (u_i v_j)^2 over the kept entries */
#pragma unroll
                    for (int k = 0; k < PER; k++) {
                        const double uv = mk[k] != 0.0f ? (double)ur[k] * (double)vc[k] : 0.0;
                        s0 += uv * uv;
                    }
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

/* The per-segment sums of every norm block's partials, in block order (SN, MK as norm_block's),
 * then the global norm,
 * the clip coefficient, the SN gradient coefficients and Adam's bias corrections into *ci; one
 * block a launch also each segment's squared norm for detailed_metrics into slot det_slot (the
 * update's number t % 2; -1: not this block). Called by a whole block after every norm block
 * has written its partials. */
template <bool SN, bool MK>
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
     * with it its sums 1 to 3 side by side (pruned: 0 to 3), each in the same order as alone */
    for (uint32_t sg = warp; sg < a.nseg; sg += OPT_THREADS / 32) {
        const double *p = a.partial + (size_t)a.seg[sg].block0 * 4;
        if (SN && MK && a.seg[sg].sn >= 0 && a.sn[a.seg[sg].sn].mask) {
            double acc[4];
            fhd_warp_sum_strided_n<double, 4>(p, a.seg[sg].nblocks, 4, acc);
            if (lane == 0)
                for (int q = 0; q < 4; q++)
                    segsum[sg][q] = acc[q];
        } else if (SN && a.seg[sg].sn >= 0) {
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
            /* sum of (u_i v_j)^2 over the entries: |u|^2 |v|^2, or pruned the kept ones' */
            const double uu = sn_uu[l], vv = sn_vv[l];
            double part;
            if (MK && a.sn[l].mask)
                part = (double)inv * inv * segsum[s][1] - 2.0 * (double)c * inv * segsum[s][3] +
                       (double)c * c * segsum[s][0];
            else
                part = (double)inv * inv * segsum[s][1] - 2.0 * (double)c * inv * segsum[s][3] +
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

#endif
