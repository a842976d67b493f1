/* config_schema.c - the key table and the config schema read from manifest.json.
 *
 * Defaults, ranges, enums and limits live only in manifest.json (embedded at build time as
 * fhd__manifest_json). The one table (config_internal.h) says which field of fhd__config each
 * key fills and how it is stored. The manifest is parsed on every call (it is small): there is
 * no global mutable state, so every function is thread-safe.
 */
#include <inttypes.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config_internal.h"

/* ---- the key table -------------------------------------------------------------------------- */

#define SPEC_S(n, k) {#n, k, offsetof(fhd__config, n), 0, 0},
#define SPEC_A(n, c, cap)                                                                          \
    {#n, ST_U32_ARRAY, offsetof(fhd__config, n), offsetof(fhd__config, c), cap},
#define SPEC_C(n, c, cap)                                                                          \
    {#n, ST_CONV_LIST, offsetof(fhd__config, n), offsetof(fhd__config, c), cap},
const fhd__cfg_key_spec fhd__cfg_specs[NKEYS] = {CONFIG_KEYS(SPEC_S, SPEC_A, SPEC_C)};

#define NAME_S(n, k) #n,
#define NAME_A(n, c, cap) #n,
static const char *const key_names[] = {CONFIG_KEYS(NAME_S, NAME_A, NAME_A) NULL};

const char *const fhd__cfg_conv_fields[FHD_CONV_FIELDS] = {"out", "kernel", "stride", "padding"};

/* The storage of every field is what the table says it is. */
#define SIZE_ST_INT sizeof(int)
#define SIZE_ST_BOOL sizeof(int)
#define SIZE_ST_ENUM sizeof(int)
#define SIZE_ST_U32 sizeof(uint32_t)
#define SIZE_ST_U64 sizeof(uint64_t)
#define SIZE_ST_DOUBLE sizeof(double)
#define SIZE_ST_PATH FHD_CONFIG_PATH_MAX
#define SIZE_ST_GUARD sizeof(fhd__guard_spec)
#define SIZE_ST_DIST sizeof(fhd__dist_spec)
#define CHECK_S(n, k)                                                                              \
    _Static_assert(sizeof(((fhd__config *)0)->n) == SIZE_##k, "storage of config field " #n);
#define CHECK_A(n, c, cap)                                                                         \
    _Static_assert(sizeof(((fhd__config *)0)->n) == (cap) * sizeof(uint32_t) &&                    \
                       sizeof(((fhd__config *)0)->c) == sizeof(uint32_t),                          \
                   "storage of config field " #n);
#define CHECK_C(n, c, cap)                                                                         \
    _Static_assert(sizeof(((fhd__config *)0)->n) == (cap) * sizeof(fhd__conv_spec) &&              \
                       sizeof(fhd__conv_spec) == FHD_CONV_FIELDS * sizeof(uint32_t) &&             \
                       sizeof(((fhd__config *)0)->c) == sizeof(uint32_t),                          \
                   "storage of config field " #n);
CONFIG_KEYS(CHECK_S, CHECK_A, CHECK_C)

const char *const *fhd__config_keys(void) {
    return key_names;
}

int fhd__cfg_find_key(const char *key) {
    for (size_t i = 0; i < NKEYS; i++)
        if (strcmp(key, fhd__cfg_specs[i].name) == 0)
            return (int)i;
    return -1;
}

/* ---- the schema, read from the manifest ----------------------------------------------------- */

void fhd__cfg_textf(char *buf, size_t cap, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, cap, fmt, ap);
    va_end(ap);
}

static const char *schema_type_of(fhd__cfg_store_kind kind) {
    switch (kind) {
    case ST_INT:
    case ST_U32:
    case ST_U64:
        return "integer";
    case ST_BOOL:
        return "boolean";
    case ST_DOUBLE:
        return "number";
    case ST_ENUM:
    case ST_PATH:
        return "string";
    case ST_U32_ARRAY:
    case ST_CONV_LIST:
        return "array";
    case ST_GUARD:
    case ST_DIST:
        return "object";
    }
    return "";
}

static int load_rule(const json_t *obj, int is_int, fhd__cfg_num_rule *r) {
    const json_t *mn = json_object_get(obj, "minimum");
    const json_t *mx = json_object_get(obj, "maximum");
    memset(r, 0, sizeof *r);
    r->is_int = is_int;
    r->has_min = mn != NULL;
    r->has_max = mx != NULL;
    r->min_excl = json_is_true(json_object_get(obj, "exclusive_minimum"));
    r->max_excl = json_is_true(json_object_get(obj, "exclusive_maximum"));
    if (is_int) {
        if ((mn && !json_is_integer(mn)) || (mx && !json_is_integer(mx)))
            return -1;
        r->imin = mn ? json_integer_value(mn) : 0;
        r->imax = mx ? json_integer_value(mx) : 0;
    } else {
        if ((mn && !json_is_number(mn)) || (mx && !json_is_number(mx)))
            return -1;
        r->dmin = mn ? json_number_value(mn) : 0.0;
        r->dmax = mx ? json_number_value(mx) : 0.0;
    }
    return 0;
}

/* Integer fields must have both bounds, inside what their storage holds. */
static int rule_fits(const fhd__cfg_num_rule *r, fhd__cfg_store_kind kind) {
    json_int_t lo = 0, hi = (json_int_t)UINT32_MAX;
    if (kind == ST_INT) {
        lo = INT_MIN;
        hi = INT_MAX;
    } else if (kind == ST_U64) {
        hi = (json_int_t)INT64_MAX;
    }
    return r->has_min && r->has_max && r->imin >= lo && r->imax <= hi;
}

static int load_key(const json_t *entry, const fhd__cfg_key_spec *k, fhd__cfg_key_schema *ks,
                    char *msg, size_t cap) {
    const char *type = json_string_value(json_object_get(entry, "type"));
    int required = json_is_true(json_object_get(entry, "required"));
    const char *unless = json_string_value(json_object_get(entry, "required_unless"));
    memset(ks, 0, sizeof *ks);
    ks->def = json_object_get(entry, "default");
    if (!type || strcmp(type, schema_type_of(k->kind)) != 0) {
        snprintf(msg, cap, "\"type\" must be \"%s\"", schema_type_of(k->kind));
        return -1;
    }
    ks->required_unless = unless ? fhd__cfg_find_key(unless) : -1;
    if ((ks->def != NULL) + required + (unless != NULL) != 1 ||
        (unless && ks->required_unless < 0)) {
        snprintf(msg, cap,
                 "needs exactly one of \"default\", \"required\": true and "
                 "\"required_unless\": a key");
        return -1;
    }
    switch (k->kind) {
    case ST_INT:
    case ST_U32:
    case ST_U64:
        if (load_rule(entry, 1, &ks->num) != 0 || !rule_fits(&ks->num, k->kind)) {
            snprintf(msg, cap, "needs integer bounds that the field can hold");
            return -1;
        }
        break;
    case ST_DOUBLE:
        if (load_rule(entry, 0, &ks->num) != 0) {
            snprintf(msg, cap, "has bounds that are not numbers");
            return -1;
        }
        break;
    case ST_ENUM:
        ks->enums = json_object_get(entry, "enum");
        if (!json_is_array(ks->enums) || json_array_size(ks->enums) == 0) {
            snprintf(msg, cap, "needs a non-empty \"enum\" list");
            return -1;
        }
        for (size_t i = 0; i < json_array_size(ks->enums); i++) {
            if (!json_is_string(json_array_get(ks->enums, i))) {
                snprintf(msg, cap, "has an \"enum\" entry that is not a string");
                return -1;
            }
        }
        break;
    case ST_U32_ARRAY: {
        const json_t *items = json_object_get(entry, "items");
        const json_t *mn = json_object_get(entry, "min_items");
        const json_t *mx = json_object_get(entry, "max_items");
        const char *itype = json_string_value(json_object_get(items, "type"));
        if (!itype || strcmp(itype, "integer") != 0 || load_rule(items, 1, &ks->num) != 0 ||
            !rule_fits(&ks->num, ST_U32) || !json_is_integer(mn) || !json_is_integer(mx) ||
            json_integer_value(mn) < 0 || json_integer_value(mx) < json_integer_value(mn) ||
            json_integer_value(mx) > (json_int_t)k->capacity) {
            snprintf(msg, cap, "needs integer items with bounds and min_items <= max_items <= %u",
                     k->capacity);
            return -1;
        }
        ks->min_items = (size_t)json_integer_value(mn);
        ks->max_items = (size_t)json_integer_value(mx);
        break;
    }
    case ST_CONV_LIST: {
        /* items: {"type": "object", "properties": {field: {"type": "integer", bounds[,
         * "default"]}}}; a field without a default is required in each item */
        const json_t *items = json_object_get(entry, "items");
        const json_t *props = json_object_get(items, "properties");
        const json_t *mn = json_object_get(entry, "min_items");
        const json_t *mx = json_object_get(entry, "max_items");
        const char *itype = json_string_value(json_object_get(items, "type"));
        if (!itype || strcmp(itype, "object") != 0 || !json_is_object(props) ||
            json_object_size(props) != FHD_CONV_FIELDS || !json_is_integer(mn) ||
            !json_is_integer(mx) || json_integer_value(mn) < 0 ||
            json_integer_value(mx) < json_integer_value(mn) ||
            json_integer_value(mx) > (json_int_t)k->capacity) {
            snprintf(msg, cap,
                     "needs object items with the properties out, kernel, stride, "
                     "padding and min_items <= max_items <= %u",
                     k->capacity);
            return -1;
        }
        for (int f = 0; f < FHD_CONV_FIELDS; f++) {
            const json_t *fe = json_object_get(props, fhd__cfg_conv_fields[f]);
            const char *ft = json_string_value(json_object_get(fe, "type"));
            if (!ft || strcmp(ft, "integer") != 0 || load_rule(fe, 1, &ks->conv[f]) != 0 ||
                !rule_fits(&ks->conv[f], ST_U32)) {
                snprintf(msg, cap, "items.properties.%s needs integer bounds of 32 bits",
                         fhd__cfg_conv_fields[f]);
                return -1;
            }
            ks->conv_def[f] = json_object_get(fe, "default");
        }
        ks->min_items = (size_t)json_integer_value(mn);
        ks->max_items = (size_t)json_integer_value(mx);
        break;
    }
    case ST_GUARD:
        if (fhd__cfg_load_guard(entry, ks, msg, cap) != 0)
            return -1;
        break;
    case ST_DIST:
        if (fhd__cfg_load_dist(entry, ks, msg, cap) != 0)
            return -1;
        break;
    case ST_BOOL:
        break;
    case ST_PATH: /* a free string: no enum, max_length bytes at most */
        if (json_object_get(entry, "enum") ||
            json_integer_value(json_object_get(entry, "max_length")) != FHD_CONFIG_PATH_MAX - 1) {
            snprintf(msg, cap, "needs no \"enum\" and \"max_length\": %d", FHD_CONFIG_PATH_MAX - 1);
            return -1;
        }
        break;
    }
    return 0;
}

void fhd__cfg_schema_free(fhd__cfg_schema *s) {
    json_decref(s->manifest);
    s->manifest = NULL;
}

/* Parse the embedded manifest and resolve the fhd__cfg_schema of every key of the table. The
 * fhd__cfg_schema must list exactly the keys of the table, each with a type that matches its
 * storage. */
int32_t fhd__cfg_schema_load(fhd__cfg_schema *s, char *msg, size_t cap) {
    json_error_t jerr;
    const json_t *cs, *limits;
    memset(s, 0, sizeof *s);
    s->manifest = json_loads(fhd__manifest_json, 0, &jerr);
    if (!s->manifest) {
        /* The embedded text is valid JSON (tests/config parses it), so this is an allocation
         * failure, whatever error jansson's lexer reports for it (akheron/jansson#362). */
        snprintf(msg, cap, "out of memory while parsing the embedded manifest.json (line %d: %s)",
                 jerr.line, jerr.text);
        return FHD_ERR_OUT_OF_MEMORY;
    }
    cs = json_object_get(s->manifest, "config_schema");
    limits = json_object_get(s->manifest, "limits");
    s->overridable = json_object_get(s->manifest, "resume_overridable");
    s->total_actions_max = json_integer_value(json_object_get(limits, "total_actions_max"));
    s->param_count_max = json_integer_value(json_object_get(limits, "parameter_count_max"));
    s->replay_bytes_max = json_integer_value(json_object_get(limits, "replay_bytes_max"));
    s->conv_values_max = json_integer_value(json_object_get(limits, "conv_values_max"));
    if (!json_is_object(cs) || json_object_size(cs) != NKEYS || !json_is_array(s->overridable) ||
        s->total_actions_max <= 0 || s->param_count_max <= 0 || s->replay_bytes_max <= 0 ||
        s->conv_values_max <= 0) {
        snprintf(msg, cap,
                 "config_schema must list the %d keys of the parser; resume_overridable "
                 "and limits total_actions_max, parameter_count_max, replay_bytes_max, "
                 "conv_values_max are required",
                 (int)NKEYS);
        fhd__cfg_schema_free(s);
        return FHD_ERR_INTERNAL;
    }
    for (size_t i = 0; i < NKEYS; i++) {
        const json_t *entry = json_object_get(cs, fhd__cfg_specs[i].name);
        char why_key[160] = "is missing";
        if (!json_is_object(entry) ||
            load_key(entry, &fhd__cfg_specs[i], &s->keys[i], why_key, sizeof why_key) != 0) {
            snprintf(msg, cap, "config_schema.%s %s", fhd__cfg_specs[i].name, why_key);
            fhd__cfg_schema_free(s);
            return FHD_ERR_INTERNAL;
        }
    }
    return FHD_OK;
}

/* ---- descriptions for messages ------------------------------------------------------------- */

/* Shortest decimal form of `d` that reads back exactly, written as Python's repr writes it:
 * fixed notation for exponents -5 < X < 16, else scientific; always with a '.' or an exponent so
 * that it reads back as a real ("1.0", "0.99", "10.0", "1e-08" -> "1e-8"); independent of the C
 * locale's decimal point. */
void fhd__cfg_format_real(double d, char *buf, size_t cap) {
    char tmp[48], out[48];
    size_t o = 0;
    int prec = 1, exp10;
    if (d - d != 0.0) { /* NaN and infinities: no JSON form; callers reject them */
        snprintf(buf, cap, "%s", d != d ? "nan" : d < 0 ? "-inf" : "inf");
        return;
    }
    for (; prec < 17; prec++) {
        snprintf(tmp, sizeof tmp, "%.*e", prec - 1, d);
        if (strtod(tmp, NULL) == d)
            break;
    }
    snprintf(tmp, sizeof tmp, "%.*e", prec - 1, d);
    exp10 = atoi(strchr(tmp, 'e') + 1);
    if (d == 0.0 || (exp10 > -5 && exp10 < 16)) {
        int decimals = prec - 1 - exp10;
        snprintf(tmp, sizeof tmp, "%.*f", decimals > 0 ? decimals : 0, d);
    }
    for (const char *p = tmp; *p && o + 3 < sizeof out; p++) {
        if (*p == 'e') {
            int e = atoi(p + 1);
            snprintf(out + o, sizeof out - o, "e%d", e);
            o = strlen(out);
            break;
        }
        out[o++] = (*p >= '0' && *p <= '9') || *p == '-' ? *p : '.'; /* the locale's point */
    }
    out[o] = '\0';
    if (!strpbrk(out, ".e")) {
        out[o++] = '.';
        out[o++] = '0';
        out[o] = '\0';
    }
    snprintf(buf, cap, "%s", out);
}

static void format_bound(const fhd__cfg_num_rule *r, int upper, char *buf, size_t cap) {
    size_t n;
    if (r->is_int) {
        snprintf(buf, cap, "%" JSON_INTEGER_FORMAT, upper ? r->imax : r->imin);
        return;
    }
    fhd__cfg_format_real(upper ? r->dmax : r->dmin, buf, cap);
    n = strlen(buf); /* bounds read better without a trailing ".0" */
    if (n > 2 && strcmp(buf + n - 2, ".0") == 0)
        buf[n - 2] = '\0';
}

/* "integer in [1, 65536]", "number in (0, 1]" */
void fhd__cfg_describe_rule(const fhd__cfg_num_rule *r, char *buf, size_t cap) {
    char lo[40], hi[40];
    const char *what = r->is_int ? "integer" : "number";
    format_bound(r, 0, lo, sizeof lo);
    format_bound(r, 1, hi, sizeof hi);
    if (r->has_min && r->has_max)
        snprintf(buf, cap, "%s in %c%s, %s%c", what, r->min_excl ? '(' : '[', lo, hi,
                 r->max_excl ? ')' : ']');
    else if (r->has_min)
        snprintf(buf, cap, "%s %s %s", what, r->min_excl ? ">" : ">=", lo);
    else if (r->has_max)
        snprintf(buf, cap, "%s %s %s", what, r->max_excl ? "<" : "<=", hi);
    else
        snprintf(buf, cap, "any %s", what);
}

/* What key i allows, for messages. */
void fhd__cfg_describe_key(const fhd__cfg_schema *s, size_t i, char *buf, size_t cap) {
    const fhd__cfg_key_schema *ks = &s->keys[i];
    char rule[96];
    size_t o;
    switch (fhd__cfg_specs[i].kind) {
    case ST_BOOL:
        snprintf(buf, cap, "true or false");
        return;
    case ST_ENUM:
        o = (size_t)snprintf(buf, cap, "one of");
        for (size_t e = 0; e < json_array_size(ks->enums) && o < cap; e++)
            o += (size_t)snprintf(buf + o, cap - o, "%s \"%s\"", e ? "," : "",
                                  json_string_value(json_array_get(ks->enums, e)));
        return;
    case ST_PATH:
        snprintf(buf, cap,
                 "a path of at most %d bytes without control characters, quotes or "
                 "backslashes",
                 FHD_CONFIG_PATH_MAX - 1);
        return;
    case ST_GUARD:
        fhd__cfg_describe_guard(ks, buf, cap);
        return;
    case ST_DIST:
        fhd__cfg_describe_dist(ks, buf, cap);
        return;
    case ST_CONV_LIST:
        snprintf(buf, cap,
                 "array of %zu to %zu objects {\"out\": channels, \"kernel\": size, "
                 "\"stride\": step[, \"padding\": zeros]}",
                 ks->min_items, ks->max_items);
        return;
    case ST_U32_ARRAY:
        fhd__cfg_describe_rule(&ks->num, rule, sizeof rule);
        snprintf(buf, cap, "array of %zu to %zu items, each an %s", ks->min_items, ks->max_items,
                 rule);
        return;
    default:
        fhd__cfg_describe_rule(&ks->num, buf, cap);
        return;
    }
}
