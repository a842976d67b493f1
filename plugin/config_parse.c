/* config_parse.c - the JSON walk of the config: every key checked against its schema entry
 * (type, range, enum, items) and stored, unknown keys with a suggestion, syntax errors with
 * line, column and the JSON path, then the consistency checks of config_check.c.
 *
 * Errors name the JSON path first, then the problem, then what is allowed:
 *   $.hidden[1]: 0 is out of range; allowed: integer in [1, 65536]
 */
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config_internal.h"

/* ---- errors and formatting ------------------------------------------------------------------ */

int32_t fhd__cfg_fail(fhd_error *err, int32_t code, int line, int column, const char *path,
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
        fhd__cfg_textf(err->message, cap, "%s: %s", path, text);
    else
        snprintf(err->message, cap, "%s", text);
    return code;
}

static void clear_error(fhd_error *err) {
    fhd__cfg_fail(err, FHD_OK, 0, 0, "", "%s", "");
}

const char *fhd__cfg_json_type_name(const json_t *v) {
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
        fhd__cfg_format_real(json_real_value(v), buf, cap);
    } else if (json_is_string(v)) {
        const char *str = json_string_value(v);
        size_t o = 0;
        buf[o++] = '"';
        for (size_t i = 0; str[i] && o + 5 < cap && i < 48; i++)
            buf[o++] = ((unsigned char)str[i] < 0x20 || str[i] == '"') ? '?' : str[i];
        buf[o++] = '"';
        buf[o] = '\0';
    } else {
        snprintf(buf, cap, "%s", fhd__cfg_json_type_name(v));
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

int32_t fhd__cfg_type_error(fhd_error *err, const char *path, const char *expected, const json_t *v,
                            const char *allowed) {
    char got[64];
    if (json_is_real(v) && strcmp(expected, "an integer") == 0) {
        format_value(v, got, sizeof got);
        return fhd__cfg_fail(err, FHD_ERR_CONFIG_TYPE, 0, 0, path,
                             "expected an integer, got real number %s (write integers without a "
                             "decimal point or exponent); allowed: %s",
                             got, allowed);
    }
    return fhd__cfg_fail(err, FHD_ERR_CONFIG_TYPE, 0, 0, path, "expected %s, got %s; allowed: %s",
                         expected, fhd__cfg_json_type_name(v), allowed);
}

/* Check an integer or number against `r`; on success *i or *d receives it. */
int32_t fhd__cfg_check_number(const fhd__cfg_num_rule *r, const json_t *v, const char *path,
                              json_int_t *i, double *d, fhd_error *err) {
    char allowed[96], got[64];
    int below, above;
    fhd__cfg_describe_rule(r, allowed, sizeof allowed);
    if (r->is_int ? !json_is_integer(v) : !json_is_number(v))
        return fhd__cfg_type_error(err, path, r->is_int ? "an integer" : "a number", v, allowed);
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
        return fhd__cfg_fail(err, FHD_ERR_CONFIG_RANGE, 0, 0, path,
                             "%s is out of range; allowed: %s", got, allowed);
    }
    return FHD_OK;
}

/* Check value `v` of key i against its fhd__cfg_schema and store it into cfg. */
static int32_t check_value(const fhd__cfg_schema *s, size_t i, const json_t *v, fhd__config *cfg,
                           fhd_error *err) {
    const fhd__cfg_key_spec *k = &fhd__cfg_specs[i];
    const fhd__cfg_key_schema *ks = &s->keys[i];
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
        rc = fhd__cfg_check_number(&ks->num, v, path, &iv, &dv, err);
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
            return fhd__cfg_type_error(err, path, "a boolean", v, "true or false");
        *FIELD(cfg, k, int) = json_is_true(v);
        return FHD_OK;
    case ST_ENUM:
        fhd__cfg_describe_key(s, i, allowed, sizeof allowed);
        if (!json_is_string(v))
            return fhd__cfg_type_error(err, path, "a string", v, allowed);
        for (size_t e = 0; e < json_array_size(ks->enums); e++) {
            if (strcmp(json_string_value(v), json_string_value(json_array_get(ks->enums, e))) ==
                0) {
                *FIELD(cfg, k, int) = (int)e;
                return FHD_OK;
            }
        }
        format_value(v, got, sizeof got);
        return fhd__cfg_fail(err, FHD_ERR_CONFIG_RANGE, 0, 0, path,
                             "%s is not allowed; allowed: %s", got, allowed);
    case ST_U32_ARRAY: {
        uint32_t *items = FIELD(cfg, k, uint32_t);
        size_t n = json_array_size(v);
        fhd__cfg_describe_key(s, i, allowed, sizeof allowed);
        if (!json_is_array(v))
            return fhd__cfg_type_error(err, path, "an array", v, allowed);
        if (n < ks->min_items || n > ks->max_items)
            return fhd__cfg_fail(err, FHD_ERR_CONFIG_RANGE, 0, 0, path,
                                 "array has %zu items; allowed: %s", n, allowed);
        memset(items, 0, k->capacity * sizeof *items);
        for (size_t e = 0; e < n; e++) {
            char ipath[FHD_ERROR_PATH_MAX];
            fhd__cfg_textf(ipath, sizeof ipath, "%s[%zu]", path, e);
            rc = fhd__cfg_check_number(&ks->num, json_array_get(v, e), ipath, &iv, &dv, err);
            if (rc != FHD_OK)
                return rc;
            items[e] = (uint32_t)iv;
        }
        *(uint32_t *)((char *)cfg + k->count_offset) = (uint32_t)n;
        return FHD_OK;
    }
    case ST_CONV_LIST:
        return fhd__cfg_store_conv(s, i, v, cfg, err);
    case ST_GUARD:
        return fhd__cfg_store_guard(s, i, v, cfg, err);
    case ST_DIST:
        return fhd__cfg_store_dist(s, i, v, cfg, err);
    case ST_PATH: {
        fhd__cfg_describe_key(s, i, allowed, sizeof allowed);
        if (!json_is_string(v))
            return fhd__cfg_type_error(err, path, "a string", v, allowed);
        const char *str = json_string_value(v);
        size_t n = json_string_length(v);
        int plain = n < FHD_CONFIG_PATH_MAX && strlen(str) == n; /* no NUL inside */
        for (size_t e = 0; plain && e < n; e++)
            plain = (unsigned char)str[e] >= 0x20 && str[e] != 0x7f && str[e] != '"' &&
                    str[e] != '\\';
        if (!plain) {
            format_value(v, got, sizeof got);
            return fhd__cfg_fail(err, FHD_ERR_CONFIG_RANGE, 0, 0, path,
                                 "%s is not allowed; allowed: %s", got, allowed);
        }
        memcpy(FIELD(cfg, k, char), str, n + 1);
        return FHD_OK;
    }
    }
    return fhd__cfg_fail(err, FHD_ERR_INTERNAL, 0, 0, path, "unknown storage kind");
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

/* The name among `names` nearest to `key` when it is close enough to be a likely typo, or
 * NULL. */
const char *fhd__cfg_suggest(const char *key, const char *const *names, size_t n) {
    size_t len = strlen(key), best = (size_t)-1;
    const char *found = NULL;
    for (size_t i = 0; i < n; i++) {
        size_t d = edit_distance(key, names[i]);
        if (len >= 4 && strncmp(names[i], key, len) == 0)
            d = 1; /* a prefix: "epsilon_decay" -> "epsilon_decay_steps" */
        if (d < best) {
            best = d;
            found = names[i];
        }
    }
    return (found && best < len && best <= 1 + len / 4) ? found : NULL;
}

/* ---- parse ---------------------------------------------------------------------------------- */

/* jansson could not read the text: a syntax error, a duplicate key, or a number too large. */
static int32_t load_error(const fhd__cfg_schema *s, const char *json, size_t len,
                          const json_error_t *je, fhd_error *err) {
    char path[FHD_ERROR_PATH_MAX], top[64], allowed[FHD_ERROR_MESSAGE_MAX / 2];
    int line = je->line > 0 ? je->line : 1, column = je->column > 0 ? je->column : 1;
    size_t pos = je->position > 0 ? (size_t)je->position : 0;
    int key;
    if (pos > len)
        pos = len;
    switch (json_error_code(je)) {
    case json_error_out_of_memory:
        return fhd__cfg_fail(err, FHD_ERR_OUT_OF_MEMORY, 0, 0, "",
                             "out of memory while reading the config");
    case json_error_duplicate_key:
        locate_path(json, pos, path, sizeof path, top, sizeof top);
        return fhd__cfg_fail(err, FHD_ERR_CONFIG_SYNTAX, line, column, path,
                             "duplicate key at line %d, column %d; allowed: each key once", line,
                             column);
    case json_error_numeric_overflow:
        locate_path(json, pos, path, sizeof path, top, sizeof top);
        key = fhd__cfg_find_key(top);
        if (key >= 0 && fhd__cfg_specs[key].kind == ST_U32_ARRAY && strchr(path, '['))
            fhd__cfg_describe_rule(&s->keys[key].num, allowed, sizeof allowed); /* an item */
        else if (key >= 0)
            fhd__cfg_describe_key(s, (size_t)key, allowed, sizeof allowed);
        else
            snprintf(allowed, sizeof allowed, "a number that fits a 64-bit integer or a double");
        return fhd__cfg_fail(err, FHD_ERR_CONFIG_RANGE, line, column, path,
                             "%s at line %d, column %d; allowed: %s", je->text, line, column,
                             allowed);
    default:
        return fhd__cfg_fail(err, FHD_ERR_CONFIG_SYNTAX, line, column, "",
                             "invalid JSON at line %d, column %d: %s", line, column, je->text);
    }
}

static int32_t parse_object(const fhd__cfg_schema *s, const json_t *root, fhd__config *cfg,
                            fhd_error *err) {
    unsigned char given[NKEYS] = {0};
    const char *key;
    const json_t *value;
    char path[FHD_ERROR_PATH_MAX], allowed[FHD_ERROR_MESSAGE_MAX / 2];
    int32_t rc;

    if (!json_is_object(root))
        return fhd__cfg_fail(err, FHD_ERR_CONFIG_TYPE, 0, 0, "$",
                             "expected an object, got %s; allowed: an object of the keys of "
                             "config_schema in manifest.json",
                             fhd__cfg_json_type_name(root));
    for (size_t i = 0; i < NKEYS; i++) {
        fhd_error why = FHD_ERROR_INIT;
        if (s->keys[i].def && check_value(s, i, s->keys[i].def, cfg, &why) != FHD_OK)
            return fhd__cfg_fail(
                err, FHD_ERR_INTERNAL, 0, 0, "",
                "manifest.json embedded in the library is invalid: the default of %s: %s",
                fhd__cfg_specs[i].name, why.message);
    }
    /* jansson keeps the document order, so the first bad key of the text is reported. */
    json_object_foreach((json_t *)root, key, value) {
        int i = fhd__cfg_find_key(key);
        if (i < 0) {
            const char *near = fhd__cfg_suggest(key, fhd__config_keys(), NKEYS);
            snprintf(path, sizeof path, "$");
            path_append_key(path, sizeof path, key, strlen(key));
            if (near)
                return fhd__cfg_fail(err, FHD_ERR_CONFIG_UNKNOWN_KEY, 0, 0, path,
                                     "unknown key; did you mean \"%s\"?", near);
            return fhd__cfg_fail(
                err, FHD_ERR_CONFIG_UNKNOWN_KEY, 0, 0, path,
                "unknown key; allowed: the keys of config_schema in manifest.json");
        }
        rc = check_value(s, (size_t)i, value, cfg, err);
        if (rc != FHD_OK)
            return rc;
        given[i] = 1;
    }
    for (size_t i = 0; i < NKEYS; i++) {
        const int other = s->keys[i].required_unless;
        if (!given[i] && !s->keys[i].def && !(other >= 0 && given[other])) {
            snprintf(path, sizeof path, "$.%s", fhd__cfg_specs[i].name);
            fhd__cfg_describe_key(s, i, allowed, sizeof allowed);
            return fhd__cfg_fail(
                err, FHD_ERR_CONFIG_MISSING, 0, 0, path, "required key is missing; allowed: %s%s%s",
                allowed, other >= 0 ? ", or " : "", other >= 0 ? fhd__cfg_specs[other].name : "");
        }
    }
    return fhd__cfg_check_consistency(s, cfg, given, err);
}

int32_t fhd__config_parse(const char *json, size_t len, fhd__config *cfg, fhd_error *err) {
    fhd__cfg_schema s;
    fhd__config out;
    json_error_t je;
    json_t *root;
    char msg[FHD_ERROR_MESSAGE_MAX];
    int32_t rc;

    if (json == NULL || cfg == NULL)
        return fhd__cfg_fail(err, FHD_ERR_NULL_POINTER, 0, 0, "", "%s is NULL",
                             json == NULL ? "the config text" : "the config output");
    rc = fhd__cfg_schema_load(&s, msg, sizeof msg);
    if (rc != FHD_OK)
        return fhd__cfg_fail(err, rc, 0, 0, "",
                             rc == FHD_ERR_OUT_OF_MEMORY
                                 ? "%s"
                                 : "manifest.json embedded in the library is invalid: %s",
                             msg);
    root = json_loadb(json, len, JSON_REJECT_DUPLICATES | JSON_DECODE_ANY, &je);
    if (root == NULL) {
        rc = load_error(&s, json, len, &je, err);
        fhd__cfg_schema_free(&s);
        return rc;
    }
    memset(&out, 0, sizeof out);
    rc = parse_object(&s, root, &out, err);
    json_decref(root);
    fhd__cfg_schema_free(&s);
    if (rc != FHD_OK)
        return rc;
    *cfg = out;
    clear_error(err);
    return FHD_OK;
}
