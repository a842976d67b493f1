/* config_json.c - canonical serialisation of a config and comparison of two configs. */
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config_internal.h"

/* ---- serialise and compare ------------------------------------------------------------------ */

static int key_equal(const fhd__cfg_key_spec *k, const fhd__config *a, const fhd__config *b) {
    switch (k->kind) {
    case ST_INT:
    case ST_BOOL:
    case ST_ENUM:
        return *CFIELD(a, k, int) == *CFIELD(b, k, int);
    case ST_U32:
        return *CFIELD(a, k, uint32_t) == *CFIELD(b, k, uint32_t);
    case ST_U64:
        return *CFIELD(a, k, uint64_t) == *CFIELD(b, k, uint64_t);
    case ST_DOUBLE:
        return *CFIELD(a, k, double) == *CFIELD(b, k, double);
    case ST_CONV_LIST: {
        uint32_t na = CCOUNT(a, k), nb = CCOUNT(b, k);
        if (na != nb)
            return 0;
        if (na > k->capacity)
            na = k->capacity;
        return memcmp(CFIELD(a, k, fhd__conv_spec), CFIELD(b, k, fhd__conv_spec),
                      na * sizeof(fhd__conv_spec)) == 0;
    }
    case ST_U32_ARRAY: {
        uint32_t na = *(const uint32_t *)((const char *)a + k->count_offset);
        uint32_t nb = *(const uint32_t *)((const char *)b + k->count_offset);
        if (na != nb)
            return 0;
        if (na > k->capacity)
            na = k->capacity;
        return memcmp(CFIELD(a, k, uint32_t), CFIELD(b, k, uint32_t), na * sizeof(uint32_t)) == 0;
    }
    case ST_PATH:
        return strncmp(CFIELD(a, k, char), CFIELD(b, k, char), FHD_CONFIG_PATH_MAX) == 0;
    case ST_GUARD:
        return fhd__cfg_guard_equal(CFIELD(a, k, fhd__guard_spec), CFIELD(b, k, fhd__guard_spec));
    case ST_DIST:
        return fhd__cfg_dist_equal(CFIELD(a, k, fhd__dist_spec), CFIELD(b, k, fhd__dist_spec));
    }
    return 0;
}

int fhd__config_equal(const fhd__config *a, const fhd__config *b) {
    return fhd__config_first_difference(a, b, 1) == NULL;
}

static int listed(const json_t *list, const char *name) {
    for (size_t i = 0; i < json_array_size(list); i++)
        if (json_is_string(json_array_get(list, i)) &&
            strcmp(json_string_value(json_array_get(list, i)), name) == 0)
            return 1;
    return 0;
}

const char *fhd__config_first_difference(const fhd__config *a, const fhd__config *b,
                                         int include_overridable) {
    json_t *manifest = NULL;
    const json_t *overridable = NULL;
    const char *found = NULL;
    if (!include_overridable) {
        /* Without the manifest no key counts as overridable: every difference is reported. */
        manifest = json_loads(fhd__manifest_json, 0, NULL);
        overridable = json_object_get(manifest, "resume_overridable");
    }
    for (size_t i = 0; i < NKEYS && !found; i++) {
        if (!key_equal(&fhd__cfg_specs[i], a, b) && !listed(overridable, fhd__cfg_specs[i].name))
            found = fhd__cfg_specs[i].name;
    }
    json_decref(manifest);
    return found;
}

/* A bounded text builder; `failed` is set when the text does not fit. */
typedef struct text {
    char *p;
    size_t len, cap;
    int failed;
} text;

static void put(text *t, const char *fmt, ...) {
    va_list ap;
    int n;
    if (t->failed)
        return;
    va_start(ap, fmt);
    n = vsnprintf(t->p + t->len, t->cap - t->len, fmt, ap);
    va_end(ap);
    if (n < 0 || (size_t)n >= t->cap - t->len)
        t->failed = 1;
    else
        t->len += (size_t)n;
}

static int by_name(const void *x, const void *y) {
    return strcmp(fhd__cfg_specs[*(const size_t *)x].name, fhd__cfg_specs[*(const size_t *)y].name);
}

char *fhd__config_to_json(const fhd__config *cfg) {
    enum { CAP = 8192 }; /* 44 keys, 75 array entries and 8 convolutions need about 2 KB */
    fhd__cfg_schema s;
    char msg[FHD_ERROR_MESSAGE_MAX], num[40];
    size_t order[NKEYS];
    text t = {NULL, 0, CAP, 0};

    if (cfg == NULL || fhd__cfg_schema_load(&s, msg, sizeof msg) != FHD_OK)
        return NULL;
    t.p = malloc(CAP);
    if (t.p == NULL) {
        fhd__cfg_schema_free(&s);
        return NULL;
    }
    for (size_t i = 0; i < NKEYS; i++)
        order[i] = i;
    qsort(order, NKEYS, sizeof order[0], by_name);
    put(&t, "{");
    for (size_t o = 0; o < NKEYS; o++) {
        const fhd__cfg_key_spec *k = &fhd__cfg_specs[order[o]];
        if (order[o] == KEY_obs_dim && cfg->num_obs_shape > 0)
            continue; /* derived from obs_shape (C*H*W); the two keys are exclusive */
        put(&t, "%s\"%s\":", t.len > 1 ? "," : "", k->name);
        switch (k->kind) {
        case ST_INT:
            put(&t, "%d", *CFIELD(cfg, k, int));
            break;
        case ST_U32:
            put(&t, "%" PRIu32, *CFIELD(cfg, k, uint32_t));
            break;
        case ST_U64:
            t.failed |= *CFIELD(cfg, k, uint64_t) > (uint64_t)INT64_MAX;
            put(&t, "%" PRIu64, *CFIELD(cfg, k, uint64_t));
            break;
        case ST_BOOL:
            put(&t, "%s", *CFIELD(cfg, k, int) ? "true" : "false");
            break;
        case ST_DOUBLE: {
            double d = *CFIELD(cfg, k, double);
            t.failed |= !(d - d == 0.0); /* NaN and infinities have no JSON form */
            fhd__cfg_format_real(d, num, sizeof num);
            put(&t, "%s", num);
            break;
        }
        case ST_ENUM: {
            int e = *CFIELD(cfg, k, int);
            const json_t *name = json_array_get(s.keys[order[o]].enums, (size_t)e);
            t.failed |= e < 0 || name == NULL;
            put(&t, "\"%s\"", json_string_value(name) ? json_string_value(name) : "");
            break;
        }
        case ST_CONV_LIST: {
            uint32_t n = CCOUNT(cfg, k);
            t.failed |= n > k->capacity;
            put(&t, "[");
            for (uint32_t e = 0; e < n && e < k->capacity; e++) {
                const fhd__conv_spec *cv = &CFIELD(cfg, k, fhd__conv_spec)[e];
                put(&t,
                    "%s{\"kernel\":%" PRIu32 ",\"out\":%" PRIu32 ",\"padding\":%" PRIu32
                    ",\"stride\":%" PRIu32 "}",
                    e ? "," : "", cv->kernel, cv->out, cv->padding, cv->stride);
            }
            put(&t, "]");
            break;
        }
        case ST_U32_ARRAY: {
            uint32_t n = *(const uint32_t *)((const char *)cfg + k->count_offset);
            t.failed |= n > k->capacity;
            put(&t, "[");
            for (uint32_t e = 0; e < n && e < k->capacity; e++)
                put(&t, "%s%" PRIu32, e ? "," : "", CFIELD(cfg, k, uint32_t)[e]);
            put(&t, "]");
            break;
        }
        case ST_PATH: /* parsed without quotes, backslashes or control characters */
            t.failed |= memchr(CFIELD(cfg, k, char), '\0', FHD_CONFIG_PATH_MAX) == NULL;
            put(&t, "\"%.*s\"", FHD_CONFIG_PATH_MAX - 1, CFIELD(cfg, k, char));
            break;
        case ST_GUARD: {
            char g[128];
            const fhd__guard_spec *gs = CFIELD(cfg, k, fhd__guard_spec);
            t.failed |= !(gs->max_grad_norm - gs->max_grad_norm == 0.0) ||
                        !(gs->max_loss - gs->max_loss == 0.0);
            fhd__cfg_guard_json(gs, g, sizeof g);
            put(&t, "%s", g);
            break;
        }
        case ST_DIST: {
            char g[128];
            fhd__cfg_dist_json(CFIELD(cfg, k, fhd__dist_spec), g, sizeof g);
            put(&t, "%s", g);
            break;
        }
        }
    }
    put(&t, "}");
    fhd__cfg_schema_free(&s);
    if (t.failed) {
        free(t.p);
        return NULL;
    }
    return t.p;
}
