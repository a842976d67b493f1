/* layout.c - flat-buffer layout of the network and initial parameters (the named tensors:
 * layout_tensors.c). */
#include "layout.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "philox.h"

int fhd__layout_init(fhd__layout *lo, const fhd__config *cfg) {
    memset(lo, 0, sizeof(*lo));
    lo->S = cfg->obs_dim;
    lo->D = cfg->num_branches;
    lo->L = cfg->num_hidden;
    lo->dueling = cfg->dueling ? 1 : 0;
    uint32_t kt = 0;
    for (uint32_t d = 0; d < lo->D; d++) {
        lo->K[d] = cfg->actions[d];
        lo->k_off[d] = kt;
        kt += cfg->actions[d];
    }
    lo->KT = kt;
    lo->head_out = kt + (uint32_t)lo->dueling;
    uint64_t off = 0, sn_off = 0;
    uint32_t in = lo->S, maxw = lo->S;
    lo->NC = cfg->num_conv;
    for (uint32_t c = 0; c < lo->NC; c++) {
        fhd__conv_layer *cv = &lo->conv[c];
        uint32_t oc, oh, ow;
        if (fhd__config_conv_in(cfg, c, &cv->cin, &cv->hin, &cv->win) != 0 ||
            fhd__config_conv_in(cfg, c + 1, &oc, &oh, &ow) != 0)
            return -1;
        cv->cout = oc;
        cv->hout = oh;
        cv->wout = ow;
        cv->k = cfg->conv[c].kernel;
        cv->stride = cfg->conv[c].stride;
        cv->pad = cfg->conv[c].padding;
        cv->ckk = cv->cin * cv->k * cv->k;
        cv->hw = oh * ow;
        cv->w_off = off;
        off += (uint64_t)cv->cout * cv->ckk;
        cv->b_off = off;
        off += cv->cout;
        cv->sn = cfg->spectral_norm == FHD_SN_ALL;
        if (cv->sn) {
            cv->u_off = sn_off;
            cv->v_off = sn_off + cv->cout;
            sn_off += (uint64_t)cv->cout + cv->ckk;
            lo->num_sn++;
        }
        const uint32_t a_in = cv->cin * cv->hin * cv->win, a_out = cv->cout * cv->hw;
        lo->conv_max_act = a_in > lo->conv_max_act ? a_in : lo->conv_max_act;
        lo->conv_max_act = a_out > lo->conv_max_act ? a_out : lo->conv_max_act;
        if ((uint64_t)cv->ckk * cv->hw > lo->conv_max_col)
            lo->conv_max_col = cv->ckk * cv->hw;
        in = a_out; /* flattened (C, H, W) */
    }
    maxw = in > maxw ? in : maxw;
    for (uint32_t l = 0; l <= lo->L; l++) {
        fhd__layer *ly = &lo->layers[l];
        ly->in = in;
        ly->out = (l < lo->L) ? cfg->hidden[l] : lo->head_out;
        ly->w_off = off;
        off += (uint64_t)ly->out * ly->in;
        ly->b_off = off;
        off += ly->out;
        ly->sn = l < lo->L && (cfg->spectral_norm == FHD_SN_ALL ||
                               (cfg->spectral_norm == FHD_SN_LAST && l == lo->L - 1));
        if (ly->sn) {
            ly->u_off = sn_off;
            ly->v_off = sn_off + ly->out;
            sn_off += (uint64_t)ly->out + ly->in;
            lo->num_sn++;
        }
        if (ly->out > maxw)
            maxw = ly->out;
        in = ly->out;
    }
    lo->num_params = off;
    lo->sn_size = sn_off;
    if (cfg->prune_sparsity > 0.0) /* weights of the conv and linear torso [and the head] */
        lo->num_masks = lo->NC + lo->L +
                        (cfg->prune_scope == FHD_PRUNE_ALL ? (lo->dueling ? 2u : 1u) : 0u);
    lo->max_width = maxw;
    return off > (UINT64_C(1) << 31) ? -1 : 0;
}

/* U(-bound, bound) for every float of [begin, end), by counter (flat index). */
static void init_range(uint64_t seed, uint64_t begin, uint64_t end, float bound, float *params) {
    for (uint64_t i = begin; i < end; i++) {
        fhd__u32x4 r = fhd__rng_draw(seed, FHD_RNG_STREAM_INIT, i, 0);
        float u = fhd__rng_u01f(r.v[0]); /* [0, 1) */
        params[i] = (2.0f * u - 1.0f) * bound;
    }
}

void fhd__layout_init_params(const fhd__layout *lo, uint64_t seed, float *params) {
    /* nn.Conv2d's defaults are nn.Linear's with fan_in = cin k k */
    for (uint32_t c = 0; c < lo->NC; c++) {
        const fhd__conv_layer *cv = &lo->conv[c];
        init_range(seed, cv->w_off, cv->b_off + cv->cout, (float)(1.0 / sqrt((double)cv->ckk)),
                   params);
    }
    for (uint32_t l = 0; l <= lo->L; l++) {
        const fhd__layer *ly = &lo->layers[l];
        const float bound = (float)(1.0 / sqrt((double)ly->in));
        uint64_t end = ly->b_off + ly->out; /* W then b are contiguous */
        for (uint64_t i = ly->w_off; i < end; i++) {
            fhd__u32x4 r = fhd__rng_draw(seed, FHD_RNG_STREAM_INIT, i, 0);
            float u = fhd__rng_u01f(r.v[0]); /* [0, 1) */
            params[i] = (2.0f * u - 1.0f) * bound;
        }
    }
}

/* Standard normal by Box-Muller from two 32-bit draws (host only: init is computed here for
 * every backend). */
static double normal_draw(uint64_t seed, uint64_t n) {
    fhd__u32x4 r = fhd__rng_draw(seed, FHD_RNG_STREAM_SN_INIT, n, 0);
    double u1 = fhd__rng_u01d(r.v[0], r.v[1]);
    double u2 = fhd__rng_u01d(r.v[2], r.v[3]);
    return sqrt(-2.0 * log(1.0 - u1)) * cos(6.283185307179586 * u2);
}

static void normalize(double *x, uint32_t n) {
    double s = 0;
    for (uint32_t i = 0; i < n; i++)
        s += x[i] * x[i];
    double nrm = sqrt(s);
    if (nrm < 1e-12)
        nrm = 1e-12; /* torch.nn.functional.normalize eps */
    for (uint32_t i = 0; i < n; i++)
        x[i] /= nrm;
}

int fhd__layout_init_sn(const fhd__layout *lo, uint64_t seed, const float *params, float *sn) {
    /* conv layers (W as (cout, cin k k)), then the linear torso layers */
    for (uint32_t li = 0; li < lo->NC + lo->L; li++) {
        fhd__layer conv_as_matrix;
        const fhd__layer *ly = &lo->layers[li < lo->NC ? 0 : li - lo->NC];
        if (li < lo->NC) {
            const fhd__conv_layer *cv = &lo->conv[li];
            conv_as_matrix = (fhd__layer){cv->ckk, cv->cout, cv->w_off, cv->b_off,
                                          cv->sn,  cv->u_off, cv->v_off};
            ly = &conv_as_matrix;
        }
        if (!ly->sn)
            continue;
        const uint32_t m = ly->out, k = ly->in;
        const float *W = params + ly->w_off; /* (m, k) */
        double *heap = (double *)malloc(sizeof(double) * ((size_t)m + k));
        if (!heap)
            return -1;
        double *pu = heap, *pv = heap + m;
        for (uint32_t i = 0; i < m; i++)
            pu[i] = normal_draw(seed, ly->u_off + i);
        for (uint32_t j = 0; j < k; j++)
            pv[j] = normal_draw(seed, ly->v_off + j);
        normalize(pu, m);
        normalize(pv, k);
        for (int it = 0; it < 15; it++) { /* PyTorch runs 15 iterations at registration */
            for (uint32_t i = 0; i < m; i++) { /* u = normalize(W v) */
                double s = 0;
                for (uint32_t j = 0; j < k; j++)
                    s += (double)W[(size_t)i * k + j] * pv[j];
                pu[i] = s;
            }
            normalize(pu, m);
            for (uint32_t j = 0; j < k; j++) { /* v = normalize(W^T u) */
                double s = 0;
                for (uint32_t i = 0; i < m; i++)
                    s += (double)W[(size_t)i * k + j] * pu[i];
                pv[j] = s;
            }
            normalize(pv, k);
        }
        for (uint32_t i = 0; i < m; i++)
            sn[ly->u_off + i] = (float)pu[i];
        for (uint32_t j = 0; j < k; j++)
            sn[ly->v_off + j] = (float)pv[j];
        free(heap);
    }
    return 0;
}
