/* optim.cu - global-norm clipping (with the spectral-norm gradient folded in) and the fused
 * Adam / target-update pass (see optim.cuh). Elementwise formulas mirror cpu_ops.c with
 * uncontracted float operations. */
#include <math.h>

#include "common.cuh"
#include "optim.cuh"

#define OPT_THREADS 256
#define OPT_CHUNK (OPT_THREADS * 8) /* elements per block */

static __device__ __forceinline__ int find_segment(const fhd__opt_args &a, uint32_t blk) {
    for (uint32_t s = 0; s < a.nseg; s++)
        if (blk >= a.seg[s].block0 && blk < a.seg[s].block0 + a.seg[s].nblocks)
            return (int)s;
    return -1;
}

__global__ void __launch_bounds__(OPT_THREADS)
    fhd_clip_grad_norm_kernel(const __grid_constant__ fhd__opt_args a) {
    __shared__ double red[32];
    __shared__ double segsum[FHD_OPT_MAX_SEGMENTS][4];
    double s0 = 0.0, s1 = 0.0, s2 = 0.0, s3 = 0.0;
    const int si = find_segment(a, blockIdx.x);
    if (si >= 0) {
        const fhd__opt_segment &S = a.seg[si];
        const uint64_t start = S.off + (uint64_t)(blockIdx.x - S.block0) * OPT_CHUNK;
        const uint64_t end = start + OPT_CHUNK < S.off + S.len ? start + OPT_CHUNK : S.off + S.len;
        if (S.sn < 0) {
            for (uint64_t e = start + threadIdx.x; e < end; e += OPT_THREADS) {
                const double g = a.grad[e];
                s0 += g * g;
            }
        } else {
            const fhd__opt_sn &L = a.sn[S.sn];
            for (uint64_t e = start + threadIdx.x; e < end; e += OPT_THREADS) {
                const uint64_t loc = e - S.off;
                const uint32_t r = (uint32_t)(loc / L.k), c = (uint32_t)(loc % L.k);
                const double g = a.grad[e];
                s1 += g * g;
                s2 += g * (double)a.params[e];
                s3 += g * (double)L.u[r] * (double)L.v[c];
            }
        }
    }
    s0 = fhd_block_sum_d(s0, red);
    s1 = fhd_block_sum_d(s1, red);
    s2 = fhd_block_sum_d(s2, red);
    s3 = fhd_block_sum_d(s3, red);
    if (threadIdx.x == 0) {
        double *p = a.partial + (size_t)blockIdx.x * 4;
        p[0] = s0;
        p[1] = s1;
        p[2] = s2;
        p[3] = s3;
    }
    if (!fhd_last_block_done(a.done_norm, gridDim.x))
        return;
    /* the last block: per-segment sums (warp w: segments w, w + 8, ...), in block order */
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    for (uint32_t s = warp; s < a.nseg; s += OPT_THREADS / 32) {
        for (int q = 0; q < 4; q++) {
            double acc = 0.0;
            /* lane-strided partial sums, then a fixed butterfly: deterministic */
            for (uint32_t b = lane; b < a.seg[s].nblocks; b += 32)
                acc += __ldcg(a.partial + (size_t)(a.seg[s].block0 + b) * 4 + q);
            acc = fhd_warp_sum_d(acc);
            if (lane == 0)
                segsum[s][q] = acc;
        }
    }
    __syncthreads();
    if (threadIdx.x == 0) {
        double total = 0.0;
        for (uint32_t s = 0; s < a.nseg; s++) {
            const int32_t l = a.seg[s].sn;
            if (l < 0) {
                total += segsum[s][0];
                continue;
            }
            const float sigma = *a.sn[l].sigma;
            const float inv = 1.0f / sigma;
            const float c = (float)(segsum[s][2] / ((double)sigma * sigma));
            const double uu = a.sn[l].norms[0], vv = a.sn[l].norms[1];
            double part = (double)inv * inv * segsum[s][1] - 2.0 * (double)c * inv * segsum[s][3] +
                          (double)c * c * uu * vv;
            total += part > 0.0 ? part : 0.0;
            a.clip->sn_c[l] = c;
            a.clip->sn_inv[l] = inv;
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
        a.clip->norm = norm;
        a.clip->coef = coef;
        a.clip->clip = clip;
        a.st->grad_norm = norm;
    }
}

__global__ void __launch_bounds__(OPT_THREADS)
    fhd_adam_step_kernel(const __grid_constant__ fhd__opt_args a) {
    const uint64_t t = a.st->updates + 1;
    const bool due = (t % a.target_interval) == 0;
    if (blockIdx.x < a.nblocks) {
        const int si = find_segment(a, blockIdx.x);
        if (si >= 0) {
            const fhd__opt_segment &S = a.seg[si];
            const uint64_t start = S.off + (uint64_t)(blockIdx.x - S.block0) * OPT_CHUNK;
            const uint64_t end =
                start + OPT_CHUNK < S.off + S.len ? start + OPT_CHUNK : S.off + S.len;
            const fhd__clip_info &ci = *a.clip;
            const bool clip = ci.clip != 0;
            const float coef = ci.coef;
            /* fhd__adam_step's scalars, in double and rounded once */
            const double b1d = a.beta1, b2d = a.beta2;
            const float b2 = (float)b2d;
            const float omb1 = (float)(1.0 - b1d), omb2 = (float)(1.0 - b2d);
            const double bc1 = 1.0 - pow(b1d, (double)t);
            const double bc2 = 1.0 - pow(b2d, (double)t);
            const float step = (float)(a.lr / bc1);
            const float bc2_sqrt = (float)sqrt(bc2);
            const float wd = (float)a.weight_decay;
            const float decay = (float)__dsub_rn(1.0, __dmul_rn(a.lr, a.weight_decay));
            const float *u = nullptr, *v = nullptr;
            float sc = 0.0f, sinv = 1.0f;
            uint32_t k = 1;
            if (S.sn >= 0) {
                u = a.sn[S.sn].u;
                v = a.sn[S.sn].v;
                k = a.sn[S.sn].k;
                sc = ci.sn_c[S.sn];
                sinv = ci.sn_inv[S.sn];
            }
            for (uint64_t e = start + threadIdx.x; e < end; e += OPT_THREADS) {
                float gi = a.grad[e];
                if (u) { /* fhd__sn_weight_backward */
                    const uint64_t loc = e - S.off;
                    const float cu = FHD_FMUL(sc, u[loc / k]);
                    gi = FHD_FSUB(FHD_FMUL(gi, sinv), FHD_FMUL(cu, v[loc % k]));
                }
                if (clip)
                    gi = FHD_FMUL(gi, coef);
                if (u || clip)
                    a.grad[e] = gi; /* the gradient state holds what Adam used, as on the CPU */
                float pi = a.params[e];
                if (wd != 0.0f) {
                    if (a.decoupled)
                        pi = FHD_FMUL(pi, decay);
                    else
                        gi = FHD_FADD(gi, FHD_FMUL(wd, pi));
                }
                const float m0 = a.m[e], v0 = a.v[e];
                const float mi = FHD_FADD(m0, FHD_FMUL(omb1, FHD_FSUB(gi, m0)));
                const float vi = FHD_FADD(FHD_FMUL(v0, b2), FHD_FMUL(FHD_FMUL(omb2, gi), gi));
                a.m[e] = mi;
                a.v[e] = vi;
                const float denom = FHD_FADD(__fdiv_rn(__fsqrt_rn(vi), bc2_sqrt), a.eps);
                const float pn = FHD_FSUB(pi, FHD_FMUL(step, __fdiv_rn(mi, denom)));
                a.params[e] = pn;
                if (due) { /* fhd__polyak on the fresh online value */
                    float *tg = a.params + a.P + e;
                    *tg = a.tau >= 1.0f ? pn : FHD_FADD(*tg, FHD_FMUL(a.tau, FHD_FSUB(pn, *tg)));
                }
            }
        }
    } else if (due) { /* the target keeps the online power-iteration state */
        const uint64_t start = (uint64_t)(blockIdx.x - a.nblocks) * OPT_CHUNK;
        const uint64_t end = start + OPT_CHUNK < a.sn_size ? start + OPT_CHUNK : a.sn_size;
        for (uint64_t e = start + threadIdx.x; e < end; e += OPT_THREADS)
            a.sn_vec[a.sn_size + e] = a.sn_vec[e];
    }
    if (fhd_last_block_done(a.done_adam, gridDim.x) && threadIdx.x == 0) {
        a.st->updates = t; /* every block has read the counter */
        a.st->stats_update = t;
    }
}

void fhd__cuda_opt_plan(fhd__opt_args *a) {
    uint32_t b = 0;
    for (uint32_t s = 0; s < a->nseg; s++) {
        a->seg[s].block0 = b;
        a->seg[s].nblocks = (uint32_t)fhd_cdiv(a->seg[s].len, OPT_CHUNK);
        b += a->seg[s].nblocks;
    }
    a->nblocks = b < 2 ? 2 : b;
    a->sn_blocks = (uint32_t)fhd_cdiv(a->sn_size, OPT_CHUNK);
}

cudaError_t fhd__cuda_clip_grad_norm(const fhd__opt_args *a, cudaStream_t stream) {
    fhd_clip_grad_norm_kernel<<<a->nblocks, OPT_THREADS, 0, stream>>>(*a);
    return cudaGetLastError();
}

cudaError_t fhd__cuda_adam_step(const fhd__opt_args *a, cudaStream_t stream) {
    fhd_adam_step_kernel<<<a->nblocks + a->sn_blocks, OPT_THREADS, 0, stream>>>(*a);
    return cudaGetLastError();
}

/* Load this file's kernels now (lazy module loading must not happen inside a graph
 * capture). */
cudaError_t fhd__cuda_optim_preload(void) {
    cudaFuncAttributes fa;
    cudaError_t e = cudaFuncGetAttributes(&fa, (const void *)fhd_clip_grad_norm_kernel);
    if (e != cudaSuccess)
        return e;
    e = cudaFuncGetAttributes(&fa, (const void *)fhd_adam_step_kernel);
    if (e != cudaSuccess)
        return e;
    return cudaSuccess;
}
