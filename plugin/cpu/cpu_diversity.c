/* cpu_diversity.c - the action-diversity term of the loss (config diversity_coef,
 * diversity_temperature; docs/design.md section 4):
 *   loss -= coef * (1/(B D)) sum_i sum_d H(softmax(Q_d(s_i, .) / T)),  H(p) = -sum_a p_a log p_a
 * with dL/dQ_d(s_i, a) = coef / (B D T) * p_a (log p_a + H) added into dq (B, KT). Sums in
 * double; the softmax with its maximum subtracted. Returns the mean entropy. */
#include <math.h>

#include "cpu_internal.h"

float fhd__diversity_term(float *dq, const float *q, const fhd__layout *lo, uint32_t B, float coef,
                          float temp) {
    const uint32_t D = lo->D, KT = lo->KT;
    const double inv_t = 1.0 / (double)temp;
    const double g = (double)coef / ((double)B * D * temp);
    double hsum = 0.0;
    for (uint32_t i = 0; i < B; i++)
        for (uint32_t d = 0; d < D; d++) {
            const float *qi = q + (size_t)i * KT + lo->k_off[d];
            float *gi = dq + (size_t)i * KT + lo->k_off[d];
            const uint32_t K = lo->K[d];
            double mx = qi[0] * inv_t;
            for (uint32_t k = 1; k < K; k++)
                mx = qi[k] * inv_t > mx ? qi[k] * inv_t : mx;
            double se = 0.0;
            for (uint32_t k = 0; k < K; k++)
                se += exp(qi[k] * inv_t - mx);
            const double lse = log(se);
            double h = 0.0;
            for (uint32_t k = 0; k < K; k++) {
                const double lp = qi[k] * inv_t - mx - lse;
                h -= exp(lp) * lp;
            }
            for (uint32_t k = 0; k < K; k++) {
                const double lp = qi[k] * inv_t - mx - lse;
                gi[k] += (float)(g * exp(lp) * (lp + h));
            }
            hsum += h;
        }
    return (float)(hsum / ((double)B * D));
}
