/* cuda_plan.cpp - the update's plan from the layout, the config and the device (cuda_plan.h),
 * and the plan as JSON (the metrics' "plan", `fhd-host bench --print-plan`). */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "cuda_internal.h"
#include "linear.cuh"

/* The size limits of the rules (cuda_plan.h says what each one picks). */
#define FHD_SPLIT_MAX_MNK (1u << 24) /* larger GEMMs fill the card with one launch */
#define FHD_SPLIT_MIN_K 128          /* below, a GEMM's time is its launch and drain */
static_assert(FHD_DW0_MAX_PARTS - 1 <= FHD_OPT_MAX_EXTRA,
              "the norm pass adds every chunk's dW_0 partial after the first");

int fhd__cuda_head_narrow(const fhd__layout *lo, uint64_t rows) {
    const fhd__layer *head = &lo->layers[lo->L];
    return head->out <= FHD_NARROW_MAX_OUT && rows * head->in <= FHD_NARROW_MAX_X;
}

void fhd__cuda_plan_make(const fhd__layout *lo, const fhd__config *cfg, const fhd__cuda_device *dev,
                         fhd__cuda_plan *p) {
    (void)dev; /* no rule depends on the device yet; the GEMM choices do (cuda_gemm.cpp) */
    memset(p, 0, sizeof *p);
    p->layers = lo->L + 1;
    p->conv_layers = lo->NC;
    const uint64_t B = cfg->batch_size;
    const uint64_t rows_on = cfg->double_dqn ? 2 * B : B;
    const int has_sn = lo->num_sn > 0;
    p->tf32_fwd =
        cfg->matmul_precision == FHD_PREC_TF32_FORWARD || cfg->matmul_precision == FHD_PREC_TF32;
    p->tf32_bwd = cfg->matmul_precision == FHD_PREC_TF32;
    p->bf16 = cfg->matmul_precision == FHD_PREC_BF16;
    p->gather_bf16 = p->bf16 && lo->NC == 0;
    for (uint32_t l = 1; l < lo->L; l++) { /* dx of a torso layer above layer 0 */
        const uint64_t m = lo->layers[l].in, k = lo->layers[l].out;
        p->split_dx[l] = k % 16 == 0 && k >= FHD_SPLIT_MIN_K && m * B * k <= FHD_SPLIT_MAX_MNK;
    }
    const uint64_t m0 = lo->layers[0].in, n0 = lo->layers[0].out;
    p->split_dw0 =
        lo->L >= 1 && B % 16 == 0 && B >= FHD_SPLIT_MIN_K && m0 * n0 * B <= FHD_SPLIT_MAX_MNK;
    /* layer 0's ReLU-backward kernel exists only with a layer above it (with one hidden layer
     * the loss kernel's dx may make dz_0) */
    /* (not below a conv torso: the conv backward needs dz_0, which the fused kernel does not
     * write) */
    p->fuse_dw0 = !p->bf16 && lo->NC == 0 && lo->L >= 2 && m0 <= FHD_DW0_MAX_IN &&
                  fhd__cuda_relu_dw_chunks(cfg->batch_size) <= FHD_DW0_MAX_PARTS;
    if (p->fuse_dw0)
        p->split_dw0 = 0;
    for (uint32_t l = 1; l <= lo->L; l++)
        p->dx16[l] = p->bf16 && !p->split_dx[l];
    p->split_any = p->split_dw0;
    for (uint32_t l = 0; l < FHD_MAXL; l++)
        p->split_any |= p->split_dx[l];
    for (uint32_t l = 0; l < FHD_MAXL; l++)
        p->dz_t[l] = p->tf32_bwd && l >= 1 && l < lo->L && B % 4 == 0;
    /* (not below a conv torso: the two networks' inputs are two conv stacks' outputs) */
    p->pair_fwd0 = lo->NC == 0 && lo->L >= 1 && !has_sn && rows_on * n0 * m0 <= FHD_SPLIT_MAX_MNK;
    p->head_narrow_on = !p->bf16 && fhd__cuda_head_narrow(lo, rows_on);
    p->head_narrow_tg = !p->bf16 && fhd__cuda_head_narrow(lo, B);
    p->head_in_loss = lo->L >= 1 && p->head_narrow_on && p->head_narrow_tg;
    p->pad_head = p->bf16;
    p->prune = lo->num_masks > 0;
    p->w16_opt = p->bf16 && !p->prune && !p->fuse_dw0;
    p->use_aux = p->split_any;
    p->use_tree = cfg->replay == FHD_REPLAY_PRIORITIZED;
    p->autotune = cfg->autotune == FHD_TUNE_FULL   ? FHD_AUTOTUNE_FULL
                  : cfg->autotune == FHD_TUNE_FAST ? FHD_AUTOTUNE_FAST
                                                   : FHD_AUTOTUNE_OFF;
    const int hdw_rule = p->split_any || p->fuse_dw0 || p->bf16;
    p->hdw_measure = !hdw_rule && p->autotune != FHD_AUTOTUNE_OFF && !cfg->distributed.on;
    p->hdw_from = FHD_BRANCH_RULE;
    fhd__cuda_plan_branch(p, lo, cfg, hdw_rule);
    snprintf(p->cache, sizeof p->cache, "none");
}

void fhd__cuda_plan_branch(fhd__cuda_plan *p, const fhd__layout *lo, const fhd__config *cfg,
                           int hdw_side) {
    const int has_sn = lo->num_sn > 0;
    p->hdw_side = hdw_side;
    /* the guard with PER commits the tree after the optimiser: the next batch follows it */
    p->sample_ahead =
        (!has_sn || p->hdw_side) && !(cfg->guard.on && cfg->replay == FHD_REPLAY_PRIORITIZED);
    p->side_sample = has_sn;
    /* (not above a conv torso: its layer-0 im2col, shared by both networks, precedes the
     * fork and follows the sampling) */
    p->fork_sn1 = has_sn && p->sample_ahead && lo->NC == 0;
    /* with hdw_measure the stream exists for both forms */
    p->use_hdw = p->hdw_side || p->sample_ahead || p->hdw_measure;
}

/* ---- JSON ---------------------------------------------------------------------------------- */

typedef struct jbuf {
    char *p;
    size_t cap, len; /* len: what the whole text needs */
} jbuf;

static void put(jbuf *j, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void put(jbuf *j, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    const size_t room = j->len < j->cap ? j->cap - j->len : 0;
    const int n = vsnprintf(room ? j->p + j->len : NULL, room, fmt, ap);
    va_end(ap);
    if (n > 0)
        j->len += (size_t)n;
}

static const char *tf(int v) {
    return v ? "true" : "false";
}

/* A string the plan wrote itself (no quotes or control characters), quoted; others dropped. */
static void put_str(jbuf *j, const char *s) {
    put(j, "\"");
    for (; *s; s++)
        if ((unsigned char)*s >= 0x20 && *s != '"' && *s != '\\')
            put(j, "%c", *s);
    put(j, "\"");
}

static const char *epi_name(int e) {
    return e == FHD_EPI_BIAS_RELU ? "bias_relu" : e == FHD_EPI_BIAS ? "bias" : "none";
}

static void put_gemm(jbuf *j, const fhd__gemm_choice *g) {
    put(j, "{\"site\":");
    put_str(j, g->site);
    if (g->narrow) {
        put(j, ",\"kernel\":\"narrow_linear\",\"rows\":%u,\"out\":%u,\"in\":%u}", g->n, g->m, g->k);
        return;
    }
    if (g->transpose) {
        put(j, ",\"kernel\":\"transform\",\"rows\":%u,\"cols\":%u}", g->m, g->n);
        return;
    }
    put(j, ",\"kernel\":\"cublasLt\",\"m\":%u,\"n\":%u,\"k\":%u,\"op\":\"%s\",\"batch\":%u", g->m,
        g->n, g->k, g->op, g->batch ? g->batch : 1u);
    put(j, ",\"precision\":\"%s\",\"epilogue\":\"%s\",\"epilogue_kernel\":%s,\"beside\":%s",
        g->bf16 == FHD_GEMM_BF16_OUT ? "bf16_out"
        : g->bf16                    ? "bf16"
        : g->tf32                    ? "tf32"
                                     : "fp32",
        epi_name(g->epilogue), tf(g->fallback), tf(g->beside));
    put(j,
        ",\"algo\":%d,\"tile\":%d,\"stages\":%d,\"splitk\":%d,\"reduction\":%d,\"swizzle\":%d,"
        "\"custom\":%d,\"inner_shape\":%d,\"cluster_shape\":%d,\"workspace\":%llu",
        g->algo, g->tile, g->stages, g->splitk, g->reduction, g->swizzle, g->custom, g->inner_shape,
        g->cluster_shape, (unsigned long long)g->workspace);
    put(j, ",\"pick\":\"%s\",\"rule\":%s,\"candidates\":%d",
        g->pick == FHD_PICK_TUNED   ? "tuned"
        : g->pick == FHD_PICK_CACHE ? "cache"
                                    : "rule",
        tf(!g->not_rule), g->candidates);
    if (g->us > 0)
        put(j, ",\"us\":%.3f,\"rule_us\":%.3f", g->us, g->rule_us);
    put(j, "}");
}

static const char *mode_name(int m) {
    return m == FHD_AUTOTUNE_FULL ? "full" : m == FHD_AUTOTUNE_FAST ? "fast" : "off";
}

static void put_layers(jbuf *j, const char *key, const int *v, int n) {
    put(j, ",\"%s\":[", key);
    for (int l = 0; l < n; l++)
        put(j, "%s%d", l ? "," : "", v[l]);
    put(j, "]");
}

int fhd__cuda_plan_json(const fhd__cuda_plan *p, char *buf, size_t cap) {
    jbuf j = {buf, cap, 0};
    if (cap)
        buf[0] = '\0';
    put(&j, "{\"precision\":{\"forward\":\"%s\",\"backward\":\"%s\"}",
        p->bf16       ? "bf16"
        : p->tf32_fwd ? "tf32"
                      : "fp32",
        p->bf16       ? "bf16"
        : p->tf32_bwd ? "tf32"
                      : "fp32");
    put(&j, ",\"autotune\":{\"mode\":\"%s\",\"cache\":", mode_name(p->autotune));
    put_str(&j, p->cache);
    put(&j, ",\"ms\":%.1f,\"budget_ms\":%.0f,\"timed\":%d,\"cache_hits\":%d}", p->autotune_ms,
        p->budget_ms, p->timed, p->cache_hits);
    const int n = (int)p->layers;
    put_layers(&j, "split_dx", p->split_dx, n);
    put_layers(&j, "dz_transposed", p->dz_t, n);
    put_layers(&j, "dx_bf16", p->dx16, n);
    put(&j, ",\"split_dw0\":%s,\"fuse_dw0\":%s,\"pair_fwd0\":%s,\"head_in_loss\":%s",
        tf(p->split_dw0), tf(p->fuse_dw0), tf(p->pair_fwd0), tf(p->head_in_loss));
    put(&j, ",\"head_narrow\":{\"online\":%s,\"target\":%s},\"pad_head\":%s", tf(p->head_narrow_on),
        tf(p->head_narrow_tg), tf(p->pad_head));
    put(&j, ",\"gather_bf16\":%s,\"bf16_weights\":\"%s\"", tf(p->gather_bf16),
        !p->bf16     ? "none"
        : p->w16_opt ? "optimizer"
                     : "update");
    put(&j, ",\"sampling\":\"%s\",\"fork_sn1\":%s,\"head_dw_branch\":\"%s\"",
        p->sample_ahead  ? "ahead"
        : p->side_sample ? "beside_power_iteration"
                         : "in_update",
        tf(p->fork_sn1), p->hdw_side ? "own" : "after_priority_update");
    static const char *const from[] = {"rule", "measuring", "measured", "cache"};
    put(&j, ",\"head_dw_choice\":{\"by\":\"%s\",\"us_after\":%.2f,\"us_own\":%.2f}",
        from[p->hdw_from & 3], p->hdw_us[0], p->hdw_us[1]);
    put(&j, ",\"streams\":%d,\"prune\":%s", 3 + p->use_aux + p->use_hdw + p->use_tree, tf(p->prune));
    if (p->conv_layers) /* the conv torso's form (docs/design.md, section 5) */
        put(&j, ",\"conv\":{\"layers\":%u,\"form\":\"im2col_gemm\",\"layout\":\"nhwc\","
                "\"shared_input_im2col\":true}", p->conv_layers);
    put(&j, ",\"optimizer\":{\"form\":\"%s\",\"grid\":%u,\"per_thread\":%u}",
        p->opt_grid ? (p->opt_one_pass ? "fused_one_pass" : "fused_loop") : "two_kernels",
        p->opt_grid, p->opt_per);
    put(&j, ",\"gemms\":[");
    for (int i = 0; i < p->ngemm; i++) {
        if (i)
            put(&j, ",");
        put_gemm(&j, &p->gemm[i]);
    }
    put(&j, "]}");
    return (int)j.len;
}
