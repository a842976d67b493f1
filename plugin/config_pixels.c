/* config_pixels.c - image observations in the config: obs_shape [C, H, W] (exclusive with
 * obs_dim, which becomes C*H*W), obs_dtype, frame_stack, the conv list and the torso shorthand.
 *
 * Every size is checked here, before a learner exists: a kernel larger than its padded input,
 * a layer whose output or im2col matrix exceeds limits.conv_values_max, an observation larger
 * than obs_dim allows. Each error names the JSON path and the sizes involved.
 */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "config_internal.h"

/* Mnih et al. 2015 ("nature"): three convolutions with ReLU, then hidden [512]. */
static const fhd__conv_spec nature_conv[3] = {{32, 8, 4, 0}, {64, 4, 2, 0}, {64, 3, 1, 0}};
#define NATURE_HIDDEN 512u

int32_t fhd__cfg_store_conv(const fhd__cfg_schema *s, size_t i, const json_t *v, fhd__config *cfg,
                            fhd_error *err) {
    const fhd__cfg_key_spec *k = &fhd__cfg_specs[i];
    const fhd__cfg_key_schema *ks = &s->keys[i];
    fhd__conv_spec *items = FIELD(cfg, k, fhd__conv_spec);
    char path[FHD_ERROR_PATH_MAX], allowed[FHD_ERROR_MESSAGE_MAX / 2];
    size_t n = json_array_size(v);
    fhd__cfg_describe_key(s, i, allowed, sizeof allowed);
    if (!json_is_array(v))
        return fhd__cfg_type_error(err, "$.conv", "an array", v, allowed);
    if (n < ks->min_items || n > ks->max_items)
        return fhd__cfg_fail(err, FHD_ERR_CONFIG_RANGE, 0, 0, "$.conv",
                             "array has %zu items; allowed: %s", n, allowed);
    memset(items, 0, k->capacity * sizeof *items);
    for (size_t e = 0; e < n; e++) {
        const json_t *item = json_array_get(v, e);
        const char *key;
        const json_t *fv;
        uint32_t vals[FHD_CONV_FIELDS];
        fhd__cfg_textf(path, sizeof path, "$.conv[%zu]", e);
        if (!json_is_object(item))
            return fhd__cfg_type_error(err, path, "an object", item,
                                       "{\"out\": channels, \"kernel\": size, \"stride\": step"
                                       "[, \"padding\": zeros]}");
        json_object_foreach((json_t *)item, key, fv) {
            int known = 0;
            for (int f = 0; f < FHD_CONV_FIELDS; f++)
                known |= strcmp(key, fhd__cfg_conv_fields[f]) == 0;
            if (!known) {
                const char *near = fhd__cfg_suggest(key, fhd__cfg_conv_fields, FHD_CONV_FIELDS);
                char kpath[FHD_ERROR_PATH_MAX];
                fhd__cfg_textf(kpath, sizeof kpath, "%s.%.64s", path, key);
                if (near)
                    return fhd__cfg_fail(err, FHD_ERR_CONFIG_UNKNOWN_KEY, 0, 0, kpath,
                                         "unknown key; did you mean \"%s\"?", near);
                return fhd__cfg_fail(err, FHD_ERR_CONFIG_UNKNOWN_KEY, 0, 0, kpath,
                                     "unknown key; allowed: out, kernel, stride, padding");
            }
        }
        for (int f = 0; f < FHD_CONV_FIELDS; f++) {
            char fpath[FHD_ERROR_PATH_MAX], rule[96];
            json_int_t iv = 0;
            double dv = 0.0;
            const json_t *x = json_object_get(item, fhd__cfg_conv_fields[f]);
            int32_t rc;
            fhd__cfg_textf(fpath, sizeof fpath, "%s.%s", path, fhd__cfg_conv_fields[f]);
            if (!x)
                x = ks->conv_def[f];
            if (!x) {
                fhd__cfg_describe_rule(&ks->conv[f], rule, sizeof rule);
                return fhd__cfg_fail(err, FHD_ERR_CONFIG_MISSING, 0, 0, fpath,
                                     "required key is missing; allowed: %s", rule);
            }
            rc = fhd__cfg_check_number(&ks->conv[f], x, fpath, &iv, &dv, err);
            if (rc != FHD_OK)
                return rc;
            vals[f] = (uint32_t)iv;
        }
        items[e] = (fhd__conv_spec){vals[0], vals[1], vals[2], vals[3]};
    }
    COUNT(cfg, k) = (uint32_t)n;
    return FHD_OK;
}

/* torso "nature": fills conv and hidden, which must not be given beside it. */
static int32_t expand_torso(fhd__config *c, const unsigned char *given, fhd_error *err) {
    if (c->torso != FHD_TORSO_NATURE)
        return FHD_OK;
    if (given[KEY_conv])
        return fhd__cfg_fail(err, FHD_ERR_CONFIG_INCONSISTENT, 0, 0, "$.conv",
                             "torso \"nature\" defines the convolutions; allowed: either torso "
                             "\"nature\" or a conv list");
    if (given[KEY_hidden])
        return fhd__cfg_fail(err, FHD_ERR_CONFIG_INCONSISTENT, 0, 0, "$.hidden",
                             "torso \"nature\" defines hidden [512]; allowed: either torso "
                             "\"nature\" or conv and hidden");
    if (c->num_obs_shape == 0)
        return fhd__cfg_fail(err, FHD_ERR_CONFIG_INCONSISTENT, 0, 0, "$.torso",
                             "\"nature\" is a convolutional torso and needs obs_shape [C, H, W] "
                             "(e.g. [4, 84, 84]); allowed: obs_shape, or torso \"custom\"");
    memcpy(c->conv, nature_conv, sizeof nature_conv);
    c->num_conv = 3;
    memset(c->hidden, 0, sizeof c->hidden);
    c->hidden[0] = NATURE_HIDDEN;
    c->num_hidden = 1;
    c->torso = FHD_TORSO_CUSTOM; /* stored expanded: serialises and compares as written out */
    return FHD_OK;
}

static int32_t check_obs(const fhd__cfg_schema *s, fhd__config *c, const unsigned char *given,
                         fhd_error *err) {
    const json_int_t dim_max = s->keys[KEY_obs_dim].num.imax;
    uint64_t values;
    if (given[KEY_obs_shape] && c->num_obs_shape > 0 && given[KEY_obs_dim])
        return fhd__cfg_fail(err, FHD_ERR_CONFIG_INCONSISTENT, 0, 0, "$.obs_shape",
                             "obs_shape and obs_dim are both given; allowed: one of them (with "
                             "obs_shape [C, H, W], obs_dim is C*H*W)");
    if (!given[KEY_obs_shape] || c->num_obs_shape == 0) {
        if (!given[KEY_obs_dim]) /* obs_shape: [] given alone */
            return fhd__cfg_fail(err, FHD_ERR_CONFIG_RANGE, 0, 0, "$.obs_shape",
                                 "array has 0 items; allowed: [C, H, W], 3 integers, or obs_dim "
                                 "integer in [1, %" JSON_INTEGER_FORMAT "] for flat observations",
                                 dim_max);
        if (c->frame_stack > 1)
            return fhd__cfg_fail(err, FHD_ERR_CONFIG_INCONSISTENT, 0, 0, "$.frame_stack",
                                 "%" PRIu32 " needs obs_shape [C, H, W] with C a multiple of it; "
                                 "allowed: 1 for flat observations",
                                 c->frame_stack);
        return FHD_OK;
    }
    if (c->num_obs_shape != 3)
        return fhd__cfg_fail(err, FHD_ERR_CONFIG_RANGE, 0, 0, "$.obs_shape",
                             "array has %" PRIu32 " items; allowed: [C, H, W], 3 integers",
                             c->num_obs_shape);
    values = (uint64_t)c->obs_shape[0] * c->obs_shape[1] * c->obs_shape[2];
    if (values > (uint64_t)dim_max)
        return fhd__cfg_fail(err, FHD_ERR_CONFIG_RANGE, 0, 0, "$.obs_shape",
                             "%" PRIu32 "x%" PRIu32 "x%" PRIu32 " = %" PRIu64
                             " values per observation; allowed: at most %" JSON_INTEGER_FORMAT,
                             c->obs_shape[0], c->obs_shape[1], c->obs_shape[2], values, dim_max);
    c->obs_dim = (uint32_t)values;
    if (c->frame_stack > 1 && c->obs_shape[0] % c->frame_stack != 0)
        return fhd__cfg_fail(err, FHD_ERR_CONFIG_INCONSISTENT, 0, 0, "$.frame_stack",
                             "%" PRIu32 " does not divide the %" PRIu32
                             " channels of obs_shape (frames are stacked along C); allowed: a "
                             "divisor of C",
                             c->frame_stack, c->obs_shape[0]);
    return FHD_OK;
}

static int32_t check_conv(const fhd__cfg_schema *s, fhd__config *c, fhd_error *err) {
    const uint64_t values_max = (uint64_t)s->conv_values_max; /* per observation */
    uint64_t ch, h, w;
    if (c->num_conv == 0)
        return FHD_OK;
    if (c->num_obs_shape == 0)
        return fhd__cfg_fail(err, FHD_ERR_CONFIG_INCONSISTENT, 0, 0, "$.conv",
                             "convolutions need image observations; allowed: obs_shape "
                             "[C, H, W] instead of obs_dim, or no conv");
    ch = c->obs_shape[0];
    h = c->obs_shape[1];
    w = c->obs_shape[2];
    for (uint32_t i = 0; i < c->num_conv; i++) {
        const fhd__conv_spec *cv = &c->conv[i];
        const uint64_t ph = h + 2 * (uint64_t)cv->padding, pw = w + 2 * (uint64_t)cv->padding;
        char path[64];
        uint64_t ho, wo, col;
        if (ph < cv->kernel || pw < cv->kernel) {
            snprintf(path, sizeof path, "$.conv[%" PRIu32 "].kernel", i);
            return fhd__cfg_fail(err, FHD_ERR_CONFIG_INCONSISTENT, 0, 0, path,
                                 "%" PRIu32 " is larger than the layer's padded input %" PRIu64
                                 "x%" PRIu64 " (input %" PRIu64 "x%" PRIu64 " plus padding %" PRIu32
                                 " on each side); allowed: kernel <= %" PRIu64,
                                 cv->kernel, ph, pw, h, w, cv->padding, ph < pw ? ph : pw);
        }
        ho = (ph - cv->kernel) / cv->stride + 1;
        wo = (pw - cv->kernel) / cv->stride + 1;
        col = ch * cv->kernel * cv->kernel * ho * wo; /* im2col matrix (C k k, Ho Wo) */
        if ((uint64_t)cv->out * ho * wo > values_max || col > values_max) {
            snprintf(path, sizeof path, "$.conv[%" PRIu32 "]", i);
            return fhd__cfg_fail(err, FHD_ERR_CONFIG_INCONSISTENT, 0, 0, path,
                                 "output %" PRIu32 "x%" PRIu64 "x%" PRIu64 " (%" PRIu64
                                 " values) and im2col matrix %" PRIu64 "x%" PRIu64 " (%" PRIu64
                                 " values) per observation; allowed: at most %" PRIu64 " each",
                                 cv->out, ho, wo, (uint64_t)cv->out * ho * wo,
                                 ch * cv->kernel * cv->kernel, ho * wo, col, values_max);
        }
        ch = cv->out;
        h = ho;
        w = wo;
    }
    return FHD_OK;
}

int32_t fhd__cfg_check_pixels(const fhd__cfg_schema *s, fhd__config *c, const unsigned char *given,
                              fhd_error *err) {
    int32_t rc = check_obs(s, c, given, err);
    if (rc == FHD_OK)
        rc = expand_torso(c, given, err);
    if (rc == FHD_OK)
        rc = check_conv(s, c, err);
    return rc;
}
