/* diversity.cuh - the action-diversity term of one (row, branch) inside the loss kernel (config
 * diversity_coef, diversity_temperature; docs/design.md section 4), in the operations and order of
 * plugin/cpu/cpu_diversity.c: with z_k = Q_d(k) inv_t (double), lp_k = z_k - max z - log sum_k
 * exp(z_k - max z) and H = -sum_k exp(lp_k) lp_k, dL/dQ_d(k) gains (float)(g exp(lp_k) (lp_k + H)),
 * g = coef / (B D T). Double operations written uncontracted (the CPU has no FMA). Device code
 * only. */
#ifndef FHD_KERNELS_DIVERSITY_CUH
#define FHD_KERNELS_DIVERSITY_CUH

#include <stdint.h>

/* q(k): Q_d(k) as a float, k < K; add(k, v): adds v to dL/dQ_d(k). Returns H. */
template <typename QF, typename AF>
static __device__ __forceinline__ double fhd_diversity_branch(uint32_t K, double inv_t, double g,
                                                              QF q, AF add) {
    double mx = __dmul_rn((double)q(0), inv_t);
#pragma unroll 1
    for (uint32_t k = 1; k < K; k++) {
        const double z = __dmul_rn((double)q(k), inv_t);
        mx = z > mx ? z : mx;
    }
    double se = 0.0;
#pragma unroll 1
    for (uint32_t k = 0; k < K; k++)
        se = __dadd_rn(se, exp(__dsub_rn(__dmul_rn((double)q(k), inv_t), mx)));
    const double lse = log(se);
    double h = 0.0;
#pragma unroll 1
    for (uint32_t k = 0; k < K; k++) {
        const double lp = __dsub_rn(__dsub_rn(__dmul_rn((double)q(k), inv_t), mx), lse);
        h = __dsub_rn(h, __dmul_rn(exp(lp), lp));
    }
#pragma unroll 1
    for (uint32_t k = 0; k < K; k++) {
        const double lp = __dsub_rn(__dsub_rn(__dmul_rn((double)q(k), inv_t), mx), lse);
        add(k, (float)__dmul_rn(__dmul_rn(g, exp(lp)), __dadd_rn(lp, h)));
    }
    return h;
}

#endif
