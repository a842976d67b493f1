/* config_dist.c - the config key `distributed`: null (the default: one process) or an object
 * {"world_size": W, "checksum_interval": n} (docs/design.md section 10), both optional:
 * world_size absent (stored as 0) takes MPI's; checksum_interval has its schema default. Its
 * schema entry is {"type": "object", "default": null, "properties": {field: integer rule[,
 * "default"]}}. */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "config_internal.h"

const char *const fhd__cfg_dist_fields[FHD_DIST_FIELDS] = {"world_size", "checksum_interval"};

int fhd__cfg_load_dist(const json_t *entry, fhd__cfg_key_schema *ks, char *msg, size_t cap) {
    const json_t *props = json_object_get(entry, "properties");
    if (!json_is_null(ks->def) || !json_is_object(props) ||
        json_object_size(props) != FHD_DIST_FIELDS) {
        snprintf(msg, cap, "needs \"default\": null and the properties world_size, "
                           "checksum_interval");
        return -1;
    }
    for (int f = 0; f < FHD_DIST_FIELDS; f++) {
        const json_t *fe = json_object_get(props, fhd__cfg_dist_fields[f]);
        const char *ft = json_string_value(json_object_get(fe, "type"));
        const json_t *mn = json_object_get(fe, "minimum"), *mx = json_object_get(fe, "maximum");
        const json_t *def = json_object_get(fe, "default");
        fhd__cfg_num_rule *r = &ks->dist[f];
        memset(r, 0, sizeof *r);
        if (!ft || strcmp(ft, "integer") != 0 || !json_is_integer(mn) || !json_is_integer(mx) ||
            json_integer_value(mn) < 1 || json_integer_value(mx) > 1000000000 ||
            (def && (!json_is_integer(def) || json_integer_value(def) < json_integer_value(mn) ||
                     json_integer_value(def) > json_integer_value(mx)))) {
            snprintf(msg, cap, "properties.%s needs an integer with bounds in [1, 1e9] (and a "
                               "default inside them, if any)",
                     fhd__cfg_dist_fields[f]);
            return -1;
        }
        r->is_int = r->has_min = r->has_max = 1;
        r->imin = json_integer_value(mn);
        r->imax = json_integer_value(mx);
        ks->dist_def[f] = def ? json_integer_value(def) : 0;
    }
    if (ks->dist_def[0] != 0 || ks->dist_def[1] == 0) {
        snprintf(msg, cap, "properties.world_size has no default; checksum_interval needs one");
        return -1;
    }
    return 0;
}

void fhd__cfg_describe_dist(const fhd__cfg_key_schema *ks, char *buf, size_t cap) {
    char r0[96], r1[96];
    fhd__cfg_describe_rule(&ks->dist[0], r0, sizeof r0);
    fhd__cfg_describe_rule(&ks->dist[1], r1, sizeof r1);
    fhd__cfg_textf(buf, cap,
                   "null (one process) or an object {\"world_size\": %s (default: the ranks MPI "
                   "started), \"checksum_interval\": %s (default %lld)}",
                   r0, r1, (long long)ks->dist_def[1]);
}

int32_t fhd__cfg_store_dist(const fhd__cfg_schema *s, size_t i, const json_t *v, fhd__config *cfg,
                            fhd_error *err) {
    const fhd__cfg_key_schema *ks = &s->keys[i];
    fhd__dist_spec d = {0, 0, 0};
    char allowed[FHD_ERROR_MESSAGE_MAX / 2];
    const char *key;
    const json_t *fv;
    if (json_is_null(v)) {
        cfg->distributed = d;
        return FHD_OK;
    }
    fhd__cfg_describe_dist(ks, allowed, sizeof allowed);
    if (!json_is_object(v))
        return fhd__cfg_type_error(err, "$.distributed", "an object or null", v, allowed);
    d.checksum_interval = (uint64_t)ks->dist_def[1];
    json_object_foreach((json_t *)v, key, fv) {
        char path[FHD_ERROR_PATH_MAX];
        int f = -1;
        for (int j = 0; j < FHD_DIST_FIELDS; j++)
            if (strcmp(key, fhd__cfg_dist_fields[j]) == 0)
                f = j;
        fhd__cfg_textf(path, sizeof path, "$.distributed.%.64s", key);
        if (f < 0) {
            const char *near = fhd__cfg_suggest(key, fhd__cfg_dist_fields, FHD_DIST_FIELDS);
            if (near)
                return fhd__cfg_fail(err, FHD_ERR_CONFIG_UNKNOWN_KEY, 0, 0, path,
                                     "unknown key; did you mean \"%s\"?", near);
            return fhd__cfg_fail(err, FHD_ERR_CONFIG_UNKNOWN_KEY, 0, 0, path,
                                 "unknown key; allowed: world_size, checksum_interval (the rank "
                                 "comes from MPI)");
        }
        json_int_t iv = 0;
        double dv = 0.0;
        int32_t rc = fhd__cfg_check_number(&ks->dist[f], fv, path, &iv, &dv, err);
        if (rc != FHD_OK)
            return rc;
        if (f == 0)
            d.world_size = (uint32_t)iv;
        else
            d.checksum_interval = (uint64_t)iv;
    }
    d.on = 1;
    cfg->distributed = d;
    return FHD_OK;
}

int fhd__cfg_dist_equal(const fhd__dist_spec *a, const fhd__dist_spec *b) {
    return a->on == b->on && (!a->on || (a->world_size == b->world_size &&
                                         a->checksum_interval == b->checksum_interval));
}

void fhd__cfg_dist_json(const fhd__dist_spec *d, char *buf, size_t cap) {
    if (!d->on) {
        fhd__cfg_textf(buf, cap, "null");
        return;
    }
    if (d->world_size == 0) /* MPI's */
        fhd__cfg_textf(buf, cap, "{\"checksum_interval\":%" PRIu64 "}", d->checksum_interval);
    else
        fhd__cfg_textf(buf, cap, "{\"checksum_interval\":%" PRIu64 ",\"world_size\":%" PRIu32 "}",
                       d->checksum_interval, d->world_size);
}
