/* config_guard.c - the config key `guard`: null (the default: no guard) or an object of
 * optional bounds {"max_grad_norm": x, "max_loss": y} (common/guard.h applies them). Its schema
 * entry is {"type": "object", "default": null, "properties": {field: number rule}}. */
#include <stdio.h>
#include <string.h>

#include "config_internal.h"

const char *const fhd__cfg_guard_fields[FHD_GUARD_FIELDS] = {"max_grad_norm", "max_loss"};

static double *guard_field(fhd__guard_spec *g, int f) {
    return f == 0 ? &g->max_grad_norm : &g->max_loss;
}

int fhd__cfg_load_guard(const json_t *entry, fhd__cfg_key_schema *ks, char *msg, size_t cap) {
    const json_t *props = json_object_get(entry, "properties");
    if (!json_is_null(ks->def) || !json_is_object(props) ||
        json_object_size(props) != FHD_GUARD_FIELDS) {
        snprintf(msg, cap, "needs \"default\": null and the properties max_grad_norm, max_loss");
        return -1;
    }
    for (int f = 0; f < FHD_GUARD_FIELDS; f++) {
        const json_t *fe = json_object_get(props, fhd__cfg_guard_fields[f]);
        const char *ft = json_string_value(json_object_get(fe, "type"));
        fhd__cfg_num_rule *r = &ks->guard[f];
        memset(r, 0, sizeof *r);
        if (!ft || strcmp(ft, "number") != 0 || !json_is_number(json_object_get(fe, "minimum")) ||
            !json_is_number(json_object_get(fe, "maximum"))) {
            snprintf(msg, cap, "properties.%s needs a number with bounds",
                     fhd__cfg_guard_fields[f]);
            return -1;
        }
        r->has_min = r->has_max = 1;
        r->min_excl = json_is_true(json_object_get(fe, "exclusive_minimum"));
        r->max_excl = json_is_true(json_object_get(fe, "exclusive_maximum"));
        r->dmin = json_number_value(json_object_get(fe, "minimum"));
        r->dmax = json_number_value(json_object_get(fe, "maximum"));
        if (r->dmin < 0.0 || (r->dmin == 0.0 && !r->min_excl) || r->dmax > 3.0e38) {
            snprintf(msg, cap, "properties.%s needs bounds in (0, 3e38] (0 stores no bound)",
                     fhd__cfg_guard_fields[f]);
            return -1;
        }
    }
    return 0;
}

void fhd__cfg_describe_guard(const fhd__cfg_key_schema *ks, char *buf, size_t cap) {
    char r0[96], r1[96];
    fhd__cfg_describe_rule(&ks->guard[0], r0, sizeof r0);
    fhd__cfg_describe_rule(&ks->guard[1], r1, sizeof r1);
    fhd__cfg_textf(buf, cap,
                   "null (no guard) or an object {\"max_grad_norm\": %s, \"max_loss\": %s}, both "
                   "optional",
                   r0, r1);
}

int32_t fhd__cfg_store_guard(const fhd__cfg_schema *s, size_t i, const json_t *v, fhd__config *cfg,
                             fhd_error *err) {
    const fhd__cfg_key_schema *ks = &s->keys[i];
    fhd__guard_spec g = {0, 0.0, 0.0};
    char allowed[FHD_ERROR_MESSAGE_MAX / 2];
    const char *key;
    const json_t *fv;
    if (json_is_null(v)) {
        cfg->guard = g;
        return FHD_OK;
    }
    fhd__cfg_describe_guard(ks, allowed, sizeof allowed);
    if (!json_is_object(v))
        return fhd__cfg_type_error(err, "$.guard", "an object or null", v, allowed);
    json_object_foreach((json_t *)v, key, fv) {
        char path[FHD_ERROR_PATH_MAX];
        int f = -1;
        for (int j = 0; j < FHD_GUARD_FIELDS; j++)
            if (strcmp(key, fhd__cfg_guard_fields[j]) == 0)
                f = j;
        fhd__cfg_textf(path, sizeof path, "$.guard.%.64s", key);
        if (f < 0) {
            const char *near = fhd__cfg_suggest(key, fhd__cfg_guard_fields, FHD_GUARD_FIELDS);
            if (near)
                return fhd__cfg_fail(err, FHD_ERR_CONFIG_UNKNOWN_KEY, 0, 0, path,
                                     "unknown key; did you mean \"%s\"?", near);
            return fhd__cfg_fail(err, FHD_ERR_CONFIG_UNKNOWN_KEY, 0, 0, path,
                                 "unknown key; allowed: max_grad_norm, max_loss");
        }
        json_int_t iv = 0;
        int32_t rc = fhd__cfg_check_number(&ks->guard[f], fv, path, &iv, guard_field(&g, f), err);
        if (rc != FHD_OK)
            return rc;
    }
    g.on = 1;
    cfg->guard = g;
    return FHD_OK;
}

int fhd__cfg_guard_equal(const fhd__guard_spec *a, const fhd__guard_spec *b) {
    return a->on == b->on &&
           (!a->on || (a->max_grad_norm == b->max_grad_norm && a->max_loss == b->max_loss));
}

void fhd__cfg_guard_json(const fhd__guard_spec *g, char *buf, size_t cap) {
    char n0[40], n1[40];
    if (!g->on) {
        fhd__cfg_textf(buf, cap, "null");
        return;
    }
    fhd__cfg_format_real(g->max_grad_norm, n0, sizeof n0);
    fhd__cfg_format_real(g->max_loss, n1, sizeof n1);
    /* a bound of 0 is one that was not given */
    fhd__cfg_textf(buf, cap, "{%s%s%s%s%s%s}", g->max_grad_norm > 0 ? "\"max_grad_norm\":" : "",
                   g->max_grad_norm > 0 ? n0 : "",
                   g->max_grad_norm > 0 && g->max_loss > 0 ? "," : "",
                   g->max_loss > 0 ? "\"max_loss\":" : "", g->max_loss > 0 ? n1 : "", "");
}
