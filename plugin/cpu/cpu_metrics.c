/* cpu_metrics.c - config detailed_metrics on the CPU (docs/design.md section 4, Metrics): from
 * what one update already computed, into a pending record that the update publishes with its
 * other statistics when it is applied. */
#include <math.h>

#include "cpu_internal.h"

/* sqrt of the sum of squares of n floats, summed in double. */
static float norm2(const float *x, uint64_t n) {
    double s = 0.0;
    for (uint64_t i = 0; i < n; i++)
        s += (double)x[i] * x[i];
    return (float)sqrt(s);
}

void fhd__cpu_detailed_metrics(fhd__backend *b, const float *grad, const float *sel, uint32_t B,
                               fhd__update_stats *m) {
    const fhd__layout *lo = &b->lo;
    uint32_t n = 0;
    for (uint32_t c = 0; c < lo->NC; c++) { /* W and b of each layer: one norm */
        const fhd__conv_layer *cv = &lo->conv[c];
        const float w = norm2(grad + cv->w_off, (uint64_t)cv->cout * cv->ckk);
        const float bb = norm2(grad + cv->b_off, cv->cout);
        m->layer_grad_norm[n++] = sqrtf(w * w + bb * bb);
    }
    for (uint32_t l = 0; l <= lo->L; l++) {
        const fhd__layer *ly = &lo->layers[l];
        const double w = norm2(grad + ly->w_off, (uint64_t)ly->out * ly->in);
        const double bb = norm2(grad + ly->b_off, ly->out);
        m->layer_grad_norm[n++] = (float)sqrt(w * w + bb * bb);
    }
    m->n_layers = n;
    /* the head (HO, H): branch d's actions are rows dueling + k_off[d] .. + K_d */
    const fhd__layer *hd = &lo->layers[lo->L];
    for (uint32_t d = 0; d < lo->D; d++) {
        const uint64_t r0 = (uint64_t)lo->dueling + lo->k_off[d], len = (uint64_t)lo->K[d] * hd->in;
        m->head_weight_norm[d] = norm2(b->params + hd->w_off + r0 * hd->in, len);
        m->head_grad_norm[d] = norm2(grad + hd->w_off + r0 * hd->in, len);
    }
    /* q_delta: online(s') against target(s') at the online network's greedy a*_d (the first
     * maximum, as the TD target picks it) */
    if (!sel) {
        m->q_delta = NAN;
        return;
    }
    double s = 0.0;
    for (uint32_t i = 0; i < B; i++)
        for (uint32_t d = 0; d < lo->D; d++) {
            const float *o = sel + (size_t)i * lo->KT + lo->k_off[d];
            uint32_t best = 0;
            for (uint32_t k = 1; k < lo->K[d]; k++)
                if (o[k] > o[best])
                    best = k;
            const float t = b->qt[(size_t)i * lo->KT + lo->k_off[d] + best];
            s += fabs((double)o[best] - (double)t);
        }
    m->q_delta = (float)(s / ((double)B * lo->D));
}
