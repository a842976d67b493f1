/* config.c - JSON config -> fhd__config, validated against the config_schema of manifest.json.
 *
 * Defaults, ranges, enums and limits live only in manifest.json (embedded at build time as
 * fhd__manifest_json). The one table here says which field of fhd__config each key fills and
 * how it is stored. The manifest is parsed on every call (it is small): there is no global
 * mutable state, so every function is thread-safe.
 *
 * Errors name the JSON path first, then the problem, then what is allowed:
 *   $.hidden[1]: 0 is out of range; allowed: integer in [1, 65536]
 */
#include "config.h"

#include <inttypes.h>
#include <jansson.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- the key table -------------------------------------------------------------------------- */

typedef enum {
    ST_INT, ST_U32, ST_U64, ST_BOOL, ST_DOUBLE, ST_ENUM, ST_U32_ARRAY, ST_PATH
} store_kind;

/* S(key, storage) for scalars, A(key, count field, capacity) for arrays of uint32_t. The order is
 * the order of config.h; it decides which missing key and which difference is reported first. */
#define CONFIG_KEYS(S, A)                                                                          \
    S(backend, ST_ENUM)                                                                            \
    S(device, ST_INT)                                                                              \
    S(matmul_precision, ST_ENUM)                                                                   \
    S(autotune, ST_ENUM)                                                                           \
    S(autotune_cache, ST_PATH)                                                                     \
    S(seed, ST_U64)                                                                                \
    S(obs_dim, ST_U32)                                                                             \
    A(actions, num_branches, FHD_MAX_BRANCHES)                                                     \
    A(hidden, num_hidden, FHD_MAX_HIDDEN_LAYERS)                                                   \
    S(dueling, ST_BOOL)                                                                            \
    S(spectral_norm, ST_ENUM)                                                                      \
    S(double_dqn, ST_BOOL)                                                                         \
    S(gamma, ST_DOUBLE)                                                                            \
    S(n_step, ST_U32)                                                                              \
    S(loss, ST_ENUM)                                                                               \
    S(huber_delta, ST_DOUBLE)                                                                      \
    S(cql_alpha, ST_DOUBLE)                                                                        \
    S(optimizer, ST_ENUM)                                                                          \
    S(lr, ST_DOUBLE)                                                                               \
    S(adam_beta1, ST_DOUBLE)                                                                       \
    S(adam_beta2, ST_DOUBLE)                                                                       \
    S(adam_eps, ST_DOUBLE)                                                                         \
    S(weight_decay, ST_DOUBLE)                                                                     \
    S(max_grad_norm, ST_DOUBLE)                                                                    \
    S(target_update_interval, ST_U64)                                                              \
    S(tau, ST_DOUBLE)                                                                              \
    S(batch_size, ST_U32)                                                                          \
    S(learning_starts, ST_U64)                                                                     \
    S(train_freq, ST_U32)                                                                          \
    S(gradient_steps, ST_U32)                                                                      \
    S(num_envs, ST_U32)                                                                            \
    S(replay_capacity, ST_U32)                                                                     \
    S(replay, ST_ENUM)                                                                             \
    S(per_alpha, ST_DOUBLE)                                                                        \
    S(per_beta0, ST_DOUBLE)                                                                        \
    S(per_beta_steps, ST_U64)                                                                      \
    S(per_eps, ST_DOUBLE)                                                                          \
    S(epsilon_start, ST_DOUBLE)                                                                    \
    S(epsilon_end, ST_DOUBLE)                                                                      \
    S(epsilon_decay_steps, ST_U64)

typedef struct key_spec {
    const char *name;
    store_kind kind;
    size_t offset;       /* of the field in fhd__config */
    size_t count_offset; /* arrays: of the uint32_t element count */
    uint32_t capacity;   /* arrays: elements the field holds */
} key_spec;

#define SPEC_S(n, k) {#n, k, offsetof(fhd__config, n), 0, 0},
#define SPEC_A(n, c, cap)                                                                          \
    {#n, ST_U32_ARRAY, offsetof(fhd__config, n), offsetof(fhd__config, c), cap},
static const key_spec specs[] = {CONFIG_KEYS(SPEC_S, SPEC_A)};

#define NAME_S(n, k) #n,
#define NAME_A(n, c, cap) #n,
static const char *const key_names[] = {CONFIG_KEYS(NAME_S, NAME_A) NULL};

#define INDEX_S(n, k) KEY_##n,
#define INDEX_A(n, c, cap) KEY_##n,
enum { CONFIG_KEYS(INDEX_S, INDEX_A) NKEYS };

/* The storage of every field is what the table says it is. */
#define SIZE_ST_INT sizeof(int)
#define SIZE_ST_BOOL sizeof(int)
#define SIZE_ST_ENUM sizeof(int)
#define SIZE_ST_U32 sizeof(uint32_t)
#define SIZE_ST_U64 sizeof(uint64_t)
#define SIZE_ST_DOUBLE sizeof(double)
#define SIZE_ST_PATH FHD_CONFIG_PATH_MAX
#define CHECK_S(n, k)                                                                              \
    _Static_assert(sizeof(((fhd__config *)0)->n) == SIZE_##k, "storage of config field " #n);
#define CHECK_A(n, c, cap)                                                                         \
    _Static_assert(sizeof(((fhd__config *)0)->n) == (cap) * sizeof(uint32_t) &&                    \
                       sizeof(((fhd__config *)0)->c) == sizeof(uint32_t),                          \
                   "storage of config field " #n);
CONFIG_KEYS(CHECK_S, CHECK_A)

#define FIELD(cfg, k, T) ((T *)((char *)(cfg) + (k)->offset))
#define CFIELD(cfg, k, T) ((const T *)((const char *)(cfg) + (k)->offset))

const char *const *fhd__config_keys(void) {
    return key_names;
}

/* ---- the schema, read from the manifest --------------------------------------------------- */

/* Bounds of an integer or number (a scalar key, or the items of an array key). */
typedef struct num_rule {
    int is_int;
    int has_min, has_max, min_excl, max_excl;
    json_int_t imin, imax; /* is_int */
    double dmin, dmax;
} num_rule;

typedef struct key_schema {
    const json_t *def;   /* default value, or NULL for a required key */
    const json_t *enums; /* string keys: array of the allowed strings */
    num_rule num;        /* integer and number keys, items of array keys */
    size_t min_items, max_items;
} key_schema;

typedef struct schema {
    json_t *manifest; /* owns everything below */
    key_schema keys[NKEYS];
    const json_t *overridable;
    json_int_t total_actions_max, param_count_max;
} schema;

/* snprintf for messages that may be cut at `cap`, which is intended. */
static void textf(char *buf, size_t cap, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void textf(char *buf, size_t cap, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, cap, fmt, ap);
    va_end(ap);
}

static const char *schema_type_of(store_kind kind) {
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
        return "array";
    }
    return "";
}

static int load_rule(const json_t *obj, int is_int, num_rule *r) {
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
static int rule_fits(const num_rule *r, store_kind kind) {
    json_int_t lo = 0, hi = (json_int_t)UINT32_MAX;
    if (kind == ST_INT) {
        lo = INT_MIN;
        hi = INT_MAX;
    } else if (kind == ST_U64) {
        hi = (json_int_t)INT64_MAX;
    }
    return r->has_min && r->has_max && r->imin >= lo && r->imax <= hi;
}

static int load_key(const json_t *entry, const key_spec *k, key_schema *ks, char *msg, size_t cap) {
    const char *type = json_string_value(json_object_get(entry, "type"));
    int required = json_is_true(json_object_get(entry, "required"));
    memset(ks, 0, sizeof *ks);
    ks->def = json_object_get(entry, "default");
    if (!type || strcmp(type, schema_type_of(k->kind)) != 0) {
        snprintf(msg, cap, "\"type\" must be \"%s\"", schema_type_of(k->kind));
        return -1;
    }
    if ((ks->def == NULL) == !required) {
        snprintf(msg, cap, "needs exactly one of \"default\" and \"required\": true");
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

static void schema_free(schema *s) {
    json_decref(s->manifest);
    s->manifest = NULL;
}

/* Parse the embedded manifest and resolve the schema of every key of the table. The schema must
 * list exactly the keys of the table, each with a type that matches its storage. */
static int32_t schema_load(schema *s, char *msg, size_t cap) {
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
    if (!json_is_object(cs) || json_object_size(cs) != NKEYS || !json_is_array(s->overridable) ||
        s->total_actions_max <= 0 || s->param_count_max <= 0) {
        snprintf(msg, cap,
                 "config_schema must list the %d keys of the parser; resume_overridable "
                 "and limits total_actions_max, parameter_count_max are required",
                 (int)NKEYS);
        schema_free(s);
        return FHD_ERR_INTERNAL;
    }
    for (size_t i = 0; i < NKEYS; i++) {
        const json_t *entry = json_object_get(cs, specs[i].name);
        char why_key[160] = "is missing";
        if (!json_is_object(entry) ||
            load_key(entry, &specs[i], &s->keys[i], why_key, sizeof why_key) != 0) {
            snprintf(msg, cap, "config_schema.%s %s", specs[i].name, why_key);
            schema_free(s);
            return FHD_ERR_INTERNAL;
        }
    }
    return FHD_OK;
}

/* ---- errors and formatting ----------------------------------------------------------------- */

/* Fill the caller's error struct as far as its struct_size reaches. The message is the path,
 * then the formatted text. */
static int32_t fail(fhd_error *err, int32_t code, int line, int column, const char *path,
                    const char *fmt, ...) {
    char text[FHD_ERROR_MESSAGE_MAX];
    size_t cap;
    va_list ap;
    if (err == NULL || err->struct_size < offsetof(fhd_error, code) + sizeof err->code)
        return code;
    err->code = code;
    if (err->struct_size < offsetof(fhd_error, message) + 1)
        return code;
    err->line = line;
    err->column = column;
    snprintf(err->path, sizeof err->path, "%s", path);
    va_start(ap, fmt);
    vsnprintf(text, sizeof text, fmt, ap);
    va_end(ap);
    cap = err->struct_size - offsetof(fhd_error, message);
    if (cap > sizeof err->message)
        cap = sizeof err->message;
    if (path[0])
        textf(err->message, cap, "%s: %s", path, text);
    else
        snprintf(err->message, cap, "%s", text);
    return code;
}

static void clear_error(fhd_error *err) {
    fail(err, FHD_OK, 0, 0, "", "%s", "");
}

/* Shortest decimal form of `d` that reads back exactly, written as Python's repr writes it:
 * fixed notation for exponents -5 < X < 16, else scientific; always with a '.' or an exponent so
 * that it reads back as a real ("1.0", "0.99", "10.0", "1e-08" -> "1e-8"); independent of the C
 * locale's decimal point. */
static void format_real(double d, char *buf, size_t cap) {
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

static void format_bound(const num_rule *r, int upper, char *buf, size_t cap) {
    size_t n;
    if (r->is_int) {
        snprintf(buf, cap, "%" JSON_INTEGER_FORMAT, upper ? r->imax : r->imin);
        return;
    }
    format_real(upper ? r->dmax : r->dmin, buf, cap);
    n = strlen(buf); /* bounds read better without a trailing ".0" */
    if (n > 2 && strcmp(buf + n - 2, ".0") == 0)
        buf[n - 2] = '\0';
}

/* "integer in [1, 65536]", "number in (0, 1]" */
static void describe_rule(const num_rule *r, char *buf, size_t cap) {
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
static void describe_key(const schema *s, size_t i, char *buf, size_t cap) {
    const key_schema *ks = &s->keys[i];
    char rule[96];
    size_t o;
    switch (specs[i].kind) {
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
        snprintf(buf, cap, "a path of at most %d bytes without control characters, quotes or "
                 "backslashes", FHD_CONFIG_PATH_MAX - 1);
        return;
    case ST_U32_ARRAY:
        describe_rule(&ks->num, rule, sizeof rule);
        snprintf(buf, cap, "array of %zu to %zu items, each an %s", ks->min_items, ks->max_items,
                 rule);
        return;
    default:
        describe_rule(&ks->num, buf, cap);
        return;
    }
}

static const char *json_type_name(const json_t *v) {
    switch (json_typeof(v)) {
    case JSON_OBJECT:
        return "object";
    case JSON_ARRAY:
        return "array";
    case JSON_STRING:
        return "string";
    case JSON_INTEGER:
        return "integer";
    case JSON_REAL:
        return "real number";
    case JSON_TRUE:
    case JSON_FALSE:
        return "boolean";
    case JSON_NULL:
        return "null";
    }
    return "value";
}

/* A number as the user wrote it (integer or real), or a string quoted and shortened. */
static void format_value(const json_t *v, char *buf, size_t cap) {
    if (json_is_integer(v)) {
        snprintf(buf, cap, "%" JSON_INTEGER_FORMAT, json_integer_value(v));
    } else if (json_is_real(v)) {
        format_real(json_real_value(v), buf, cap);
    } else if (json_is_string(v)) {
        const char *str = json_string_value(v);
        size_t o = 0;
        buf[o++] = '"';
        for (size_t i = 0; str[i] && o + 5 < cap && i < 48; i++)
            buf[o++] = ((unsigned char)str[i] < 0x20 || str[i] == '"') ? '?' : str[i];
        buf[o++] = '"';
        buf[o] = '\0';
    } else {
        snprintf(buf, cap, "%s", json_type_name(v));
    }
}

/* Append a key to a JSON path: ".name" for identifiers, else ["...."] with JSON escapes. */
static void path_append_key(char *path, size_t cap, const char *key, size_t klen) {
    size_t o = strlen(path);
    int ident = klen > 0 && !(key[0] >= '0' && key[0] <= '9');
    for (size_t i = 0; i < klen && ident; i++) {
        char c = key[i];
        ident =
            (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
    }
    if (ident) {
        snprintf(path + o, cap - o, ".%.*s", (int)klen, key);
        return;
    }
    if (o + 8 >= cap)
        return;
    o += (size_t)snprintf(path + o, cap - o, "[\"");
    for (size_t i = 0; i < klen && o + 8 < cap; i++) {
        unsigned char c = (unsigned char)key[i];
        if (c == '"' || c == '\\')
            o += (size_t)snprintf(path + o, cap - o, "\\%c", c);
        else if (c < 0x20)
            o += (size_t)snprintf(path + o, cap - o, "\\u%04x", c);
        else
            path[o++] = (char)c;
    }
    snprintf(path + o, cap - o, "\"]");
}

/* The JSON path at byte `pos` of a text that is well-formed up to `pos`: for a jansson error
 * just after a duplicate key or an overflowing number, the path of that key or number. `top`
 * receives the top-level key (or ""). */
static void locate_path(const char *text, size_t pos, char *path, size_t cap, char *top,
                        size_t top_cap) {
    enum { MAX_DEPTH = 16, KEY_MAX = 64 };
    struct {
        int is_object, expect_key;
        size_t index, key_len;
        char key[KEY_MAX];
    } st[MAX_DEPTH];
    char buf[KEY_MAX];
    size_t depth = 0, blen = 0;
    int in_string = 0, escape = 0;
    snprintf(path, cap, "$");
    top[0] = '\0';
    for (size_t i = 0; i < pos; i++) {
        char c = text[i];
        if (in_string) {
            if (escape || (c != '\\' && c != '"')) {
                escape = 0; /* an escaped character is kept as itself: \" -> " */
                if (blen < KEY_MAX)
                    buf[blen++] = c;
            } else if (c == '\\') {
                escape = 1;
            } else {
                in_string = 0;
                if (depth > 0 && depth <= MAX_DEPTH && st[depth - 1].is_object &&
                    st[depth - 1].expect_key) {
                    memcpy(st[depth - 1].key, buf, blen);
                    st[depth - 1].key_len = blen;
                    st[depth - 1].expect_key = 0;
                }
            }
            continue;
        }
        if (c == '"') {
            in_string = 1;
            blen = 0;
        } else if (c == '{' || c == '[') {
            if (depth < MAX_DEPTH) {
                st[depth].is_object = c == '{';
                st[depth].expect_key = 1;
                st[depth].index = 0;
                st[depth].key_len = 0;
            }
            depth++;
        } else if ((c == '}' || c == ']') && depth > 0) {
            depth--;
        } else if (c == ',' && depth > 0 && depth <= MAX_DEPTH) {
            st[depth - 1].index++;
            st[depth - 1].expect_key = 1;
            st[depth - 1].key_len = 0;
        }
    }
    if (depth > MAX_DEPTH)
        return;
    for (size_t d = 0; d < depth; d++) {
        size_t o = strlen(path);
        if (!st[d].is_object) {
            snprintf(path + o, cap - o, "[%zu]", st[d].index);
            continue;
        }
        if (st[d].key_len == 0)
            break;
        path_append_key(path, cap, st[d].key, st[d].key_len);
        if (d == 0)
            snprintf(top, top_cap, "%.*s", (int)st[d].key_len, st[d].key);
    }
}

/* ---- checking and storing values ---------------------------------------------------------- */

static int32_t type_error(fhd_error *err, const char *path, const char *expected, const json_t *v,
                          const char *allowed) {
    char got[64];
    if (json_is_real(v) && strcmp(expected, "an integer") == 0) {
        format_value(v, got, sizeof got);
        return fail(err, FHD_ERR_CONFIG_TYPE, 0, 0, path,
                    "expected an integer, got real number %s (write integers without a "
                    "decimal point or exponent); allowed: %s",
                    got, allowed);
    }
    return fail(err, FHD_ERR_CONFIG_TYPE, 0, 0, path, "expected %s, got %s; allowed: %s", expected,
                json_type_name(v), allowed);
}

/* Check an integer or number against `r`; on success *i or *d receives it. */
static int32_t check_number(const num_rule *r, const json_t *v, const char *path, json_int_t *i,
                            double *d, fhd_error *err) {
    char allowed[96], got[64];
    int below, above;
    describe_rule(r, allowed, sizeof allowed);
    if (r->is_int ? !json_is_integer(v) : !json_is_number(v))
        return type_error(err, path, r->is_int ? "an integer" : "a number", v, allowed);
    if (r->is_int) {
        *i = json_integer_value(v);
        below = r->has_min && (r->min_excl ? *i <= r->imin : *i < r->imin);
        above = r->has_max && (r->max_excl ? *i >= r->imax : *i > r->imax);
    } else {
        *d = json_number_value(v);
        if (*d == 0.0)
            *d = 0.0; /* -0.0 is 0 */
        below = r->has_min && (r->min_excl ? *d <= r->dmin : *d < r->dmin);
        above = r->has_max && (r->max_excl ? *d >= r->dmax : *d > r->dmax);
    }
    if (below || above) {
        format_value(v, got, sizeof got);
        return fail(err, FHD_ERR_CONFIG_RANGE, 0, 0, path, "%s is out of range; allowed: %s", got,
                    allowed);
    }
    return FHD_OK;
}

/* Check value `v` of key i against its schema and store it into cfg. */
static int32_t check_value(const schema *s, size_t i, const json_t *v, fhd__config *cfg,
                           fhd_error *err) {
    const key_spec *k = &specs[i];
    const key_schema *ks = &s->keys[i];
    char path[FHD_ERROR_PATH_MAX], allowed[FHD_ERROR_MESSAGE_MAX / 2], got[64];
    json_int_t iv = 0;
    double dv = 0.0;
    int32_t rc;
    snprintf(path, sizeof path, "$.%s", k->name);
    switch (k->kind) {
    case ST_INT:
    case ST_U32:
    case ST_U64:
    case ST_DOUBLE:
        rc = check_number(&ks->num, v, path, &iv, &dv, err);
        if (rc != FHD_OK)
            return rc;
        if (k->kind == ST_INT)
            *FIELD(cfg, k, int) = (int)iv;
        else if (k->kind == ST_U32)
            *FIELD(cfg, k, uint32_t) = (uint32_t)iv;
        else if (k->kind == ST_U64)
            *FIELD(cfg, k, uint64_t) = (uint64_t)iv;
        else
            *FIELD(cfg, k, double) = dv;
        return FHD_OK;
    case ST_BOOL:
        if (!json_is_boolean(v))
            return type_error(err, path, "a boolean", v, "true or false");
        *FIELD(cfg, k, int) = json_is_true(v);
        return FHD_OK;
    case ST_ENUM:
        describe_key(s, i, allowed, sizeof allowed);
        if (!json_is_string(v))
            return type_error(err, path, "a string", v, allowed);
        for (size_t e = 0; e < json_array_size(ks->enums); e++) {
            if (strcmp(json_string_value(v), json_string_value(json_array_get(ks->enums, e))) ==
                0) {
                *FIELD(cfg, k, int) = (int)e;
                return FHD_OK;
            }
        }
        format_value(v, got, sizeof got);
        return fail(err, FHD_ERR_CONFIG_RANGE, 0, 0, path, "%s is not allowed; allowed: %s", got,
                    allowed);
    case ST_U32_ARRAY: {
        uint32_t *items = FIELD(cfg, k, uint32_t);
        size_t n = json_array_size(v);
        describe_key(s, i, allowed, sizeof allowed);
        if (!json_is_array(v))
            return type_error(err, path, "an array", v, allowed);
        if (n < ks->min_items || n > ks->max_items)
            return fail(err, FHD_ERR_CONFIG_RANGE, 0, 0, path, "array has %zu items; allowed: %s",
                        n, allowed);
        memset(items, 0, k->capacity * sizeof *items);
        for (size_t e = 0; e < n; e++) {
            char ipath[FHD_ERROR_PATH_MAX];
            textf(ipath, sizeof ipath, "%s[%zu]", path, e);
            rc = check_number(&ks->num, json_array_get(v, e), ipath, &iv, &dv, err);
            if (rc != FHD_OK)
                return rc;
            items[e] = (uint32_t)iv;
        }
        *(uint32_t *)((char *)cfg + k->count_offset) = (uint32_t)n;
        return FHD_OK;
    }
    case ST_PATH: {
        describe_key(s, i, allowed, sizeof allowed);
        if (!json_is_string(v))
            return type_error(err, path, "a string", v, allowed);
        const char *str = json_string_value(v);
        size_t n = json_string_length(v);
        int plain = n < FHD_CONFIG_PATH_MAX && strlen(str) == n; /* no NUL inside */
        for (size_t e = 0; plain && e < n; e++)
            plain = (unsigned char)str[e] >= 0x20 && str[e] != 0x7f && str[e] != '"' &&
                    str[e] != '\\';
        if (!plain) {
            format_value(v, got, sizeof got);
            return fail(err, FHD_ERR_CONFIG_RANGE, 0, 0, path, "%s is not allowed; allowed: %s",
                        got, allowed);
        }
        memcpy(FIELD(cfg, k, char), str, n + 1);
        return FHD_OK;
    }
    }
    return fail(err, FHD_ERR_INTERNAL, 0, 0, path, "unknown storage kind");
}

/* ---- unknown keys --------------------------------------------------------------------------- */

/* Levenshtein distance, for keys up to 64 bytes (longer: a large number). */
static size_t edit_distance(const char *a, const char *b) {
    size_t la = strlen(a), lb = strlen(b), row[65];
    if (la > 64 || lb > 64)
        return (size_t)-1;
    for (size_t j = 0; j <= lb; j++)
        row[j] = j;
    for (size_t i = 1; i <= la; i++) {
        size_t diag = row[0];
        row[0] = i;
        for (size_t j = 1; j <= lb; j++) {
            size_t up = row[j];
            size_t best = diag + (a[i - 1] != b[j - 1]);
            if (up + 1 < best)
                best = up + 1;
            if (row[j - 1] + 1 < best)
                best = row[j - 1] + 1;
            row[j] = best;
            diag = up;
        }
    }
    return row[lb];
}

/* The known key nearest to `key` when it is close enough to be a likely typo, or NULL. */
static const char *suggest_key(const char *key) {
    size_t len = strlen(key), best = (size_t)-1;
    const char *found = NULL;
    for (size_t i = 0; i < NKEYS; i++) {
        size_t d = edit_distance(key, specs[i].name);
        if (len >= 4 && strncmp(specs[i].name, key, len) == 0)
            d = 1; /* a prefix: "epsilon_decay" -> "epsilon_decay_steps" */
        if (d < best) {
            best = d;
            found = specs[i].name;
        }
    }
    return (found && best < len && best <= 1 + len / 4) ? found : NULL;
}

static int find_key(const char *key) {
    for (size_t i = 0; i < NKEYS; i++)
        if (strcmp(key, specs[i].name) == 0)
            return (int)i;
    return -1;
}

/* ---- consistency ---------------------------------------------------------------------------- */

static int32_t check_consistency(const schema *s, const fhd__config *c, fhd_error *err) {
    char a[40], b[40];
    uint32_t total = fhd__config_total_actions(c);
    uint64_t params;
    if ((json_int_t)total > s->total_actions_max)
        return fail(err, FHD_ERR_CONFIG_INCONSISTENT, 0, 0, "$.actions",
                    "the branches have %" PRIu32
                    " actions in total; allowed: at most %" JSON_INTEGER_FORMAT " in total",
                    total, s->total_actions_max);
    params = fhd__config_param_count(c);
    if (params > (uint64_t)s->param_count_max)
        return fail(err, FHD_ERR_CONFIG_INCONSISTENT, 0, 0, "$.hidden",
                    "the network would have %" PRIu64 " parameters (weights and biases set by "
                    "obs_dim, hidden, actions and dueling); allowed: at most %" JSON_INTEGER_FORMAT,
                    params, s->param_count_max);
    if (c->batch_size > c->replay_capacity)
        return fail(err, FHD_ERR_CONFIG_INCONSISTENT, 0, 0, "$.batch_size",
                    "%" PRIu32 " is larger than replay_capacity (%" PRIu32
                    "); allowed: integer in [1, replay_capacity]",
                    c->batch_size, c->replay_capacity);
    if (c->n_step > c->replay_capacity)
        return fail(err, FHD_ERR_CONFIG_INCONSISTENT, 0, 0, "$.n_step",
                    "%" PRIu32 " is larger than replay_capacity (%" PRIu32
                    "); allowed: integer in [1, replay_capacity]",
                    c->n_step, c->replay_capacity);
    if (c->epsilon_end > c->epsilon_start) {
        format_real(c->epsilon_end, a, sizeof a);
        format_real(c->epsilon_start, b, sizeof b);
        return fail(err, FHD_ERR_CONFIG_INCONSISTENT, 0, 0, "$.epsilon_end",
                    "%s is larger than epsilon_start (%s); allowed: number in [0, epsilon_start]",
                    a, b);
    }
    if (c->backend == FHD_BACKEND_CPU && c->matmul_precision != FHD_PREC_FP32) {
        const json_t *names = s->keys[KEY_matmul_precision].enums;
        return fail(err, FHD_ERR_CONFIG_INCONSISTENT, 0, 0, "$.matmul_precision",
                    "\"%s\" is not available with backend \"cpu\" (the CPU backend computes in "
                    "fp32 only); allowed: \"fp32\", or backend \"cuda\" or \"auto\"",
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
    for (uint32_t l = 0; l < layers; l++) {
        out = cfg->hidden[l];
        total += out * in + out;
        in = out;
    }
    out = (uint64_t)fhd__config_total_actions(cfg) + (cfg->dueling ? 1u : 0u);
    return total + out * in + out;
}

/* ---- parse ---------------------------------------------------------------------------------- */

/* jansson could not read the text: a syntax error, a duplicate key, or a number too large. */
static int32_t load_error(const schema *s, const char *json, size_t len, const json_error_t *je,
                          fhd_error *err) {
    char path[FHD_ERROR_PATH_MAX], top[64], allowed[FHD_ERROR_MESSAGE_MAX / 2];
    int line = je->line > 0 ? je->line : 1, column = je->column > 0 ? je->column : 1;
    size_t pos = je->position > 0 ? (size_t)je->position : 0;
    int key;
    if (pos > len)
        pos = len;
    switch (json_error_code(je)) {
    case json_error_out_of_memory:
        return fail(err, FHD_ERR_OUT_OF_MEMORY, 0, 0, "", "out of memory while reading the config");
    case json_error_duplicate_key:
        locate_path(json, pos, path, sizeof path, top, sizeof top);
        return fail(err, FHD_ERR_CONFIG_SYNTAX, line, column, path,
                    "duplicate key at line %d, column %d; allowed: each key once", line, column);
    case json_error_numeric_overflow:
        locate_path(json, pos, path, sizeof path, top, sizeof top);
        key = find_key(top);
        if (key >= 0 && specs[key].kind == ST_U32_ARRAY && strchr(path, '['))
            describe_rule(&s->keys[key].num, allowed, sizeof allowed); /* an item */
        else if (key >= 0)
            describe_key(s, (size_t)key, allowed, sizeof allowed);
        else
            snprintf(allowed, sizeof allowed, "a number that fits a 64-bit integer or a double");
        return fail(err, FHD_ERR_CONFIG_RANGE, line, column, path,
                    "%s at line %d, column %d; allowed: %s", je->text, line, column, allowed);
    default:
        return fail(err, FHD_ERR_CONFIG_SYNTAX, line, column, "",
                    "invalid JSON at line %d, column %d: %s", line, column, je->text);
    }
}

static int32_t parse_object(const schema *s, const json_t *root, fhd__config *cfg, fhd_error *err) {
    unsigned char given[NKEYS] = {0};
    const char *key;
    const json_t *value;
    char path[FHD_ERROR_PATH_MAX], allowed[FHD_ERROR_MESSAGE_MAX / 2];
    int32_t rc;

    if (!json_is_object(root))
        return fail(err, FHD_ERR_CONFIG_TYPE, 0, 0, "$",
                    "expected an object, got %s; allowed: an object of the keys of "
                    "config_schema in manifest.json",
                    json_type_name(root));
    for (size_t i = 0; i < NKEYS; i++) {
        fhd_error why = FHD_ERROR_INIT;
        if (s->keys[i].def && check_value(s, i, s->keys[i].def, cfg, &why) != FHD_OK)
            return fail(err, FHD_ERR_INTERNAL, 0, 0, "",
                        "manifest.json embedded in the library is invalid: the default of %s: %s",
                        specs[i].name, why.message);
    }
    /* jansson keeps the document order, so the first bad key of the text is reported. */
    json_object_foreach((json_t *)root, key, value) {
        int i = find_key(key);
        if (i < 0) {
            const char *near = suggest_key(key);
            snprintf(path, sizeof path, "$");
            path_append_key(path, sizeof path, key, strlen(key));
            if (near)
                return fail(err, FHD_ERR_CONFIG_UNKNOWN_KEY, 0, 0, path,
                            "unknown key; did you mean \"%s\"?", near);
            return fail(err, FHD_ERR_CONFIG_UNKNOWN_KEY, 0, 0, path,
                        "unknown key; allowed: the keys of config_schema in manifest.json");
        }
        rc = check_value(s, (size_t)i, value, cfg, err);
        if (rc != FHD_OK)
            return rc;
        given[i] = 1;
    }
    for (size_t i = 0; i < NKEYS; i++) {
        if (!given[i] && !s->keys[i].def) {
            snprintf(path, sizeof path, "$.%s", specs[i].name);
            describe_key(s, i, allowed, sizeof allowed);
            return fail(err, FHD_ERR_CONFIG_MISSING, 0, 0, path,
                        "required key is missing; allowed: %s", allowed);
        }
    }
    return check_consistency(s, cfg, err);
}

int32_t fhd__config_parse(const char *json, size_t len, fhd__config *cfg, fhd_error *err) {
    schema s;
    fhd__config out;
    json_error_t je;
    json_t *root;
    char msg[FHD_ERROR_MESSAGE_MAX];
    int32_t rc;

    if (json == NULL || cfg == NULL)
        return fail(err, FHD_ERR_NULL_POINTER, 0, 0, "", "%s is NULL",
                    json == NULL ? "the config text" : "the config output");
    rc = schema_load(&s, msg, sizeof msg);
    if (rc != FHD_OK)
        return fail(err, rc, 0, 0, "",
                    rc == FHD_ERR_OUT_OF_MEMORY
                        ? "%s"
                        : "manifest.json embedded in the library is invalid: %s",
                    msg);
    root = json_loadb(json, len, JSON_REJECT_DUPLICATES | JSON_DECODE_ANY, &je);
    if (root == NULL) {
        rc = load_error(&s, json, len, &je, err);
        schema_free(&s);
        return rc;
    }
    memset(&out, 0, sizeof out);
    rc = parse_object(&s, root, &out, err);
    json_decref(root);
    schema_free(&s);
    if (rc != FHD_OK)
        return rc;
    *cfg = out;
    clear_error(err);
    return FHD_OK;
}

/* ---- serialise and compare ------------------------------------------------------------------ */

static int key_equal(const key_spec *k, const fhd__config *a, const fhd__config *b) {
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
        if (!key_equal(&specs[i], a, b) && !listed(overridable, specs[i].name))
            found = specs[i].name;
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
    return strcmp(specs[*(const size_t *)x].name, specs[*(const size_t *)y].name);
}

char *fhd__config_to_json(const fhd__config *cfg) {
    enum { CAP = 8192 }; /* 38 keys and 72 array entries need about 1.5 KB */
    schema s;
    char msg[FHD_ERROR_MESSAGE_MAX], num[40];
    size_t order[NKEYS];
    text t = {NULL, 0, CAP, 0};

    if (cfg == NULL || schema_load(&s, msg, sizeof msg) != FHD_OK)
        return NULL;
    t.p = malloc(CAP);
    if (t.p == NULL) {
        schema_free(&s);
        return NULL;
    }
    for (size_t i = 0; i < NKEYS; i++)
        order[i] = i;
    qsort(order, NKEYS, sizeof order[0], by_name);
    put(&t, "{");
    for (size_t o = 0; o < NKEYS; o++) {
        const key_spec *k = &specs[order[o]];
        put(&t, "%s\"%s\":", o ? "," : "", k->name);
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
            format_real(d, num, sizeof num);
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
        }
    }
    put(&t, "}");
    schema_free(&s);
    if (t.failed) {
        free(t.p);
        return NULL;
    }
    return t.p;
}
