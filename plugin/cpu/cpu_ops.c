/* cpu_ops.c - the reference operations (see cpu_ops.h). GEMMs through CBLAS (OpenBLAS). */
#include "cpu_ops.h"

#include <cblas.h>
#include <math.h>
#include <string.h>

#include "bf16.h"

FHD_CPU_SIMD void fhd__bf16_round_n(float *dst, const float *src, uint64_t n) {
    for (uint64_t i = 0; i < n; i++)
        dst[i] = fhd__bf16_round(src[i]);
}

/* y (B, out) += b per row, then ReLU if relu. */
FHD_CPU_SIMD static void bias_act(float *restrict y, const float *restrict b, uint32_t B,
                                  uint32_t out, int relu) {
    for (uint32_t i = 0; i < B; i++) {
        float *row = y + (size_t)i * out;
        if (relu) {
            for (uint32_t j = 0; j < out; j++) {
                float z = row[j] + b[j];
                row[j] = z > 0.0f ? z : 0.0f;
            }
        } else {
            for (uint32_t j = 0; j < out; j++)
                row[j] += b[j];
        }
    }
}

void fhd__linear_forward(float *y, const float *x, const float *W, const float *b, uint32_t B,
                         uint32_t in, uint32_t out, int relu, const fhd__gemm_mode *m) {
    /* y (B, out) = alpha x (B, in) . W^T (in, out); one row (act on one observation) as
     * y^T (out, 1) = alpha W x^T, which OpenBLAS computes faster (its Haswell kernels pad a
     * one-row A) and, there and in its AVX-512 kernels, to the same bits */
    if (B == 1)
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)out, 1, (int)in, m->alpha, W,
                    (int)in, x, 1, 0.0f, y, 1);
    else
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)B, (int)out, (int)in, m->alpha, x,
                    (int)in, W, (int)in, 0.0f, y, (int)out);
    bias_act(y, b, B, out, relu);
    if (m->bf16 && relu) /* a hidden layer's output: the next GEMM's bf16 operand */
        fhd__bf16_round_n(y, y, (uint64_t)B * out);
}

/* db (out) = sum of the rows of dy (B, out), in row order; with h (B, out), the layer's ReLU
 * output, first dy = dy * (h > 0) in place, row by row in the same pass, and with round16 that
 * value rounded to bf16 before it is summed. */
FHD_CPU_SIMD static void bias_grad(float *restrict db, float *restrict dy, const float *restrict h,
                                   uint32_t B, uint32_t out, int round16) {
    memset(db, 0, sizeof(float) * out);
    for (uint32_t i = 0; i < B; i++) {
        float *row = dy + (size_t)i * out;
        if (h && round16) {
            const float *hr = h + (size_t)i * out;
            for (uint32_t j = 0; j < out; j++) {
                row[j] = fhd__bf16_round(hr[j] > 0.0f ? row[j] : 0.0f);
                db[j] += row[j];
            }
        } else if (h) {
            const float *hr = h + (size_t)i * out;
            for (uint32_t j = 0; j < out; j++) {
                row[j] = hr[j] > 0.0f ? row[j] : 0.0f;
                db[j] += row[j];
            }
        } else {
            for (uint32_t j = 0; j < out; j++)
                db[j] += row[j];
        }
    }
}

void fhd__linear_backward(float *dx, float *dW, float *db, float *dy, const float *h,
                          const float *x, const float *W, uint32_t B, uint32_t in, uint32_t out,
                          const fhd__gemm_mode *m) {
    /* bf16: a hidden layer's db sums the rounded dz that its GEMMs read; the head's the fp32
     * dy, rounded after */
    bias_grad(db, dy, h, B, out, m->bf16 && h);
    if (m->bf16 && !h)
        fhd__bf16_round_n(dy, dy, (uint64_t)B * out);
    /* dW (out, in) = dy^T (out, B) . x (B, in) */
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, (int)out, (int)in, (int)B, 1.0f, dy,
                (int)out, x, (int)in, 0.0f, dW, (int)in);
    if (dx) /* dx (B, in) = alpha dy (B, out) . W (out, in) */
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)B, (int)in, (int)out, m->alpha,
                    dy, (int)out, W, (int)in, 0.0f, dx, (int)in);
}

FHD_CPU_SIMD void fhd__relu_backward(float *restrict dy, const float *restrict h, uint64_t n) {
    for (uint64_t i = 0; i < n; i++) /* a select, not a branch: vectorises */
        dy[i] = h[i] > 0.0f ? dy[i] : 0.0f;
}

void fhd__head_combine(float *q, const float *out, const fhd__layout *lo, uint32_t B) {
    const uint32_t HO = lo->head_out, KT = lo->KT;
    if (!lo->dueling) { /* HO == KT: the outputs are Q */
        memcpy(q, out, sizeof(float) * B * KT);
        return;
    }
    for (uint32_t i = 0; i < B; i++) {
        const float *o = out + (size_t)i * HO;
        float *qi = q + (size_t)i * KT;
        const float v = o[0];
        for (uint32_t d = 0; d < lo->D; d++) {
            const float *a = o + 1 + lo->k_off[d];
            float s = 0.0f;
            for (uint32_t k = 0; k < lo->K[d]; k++)
                s += a[k];
            const float mean = s / (float)lo->K[d];
            for (uint32_t k = 0; k < lo->K[d]; k++)
                qi[lo->k_off[d] + k] = v + (a[k] - mean);
        }
    }
}

void fhd__head_combine_backward(float *dout, const float *dq, const fhd__layout *lo, uint32_t B) {
    const uint32_t HO = lo->head_out, KT = lo->KT;
    if (!lo->dueling) { /* HO == KT */
        memcpy(dout, dq, sizeof(float) * B * KT);
        return;
    }
    for (uint32_t i = 0; i < B; i++) {
        const float *g = dq + (size_t)i * KT;
        float *o = dout + (size_t)i * HO;
        float dv = 0.0f;
        for (uint32_t d = 0; d < lo->D; d++) {
            const float *gd = g + lo->k_off[d];
            float s = 0.0f;
            for (uint32_t k = 0; k < lo->K[d]; k++)
                s += gd[k];
            dv += s;
            const float mean = s / (float)lo->K[d];
            for (uint32_t k = 0; k < lo->K[d]; k++)
                o[1 + lo->k_off[d] + k] = gd[k] - mean;
        }
        o[0] = dv;
    }
}

void fhd__argmax_branches(int32_t *a, const float *q, const fhd__layout *lo, uint32_t B) {
    for (uint32_t i = 0; i < B; i++) {
        const float *qi = q + (size_t)i * lo->KT;
        for (uint32_t d = 0; d < lo->D; d++) {
            const float *qd = qi + lo->k_off[d];
            uint32_t best = 0;
            for (uint32_t k = 1; k < lo->K[d]; k++)
                if (qd[k] > qd[best])
                    best = k;
            a[(size_t)i * lo->D + d] = (int32_t)best;
        }
    }
}

/* x / max(||x||, 1e-12), as torch.nn.functional.normalize */
static void normalize(float *x, uint32_t n) {
    double s = 0.0;
    for (uint32_t i = 0; i < n; i++)
        s += (double)x[i] * x[i];
    double nrm = sqrt(s);
    float inv = (float)(1.0 / (nrm > 1e-12 ? nrm : 1e-12));
    for (uint32_t i = 0; i < n; i++)
        x[i] *= inv;
}

float fhd__sn_sigma(const float *W, const float *u, const float *v, uint32_t m, uint32_t k,
                    float *tmp) {
    /* tmp (m) = W v; sigma = u . tmp */
    cblas_sgemv(CblasRowMajor, CblasNoTrans, (int)m, (int)k, 1.0f, W, (int)k, v, 1, 0.0f, tmp, 1);
    double s = 0.0;
    for (uint32_t i = 0; i < m; i++)
        s += (double)u[i] * tmp[i];
    return (float)s;
}

float fhd__sn_power_iteration(const float *W, float *u, float *v, uint32_t m, uint32_t k,
                              float *tmp) {
    /* torch.nn.utils.parametrizations.spectral_norm order: u first, then v */
    /* u = normalize(W v) */
    cblas_sgemv(CblasRowMajor, CblasNoTrans, (int)m, (int)k, 1.0f, W, (int)k, v, 1, 0.0f, u, 1);
    normalize(u, m);
    /* v = normalize(W^T u) */
    cblas_sgemv(CblasRowMajor, CblasTrans, (int)m, (int)k, 1.0f, W, (int)k, u, 1, 0.0f, v, 1);
    normalize(v, k);
    return fhd__sn_sigma(W, u, v, m, k, tmp);
}

FHD_CPU_SIMD void fhd__sn_scale(float *Wsn, const float *W, float sigma, uint64_t n) {
    for (uint64_t i = 0; i < n; i++)
        Wsn[i] = W[i] / sigma;
}

void fhd__sn_weight_backward(float *g, const float *W, const float *u, const float *v, float sigma,
                             uint32_t m, uint32_t k) {
    const uint64_t n = (uint64_t)m * k;
    double gw = 0.0;
    for (uint64_t i = 0; i < n; i++)
        gw += (double)g[i] * W[i];
    const float c = (float)(gw / ((double)sigma * sigma));
    const float inv = 1.0f / sigma;
    for (uint32_t i = 0; i < m; i++) {
        float *gi = g + (size_t)i * k;
        const float cu = c * u[i];
        for (uint32_t j = 0; j < k; j++)
            gi[j] = gi[j] * inv - cu * v[j];
    }
}

void fhd__td_target(float *y, const float *r, const float *disc, const float *qt, const float *sel,
                    const fhd__layout *lo, uint32_t B) {
    for (uint32_t i = 0; i < B; i++) {
        const float *qi = qt + (size_t)i * lo->KT;
        const float *si = sel + (size_t)i * lo->KT;
        float acc = 0.0f;
        for (uint32_t d = 0; d < lo->D; d++) {
            const uint32_t o = lo->k_off[d];
            uint32_t best = 0;
            for (uint32_t k = 1; k < lo->K[d]; k++)
                if (si[o + k] > si[o + best])
                    best = k;
            acc += qi[o + best];
        }
        y[i] = r[i] + disc[i] * (acc / (float)lo->D);
    }
}

float fhd__td_loss(float *dq, float *td, const float *q, const int32_t *actions, const float *y,
                   const float *w, const fhd__layout *lo, uint32_t B, const fhd__loss_params *p,
                   float *td_abs_mean, float *q_mean) {
    const uint32_t D = lo->D, KT = lo->KT;
    const float scale = 1.0f / ((float)B * (float)D); /* (1/B) (1/D) */
    double loss = 0.0, abs_sum = 0.0, q_sum = 0.0, cql = 0.0;
    for (uint32_t i = 0; i < B; i++) {
        const float *qi = q + (size_t)i * KT;
        float *gi = dq + (size_t)i * KT;
        for (uint32_t d = 0; d < D; d++) {
            const uint32_t o = lo->k_off[d], K = lo->K[d];
            const int32_t a = actions[(size_t)i * D + d];
            const float qa = qi[o + (uint32_t)a];
            const float delta = qa - y[i];
            td[(size_t)i * D + d] = delta;
            abs_sum += fabsf(delta);
            q_sum += qa;
            float l, dl;
            if (p->huber) {
                const float ad = fabsf(delta);
                if (ad <= p->delta) {
                    l = 0.5f * delta * delta;
                    dl = delta;
                } else {
                    l = p->delta * (ad - 0.5f * p->delta);
                    dl = delta > 0.0f ? p->delta : -p->delta;
                }
            } else {
                l = delta * delta;
                dl = 2.0f * delta;
            }
            loss += (double)w[i] * l;
            for (uint32_t k = 0; k < K; k++)
                gi[o + k] = 0.0f;
            gi[o + (uint32_t)a] = w[i] * dl * scale;
            if (p->cql_alpha > 0.0f) { /* alpha * (logsumexp_a Q - Q(a_taken)) */
                float mx = qi[o];
                for (uint32_t k = 1; k < K; k++)
                    mx = qi[o + k] > mx ? qi[o + k] : mx;
                double se = 0.0;
                for (uint32_t k = 0; k < K; k++)
                    se += exp((double)(qi[o + k] - mx));
                const double lse = (double)mx + log(se);
                cql += lse - qa;
                for (uint32_t k = 0; k < K; k++) {
                    const float sm = (float)(exp((double)(qi[o + k] - mx)) / se);
                    gi[o + k] += p->cql_alpha * sm * scale;
                }
                gi[o + (uint32_t)a] -= p->cql_alpha * scale;
            }
        }
    }
    const double n = (double)B * D;
    *td_abs_mean = (float)(abs_sum / n);
    *q_mean = (float)(q_sum / n);
    return (float)(loss / n + (double)p->cql_alpha * cql / n);
}

FHD_CPU_SIMD static void scale_n(float *g, uint64_t n, float c) {
    for (uint64_t i = 0; i < n; i++)
        g[i] *= c;
}

/* sum of g[i]^2 (n) in double, in FHD_SUMSQ_LANES interleaved partial sums (element i goes to
 * sum i mod LANES), folded in halves at the end (s[j] += s[j + w], w = LANES/2 .. 1): a fixed
 * order, so the same bits on every run and clone, and independent chains that vectorise (one
 * running sum is bound by the add latency). */
#define FHD_SUMSQ_LANES 16
FHD_CPU_SIMD static double sum_squares(const float *g, uint64_t n) {
    double s[FHD_SUMSQ_LANES] = {0.0};
    uint64_t i = 0;
    for (; i + FHD_SUMSQ_LANES <= n; i += FHD_SUMSQ_LANES)
        for (uint32_t j = 0; j < FHD_SUMSQ_LANES; j++)
            s[j] += (double)g[i + j] * g[i + j];
    for (uint32_t j = 0; i < n; i++, j++)
        s[j] += (double)g[i] * g[i];
    for (uint32_t w = FHD_SUMSQ_LANES / 2; w > 0; w /= 2)
        for (uint32_t j = 0; j < w; j++)
            s[j] += s[j + w];
    return s[0];
}

float fhd__clip_grad_norm(float *g, uint64_t n, float max_norm) {
    const float norm = (float)sqrt(sum_squares(g, n));
    if (max_norm > 0.0f) {
        const float coef = max_norm / (norm + 1e-6f);
        if (coef < 1.0f)
            scale_n(g, n, coef);
    }
    return norm;
}

FHD_CPU_SIMD void fhd__adam_step(float *p, const float *g, float *m, float *v, uint64_t n,
                                 uint64_t t, const fhd__adam_params *ap) {
    /* Scalars in double and rounded once, as PyTorch computes them from Python floats:
     * 1 - beta^t in fp32 would cancel badly for beta2 = 0.999 and small t. */
    const double b1d = ap->beta1, b2d = ap->beta2;
    const float b2 = (float)b2d;
    const float one_b1 = (float)(1.0 - b1d), one_b2 = (float)(1.0 - b2d);
    const double bc1 = 1.0 - pow(b1d, (double)t);
    const double bc2 = 1.0 - pow(b2d, (double)t);
    const float step = (float)(ap->lr / bc1);
    const float bc2_sqrt = (float)sqrt(bc2);
    const float wd = (float)ap->weight_decay;
    const float decay = (float)(1.0 - ap->lr * ap->weight_decay);
    for (uint64_t i = 0; i < n; i++) {
        float gi = g[i];
        float pi = p[i];
        if (wd != 0.0f) {
            if (ap->decoupled)
                pi *= decay;
            else
                gi += wd * pi;
        }
        const float mi = m[i] + one_b1 * (gi - m[i]); /* torch lerp_ */
        const float vi = v[i] * b2 + one_b2 * gi * gi;
        m[i] = mi;
        v[i] = vi;
        const float denom = sqrtf(vi) / bc2_sqrt + ap->eps;
        p[i] = pi - step * (mi / denom);
    }
}

FHD_CPU_SIMD void fhd__polyak(float *tgt, const float *src, uint64_t n, float tau) {
    if (tau >= 1.0f) {
        memcpy(tgt, src, sizeof(float) * n);
        return;
    }
    for (uint64_t i = 0; i < n; i++)
        tgt[i] = tgt[i] + tau * (src[i] - tgt[i]); /* torch lerp_(src, tau) */
}
