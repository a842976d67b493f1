/* layout_tensors.c - the named tensors of the layout: their names, shapes and views of the flat
 * buffers (layout.h). Depends on the layout struct alone, so the CUDA module compiles it in
 * (the pruning masks' views). */
#include <stdio.h>
#include <string.h>

#include "layout.h"

/* ---- named tensors ---------------------------------------------------------------------- */

/* Per network: each conv layer's W and b (torso.conv<c>), each linear layer's (torso.<l>),
 * the head split into value/advantage views. */
static uint32_t net_tensor_count(const fhd__layout *lo) {
    return 2 * lo->NC + 2 * lo->L + (lo->dueling ? 4 : 2);
}

static void net_tensor(const fhd__layout *lo, uint32_t i, const char *prefix, uint64_t base,
                       fhd__tensor_ref *t) {
    if (i < 2 * lo->NC) {
        const fhd__conv_layer *cv = &lo->conv[i / 2];
        int is_w = (i % 2) == 0;
        snprintf(t->name, sizeof t->name, "%s.torso.conv%u.%s", prefix, i / 2,
                 is_w ? "weight" : "bias");
        t->offset = base + (is_w ? cv->w_off : cv->b_off);
        t->rank = is_w ? 4 : 1;
        t->shape[0] = cv->cout;
        if (is_w) {
            t->shape[1] = cv->cin;
            t->shape[2] = cv->k;
            t->shape[3] = cv->k;
        }
        t->count = is_w ? (uint64_t)cv->cout * cv->ckk : cv->cout;
        return;
    }
    i -= 2 * lo->NC;
    if (i < 2 * lo->L) {
        const fhd__layer *ly = &lo->layers[i / 2];
        int is_w = (i % 2) == 0;
        snprintf(t->name, sizeof t->name, "%s.torso.%u.%s", prefix, i / 2, is_w ? "weight" : "bias");
        t->offset = base + (is_w ? ly->w_off : ly->b_off);
        t->rank = is_w ? 2 : 1;
        t->shape[0] = ly->out;
        t->shape[1] = is_w ? ly->in : 0;
        t->count = is_w ? (uint64_t)ly->out * ly->in : ly->out;
        return;
    }
    const fhd__layer *h = &lo->layers[lo->L];
    uint32_t j = i - 2 * lo->L;
    int is_w = (j % 2) == 0;
    const char *part;
    uint64_t row0, rows;
    if (lo->dueling && j < 2) {
        part = "value";
        row0 = 0;
        rows = 1;
    } else {
        part = lo->dueling ? "advantage" : "q";
        row0 = (uint64_t)lo->dueling;
        rows = lo->KT;
    }
    snprintf(t->name, sizeof t->name, "%s.head.%s.%s", prefix, part, is_w ? "weight" : "bias");
    t->offset = base + (is_w ? h->w_off + row0 * h->in : h->b_off + row0);
    t->rank = is_w ? 2 : 1;
    t->shape[0] = rows;
    t->shape[1] = is_w ? h->in : 0;
    t->count = is_w ? rows * h->in : rows;
}

uint32_t fhd__layout_tensor_count(const fhd__layout *lo) {
    /* online, target, grad, adam.m, adam.v; then sn u/v for online and target */
    return 5 * net_tensor_count(lo) + 4 * lo->num_sn + lo->num_masks;
}

int fhd__layout_mask(const fhd__layout *lo, uint32_t j, fhd__tensor_ref *out) {
    memset(out, 0, sizeof(*out));
    if (j >= lo->num_masks)
        return -1;
    net_tensor(lo, 2 * j, "online", 0, out); /* the weights are the even tensors of a network */
    size_t n = strlen(out->name);
    if (n + sizeof "_mask" > sizeof out->name)
        return -1;
    memcpy(out->name + n, "_mask", sizeof "_mask");
    out->buf = FHD_BUF_MASK;
    return 0;
}

int fhd__layout_tensor(const fhd__layout *lo, uint32_t i, fhd__tensor_ref *out) {
    static const char *const prefixes[5] = {"online", "target", "grad", "adam.m", "adam.v"};
    static const fhd__buf_kind bufs[5] = {FHD_BUF_PARAMS, FHD_BUF_PARAMS, FHD_BUF_GRAD,
                                          FHD_BUF_ADAM_M, FHD_BUF_ADAM_V};
    memset(out, 0, sizeof(*out));
    uint32_t nt = net_tensor_count(lo);
    if (i < 5 * nt) {
        uint32_t which = i / nt;
        uint64_t base = (which == 1) ? lo->num_params : 0;
        net_tensor(lo, i % nt, prefixes[which], base, out);
        out->buf = bufs[which];
        return 0;
    }
    i -= 5 * nt;
    if (i >= 4 * lo->num_sn)
        return fhd__layout_mask(lo, i - 4 * lo->num_sn, out);
    uint32_t net = i / (2 * lo->num_sn), r = i % (2 * lo->num_sn);
    uint32_t seen = 0;
    for (uint32_t c = 0; c < lo->NC; c++) {
        const fhd__conv_layer *cv = &lo->conv[c];
        if (!cv->sn)
            continue;
        if (seen == r / 2) {
            int is_u = (r % 2) == 0;
            snprintf(out->name, sizeof out->name, "sn.%s.torso.conv%u.%s",
                     net ? "target" : "online", c, is_u ? "u" : "v");
            out->buf = FHD_BUF_SN;
            out->offset = (net ? lo->sn_size : 0) + (is_u ? cv->u_off : cv->v_off);
            out->rank = 1;
            out->shape[0] = is_u ? cv->cout : cv->ckk;
            out->count = out->shape[0];
            return 0;
        }
        seen++;
    }
    for (uint32_t l = 0; l < lo->L; l++) {
        const fhd__layer *ly = &lo->layers[l];
        if (!ly->sn)
            continue;
        if (seen == r / 2) {
            int is_u = (r % 2) == 0;
            snprintf(out->name, sizeof out->name, "sn.%s.torso.%u.%s", net ? "target" : "online",
                     l, is_u ? "u" : "v");
            out->buf = FHD_BUF_SN;
            out->offset = (net ? lo->sn_size : 0) + (is_u ? ly->u_off : ly->v_off);
            out->rank = 1;
            out->shape[0] = is_u ? ly->out : ly->in;
            out->count = out->shape[0];
            return 0;
        }
        seen++;
    }
    return -1;
}

int fhd__layout_tensor_find(const fhd__layout *lo, const char *name, fhd__tensor_ref *out) {
    uint32_t n = fhd__layout_tensor_count(lo);
    for (uint32_t i = 0; i < n; i++) {
        if (fhd__layout_tensor(lo, i, out) == 0 && strcmp(out->name, name) == 0)
            return 0;
    }
    return -1;
}
