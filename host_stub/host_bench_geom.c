/* host_bench_geom.c - the network's shape for `fhd-host bench` and the GEMM FLOPs of one update
 * (host_bench_geom.h). bench/torch_ref_config.py counts the same way. */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "host_bench_geom.h"

/* torso "nature" (Mnih et al. 2015) as plugin/config_pixels.c expands it: {out, kernel,
 * stride}, padding 0, then hidden [512]. fhd_host_bench_geom_check compares the result with
 * the learner's tensors, so a table that drifted from the library's is an error, not a count. */
static const uint32_t nature_conv[3][3] = {{32, 8, 4}, {64, 4, 2}, {64, 3, 1}};
#define NATURE_HIDDEN 512u

json_t *fhd_host_cfg_get(json_t *cfg, json_t *manifest, const char *key) {
    json_t *v = json_object_get(cfg, key);
    if (v)
        return v;
    json_t *schema = json_object_get(json_object_get(manifest, "config_schema"), key);
    return json_object_get(schema, "default");
}

static uint32_t u32(json_t *v) {
    json_int_t x = json_integer_value(v);
    return x > 0 && x <= (json_int_t)UINT32_MAX ? (uint32_t)x : 0;
}

/* The conv layers from (C, H, W): conv list or the nature table; 0 or -1. */
static int read_conv(json_t *cfg, json_t *manifest, json_t *shape, int nature, bench_geom *g) {
    json_t *conv = fhd_host_cfg_get(cfg, manifest, "conv");
    g->NC = nature ? 3 : (uint32_t)json_array_size(conv);
    if ((g->NC && json_array_size(shape) != 3) || g->NC > BENCH_MAX_LAYERS)
        return -1;
    uint32_t c = g->NC ? u32(json_array_get(shape, 0)) : 0;
    uint32_t h = g->NC ? u32(json_array_get(shape, 1)) : 0;
    uint32_t w = g->NC ? u32(json_array_get(shape, 2)) : 0;
    for (uint32_t i = 0; i < g->NC; i++) {
        bench_conv *cv = &g->conv[i];
        json_t *it = json_array_get(conv, i);
        cv->cin = c;
        cv->cout = nature ? nature_conv[i][0] : u32(json_object_get(it, "out"));
        cv->k = nature ? nature_conv[i][1] : u32(json_object_get(it, "kernel"));
        cv->stride = nature ? nature_conv[i][2] : u32(json_object_get(it, "stride"));
        cv->pad = nature ? 0 : (uint32_t)json_integer_value(json_object_get(it, "padding"));
        if (!c || !cv->cout || !cv->k || !cv->stride || h + 2 * cv->pad < cv->k ||
            w + 2 * cv->pad < cv->k)
            return -1;
        cv->hout = (h + 2 * cv->pad - cv->k) / cv->stride + 1;
        cv->wout = (w + 2 * cv->pad - cv->k) / cv->stride + 1;
        c = cv->cout;
        h = cv->hout;
        w = cv->wout;
    }
    g->F = g->NC ? c * h * w : g->S;
    return 0;
}

int fhd_host_bench_geom(json_t *cfg, json_t *manifest, bench_geom *g) {
    memset(g, 0, sizeof(*g));
    json_t *acts = fhd_host_cfg_get(cfg, manifest, "actions"),
           *hid = fhd_host_cfg_get(cfg, manifest, "hidden");
    json_t *shape = fhd_host_cfg_get(cfg, manifest, "obs_shape"),
           *dt = fhd_host_cfg_get(cfg, manifest, "obs_dtype");
    json_t *torso = fhd_host_cfg_get(cfg, manifest, "torso");
    const int nature = json_is_string(torso) && !strcmp(json_string_value(torso), "nature");
    g->S = u32(fhd_host_cfg_get(cfg, manifest, "obs_dim"));
    if (json_array_size(shape) == 3) /* pixels: S = C*H*W */
        g->S = u32(json_array_get(shape, 0)) * u32(json_array_get(shape, 1)) *
               u32(json_array_get(shape, 2));
    g->u8 = json_is_string(dt) && strcmp(json_string_value(dt), "uint8") == 0;
    g->B = u32(fhd_host_cfg_get(cfg, manifest, "batch_size"));
    g->capacity = (uint64_t)json_integer_value(fhd_host_cfg_get(cfg, manifest, "replay_capacity"));
    g->dueling = json_is_true(fhd_host_cfg_get(cfg, manifest, "dueling"));
    g->double_dqn = json_is_true(fhd_host_cfg_get(cfg, manifest, "double_dqn"));
    g->D = (uint32_t)json_array_size(acts);
    g->L = nature ? 1 : (uint32_t)json_array_size(hid);
    if (!g->S || !g->B || !g->D || !g->L || g->L > BENCH_MAX_LAYERS)
        return -1;
    for (uint32_t d = 0; d < g->D; d++)
        g->KT += u32(json_array_get(acts, d));
    for (uint32_t l = 0; l < g->L; l++)
        g->hidden[l] = nature ? NATURE_HIDDEN : u32(json_array_get(hid, l));
    g->HO = g->KT + (uint32_t)g->dueling;
    return read_conv(cfg, manifest, shape, nature, g);
}

/* The online tensor `name`'s info, or rank 0 when the learner has none. */
static fhd_tensor_info find_tensor(const fhd_api_v1 *api, fhd_learner *L, const char *name) {
    fhd_tensor_info ti = FHD_TENSOR_INFO_INIT;
    for (uint32_t i = 0; api->tensor_info(L, i, &ti) == FHD_OK; i++)
        if (!strcmp(ti.name, name))
            return ti;
    return (fhd_tensor_info)FHD_TENSOR_INFO_INIT;
}

static int shape_is(const fhd_tensor_info *t, uint32_t rank, const uint64_t *want) {
    if (t->rank != rank)
        return 0;
    for (uint32_t i = 0; i < rank; i++)
        if (t->shape[i] != want[i])
            return 0;
    return 1;
}

int fhd_host_bench_geom_check(const fhd_api_v1 *api, fhd_learner *L, const bench_geom *g, char *why,
                              size_t cap) {
    char name[96];
    for (uint32_t c = 0; c <= g->NC; c++) {
        const int lin = c == g->NC; /* after the convs: the first linear layer */
        uint64_t want[4] = {g->hidden[0], g->F, 0, 0};
        if (lin) {
            snprintf(name, sizeof name, "online.torso.0.weight");
        } else {
            const bench_conv *cv = &g->conv[c];
            want[0] = cv->cout;
            want[1] = cv->cin;
            want[2] = want[3] = cv->k;
            snprintf(name, sizeof name, "online.torso.conv%" PRIu32 ".weight", c);
        }
        fhd_tensor_info t = find_tensor(api, L, name);
        if (!shape_is(&t, lin ? 2 : 4, want)) {
            snprintf(why, cap,
                     "%s: the config gives shape (%" PRIu64 ", %" PRIu64 "%s), the learner "
                     "has rank %" PRIu32 " (%" PRIu64 ", %" PRIu64 ", ...)",
                     name, want[0], want[1], lin ? "" : ", k, k", t.rank, t.shape[0], t.shape[1]);
            return -1;
        }
    }
    return 0;
}

/* GEMM floating-point operations of one update (2 per multiply-add). Every layer counts as the
 * GEMM it is: linear l maps in_l -> out_l (f_l = 2 in_l out_l per sample; in_0 = F, torso
 * widths H_l, head out = KT + dueling); conv c is im2col's GEMM, f_c = 2 hout wout cout cin k k
 * per image. With the layers in order (convs first) and f_0 the first one's:
 *   F = B sum_l f_l                              one forward pass over the batch
 *   forwards:  online(s), target(s'), and online(s') when double DQN: (2 + double) F
 *   backward:  dW of every layer (F) and dx of every layer but the first (F - B f_0)
 *   total = (4 + double) F - B f_0.
 * Not counted: the spectral-norm matrix-vector products (O(in out) each, not O(B in out)),
 * im2col/col2im copies, the uint8 conversion, elementwise work (bias, ReLU, loss, clipping,
 * Adam) and the sampling. */
double fhd_host_bench_flops(const bench_geom *g) {
    double f = 0.0, f0 = 0.0, in = g->F;
    for (uint32_t c = 0; c < g->NC; c++) {
        const bench_conv *cv = &g->conv[c];
        const double fc = 2.0 * cv->hout * cv->wout * cv->cout * cv->cin * cv->k * cv->k;
        f0 = c == 0 ? fc : f0;
        f += fc;
    }
    for (uint32_t l = 0; l <= g->L; l++) {
        double out = l < g->L ? g->hidden[l] : g->HO;
        const double fl = 2.0 * in * out;
        f0 = g->NC == 0 && l == 0 ? fl : f0;
        f += fl;
        in = out;
    }
    return (4.0 + g->double_dqn) * g->B * f - g->B * f0;
}
