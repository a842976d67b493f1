/* config_check.c - consistency between config keys, and the sizes a config implies. */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "config_internal.h"

/* ---- consistency ---------------------------------------------------------------------------- */

int32_t fhd__cfg_check_consistency(const fhd__cfg_schema *s, fhd__config *c,
                                   const unsigned char *given, fhd_error *err) {
    char a[40], b[40];
    uint32_t total = fhd__config_total_actions(c);
    uint64_t params, obs_bytes;
    int32_t rc = fhd__cfg_check_pixels(s, c, given, err); /* sets obs_dim from obs_shape */
    if (rc != FHD_OK)
        return rc;
    if ((json_int_t)total > s->total_actions_max)
        return fhd__cfg_fail(err, FHD_ERR_CONFIG_INCONSISTENT, 0, 0, "$.actions",
                             "the branches have %" PRIu32
                             " actions in total; allowed: at most %" JSON_INTEGER_FORMAT
                             " in total",
                             total, s->total_actions_max);
    params = fhd__config_param_count(c);
    if (params > (uint64_t)s->param_count_max)
        return fhd__cfg_fail(
            err, FHD_ERR_CONFIG_INCONSISTENT, 0, 0, "$.hidden",
            "the network would have %" PRIu64 " parameters (weights and biases set by "
            "obs_dim or obs_shape, conv, hidden, actions and dueling); allowed: at most "
            "%" JSON_INTEGER_FORMAT,
            params, s->param_count_max);
    /* the replay's observation bytes: obs and next_obs of every slot, or with image
     * observations the frame ring (each observation once, cpu_replay_frames.c) */
    obs_bytes = fhd__config_obs_bytes(c);
    {
        /* image observations: frames of 1 / frame_stack of an observation */
        const uint64_t frames = c->num_obs_shape ? fhd__config_frame_capacity(c)
                                                 : 2 * (uint64_t)c->replay_capacity;
        if (c->num_obs_shape && c->frame_stack > 1)
            obs_bytes /= c->frame_stack;
        if (frames * obs_bytes > (uint64_t)s->replay_bytes_max)
            return fhd__cfg_fail(err, FHD_ERR_CONFIG_INCONSISTENT, 0, 0, "$.replay_capacity",
                                 "%" PRIu32 " slots need %" PRIu64 " observations of %" PRIu64
                                 " bytes = %" PRIu64 " bytes of replay; allowed: at most "
                                 "%" JSON_INTEGER_FORMAT " bytes (limits.replay_bytes_max)",
                                 c->replay_capacity, frames, obs_bytes, frames * obs_bytes,
                                 s->replay_bytes_max);
    }
    if (c->batch_size > c->replay_capacity)
        return fhd__cfg_fail(err, FHD_ERR_CONFIG_INCONSISTENT, 0, 0, "$.batch_size",
                             "%" PRIu32 " is larger than replay_capacity (%" PRIu32
                             "); allowed: integer in [1, replay_capacity]",
                             c->batch_size, c->replay_capacity);
    if (c->n_step > c->replay_capacity)
        return fhd__cfg_fail(err, FHD_ERR_CONFIG_INCONSISTENT, 0, 0, "$.n_step",
                             "%" PRIu32 " is larger than replay_capacity (%" PRIu32
                             "); allowed: integer in [1, replay_capacity]",
                             c->n_step, c->replay_capacity);
    if (c->epsilon_end > c->epsilon_start) {
        fhd__cfg_format_real(c->epsilon_end, a, sizeof a);
        fhd__cfg_format_real(c->epsilon_start, b, sizeof b);
        return fhd__cfg_fail(
            err, FHD_ERR_CONFIG_INCONSISTENT, 0, 0, "$.epsilon_end",
            "%s is larger than epsilon_start (%s); allowed: number in [0, epsilon_start]", a, b);
    }
    if (c->prune_sparsity > 0.0 && c->prune_end < c->prune_start)
        return fhd__cfg_fail(err, FHD_ERR_CONFIG_INCONSISTENT, 0, 0, "$.prune_end",
                             "%" PRIu64 " is before prune_start (%" PRIu64
                             "); allowed: prune_start + a multiple of prune_frequency",
                             c->prune_end, c->prune_start);
    if (c->prune_sparsity > 0.0 && (c->prune_end - c->prune_start) % c->prune_frequency != 0)
        return fhd__cfg_fail(err, FHD_ERR_CONFIG_INCONSISTENT, 0, 0, "$.prune_end",
                             "%" PRIu64 " is not a pruning update (prune_start %" PRIu64
                             ", prune_frequency %" PRIu64
                             "); allowed: prune_start + a multiple of prune_frequency",
                             c->prune_end, c->prune_start, c->prune_frequency);
    if (c->backend == FHD_BACKEND_CPU && c->matmul_precision != FHD_PREC_FP32 &&
        c->matmul_precision != FHD_PREC_BF16) {
        const json_t *names = s->keys[KEY_matmul_precision].enums;
        return fhd__cfg_fail(
            err, FHD_ERR_CONFIG_INCONSISTENT, 0, 0, "$.matmul_precision",
            "\"%s\" is not available with backend \"cpu\" (the CPU backend computes in "
            "fp32 or bf16); allowed: \"fp32\", \"bf16\", or backend \"cuda\" or \"auto\"",
            json_string_value(json_array_get(names, (size_t)c->matmul_precision)));
    }
    return FHD_OK;
}

uint32_t fhd__config_total_actions(const fhd__config *cfg) {
    uint64_t total = 0;
    uint32_t d = cfg->num_branches < FHD_MAX_BRANCHES ? cfg->num_branches : FHD_MAX_BRANCHES;
    for (uint32_t i = 0; i < d; i++)
        total += cfg->actions[i];
    return total > UINT32_MAX ? UINT32_MAX : (uint32_t)total;
}

uint64_t fhd__config_param_count(const fhd__config *cfg) {
    uint64_t total = 0, in = cfg->obs_dim, out;
    uint32_t layers =
        cfg->num_hidden < FHD_MAX_HIDDEN_LAYERS ? cfg->num_hidden : FHD_MAX_HIDDEN_LAYERS;
    if (cfg->num_conv > 0) {
        uint32_t c, h, w,
            nc = cfg->num_conv < FHD_MAX_CONV_LAYERS ? cfg->num_conv : FHD_MAX_CONV_LAYERS;
        for (uint32_t i = 0; i < nc; i++) {
            const fhd__conv_spec *cv = &cfg->conv[i];
            if (fhd__config_conv_in(cfg, i, &c, &h, &w) != 0)
                return UINT64_MAX;
            total += (uint64_t)cv->out * c * cv->kernel * cv->kernel + cv->out;
        }
        if (fhd__config_conv_in(cfg, nc, &c, &h, &w) != 0)
            return UINT64_MAX;
        in = (uint64_t)c * h * w;
    }
    for (uint32_t l = 0; l < layers; l++) {
        out = cfg->hidden[l];
        total += out * in + out;
        in = out;
    }
    out = (uint64_t)fhd__config_total_actions(cfg) + (cfg->dueling ? 1u : 0u);
    return total + out * in + out;
}

int fhd__config_conv_in(const fhd__config *cfg, uint32_t i, uint32_t *c, uint32_t *h, uint32_t *w) {
    uint64_t cc, hh, ww;
    if (cfg->num_obs_shape != 3 || i > cfg->num_conv || cfg->num_conv > FHD_MAX_CONV_LAYERS)
        return -1;
    cc = cfg->obs_shape[0];
    hh = cfg->obs_shape[1];
    ww = cfg->obs_shape[2];
    for (uint32_t l = 0; l < i; l++) {
        const fhd__conv_spec *cv = &cfg->conv[l];
        uint64_t ph = hh + 2 * (uint64_t)cv->padding, pw = ww + 2 * (uint64_t)cv->padding;
        if (cv->stride == 0 || ph < cv->kernel || pw < cv->kernel)
            return -1;
        hh = (ph - cv->kernel) / cv->stride + 1; /* PyTorch Conv2d, dilation 1 */
        ww = (pw - cv->kernel) / cv->stride + 1;
        cc = cv->out;
    }
    if (cc * hh * ww > UINT32_MAX)
        return -1;
    *c = (uint32_t)cc;
    *h = (uint32_t)hh;
    *w = (uint32_t)ww;
    return 0;
}
