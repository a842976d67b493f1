/* checkpoint_header.c - writing and checking the JSON header of a checkpoint. */
#include "checkpoint_header.h"
#include "checkpoint_trim.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int is_checksum_key(const char *k) {
    return strncmp(k, FHD_CKPT_CHECKSUM_PREFIX, sizeof FHD_CKPT_CHECKSUM_PREFIX - 1) == 0;
}

static int by_string(const void *x, const void *y) {
    return strcmp(*(const char *const *)x, *(const char *const *)y);
}

int fhd__ck_metadata_crc(const fhd__crc64 *crc, const json_t *meta, uint64_t *out) {
    size_t n = json_object_size(meta), k = 0;
    const char **keys = malloc(sizeof(char *) * (n ? n : 1));
    if (!keys)
        return -1;
    const char *key;
    json_t *v;
    json_object_foreach((json_t *)meta, key, v) {
        if (!is_checksum_key(key))
            keys[k++] = key;
    }
    qsort(keys, k, sizeof(char *), by_string);
    static const unsigned char zero = 0;
    uint64_t h = 0;
    for (size_t i = 0; i < k; i++) {
        const json_t *s = json_object_get(meta, keys[i]);
        h = fhd__crc64_update(crc, h, keys[i], strlen(keys[i]));
        h = fhd__crc64_update(crc, h, &zero, 1);
        h = fhd__crc64_update(crc, h, json_string_value(s), json_string_length(s));
        h = fhd__crc64_update(crc, h, &zero, 1);
    }
    free(keys);
    *out = h;
    return 0;
}

static void hex64(uint64_t v, char out[17]) {
    snprintf(out, 17, "%016" PRIx64, v);
}

int fhd__ck_parse_hex64(const char *s, uint64_t *out) {
    uint64_t v = 0;
    for (int i = 0; i < 16; i++) {
        char ch = s[i];
        int d;
        if (ch >= '0' && ch <= '9')
            d = ch - '0';
        else if (ch >= 'a' && ch <= 'f')
            d = ch - 'a' + 10;
        else
            return -1;
        v = (v << 4) | (uint64_t)d;
    }
    if (s[16] != '\0')
        return -1;
    *out = v;
    return 0;
}

/* ---- writing ------------------------------------------------------------------------------ */

char *fhd__ck_header_write(const fhd__ck_catalog *c, const json_t *meta, const fhd__crc64 *crc,
                           int placeholders, size_t *len) {
    char hex[17];
    json_t *root = json_object();
    json_t *m = json_deep_copy(meta);
    uint64_t mh = 0;
    int bad = !root || !m || fhd__ck_metadata_crc(crc, meta, &mh) != 0;
    if (!bad) {
        hex64(mh, hex);
        bad |= json_object_set_new(m, FHD_CKPT_CHECKSUM_PREFIX "__metadata__", json_string(hex));
    }
    for (uint32_t i = 0; i < c->n && !bad; i++) {
        const fhd__ck_tensor *t = &c->t[i];
        char key[128];
        snprintf(key, sizeof key, FHD_CKPT_CHECKSUM_PREFIX "%s", t->name);
        hex64(placeholders ? 0 : t->crc, hex);
        bad |= json_object_set_new(m, key, json_string(hex));
        json_t *shape = json_array();
        for (uint32_t d = 0; shape && d < t->rank; d++)
            bad |= json_array_append_new(shape, json_integer((json_int_t)t->shape[d]));
        json_t *e =
            json_pack("{s:s, s:o, s:[I, I]}", "dtype", fhd__ck_dtype_name(t->dtype), "shape", shape,
                      "data_offsets", (json_int_t)t->begin, (json_int_t)t->end);
        bad |= !shape || !e || json_object_set_new(root, t->name, e);
    }
    if (!bad) {
        bad |= json_object_set_new(root, "__metadata__", m);
        m = NULL;
    }
    /* json_dumpb into a measured buffer, not json_dumps: under allocation failure the latter
     * can drop a key and still return text */
    const size_t flags = JSON_COMPACT | JSON_SORT_KEYS;
    const size_t n = bad ? 0 : json_dumpb(root, NULL, 0, flags);
    const size_t padded = n + (8 - (8 + n) % 8) % 8;
    char *out = n ? malloc(padded) : NULL;
    if (out && json_dumpb(root, out, n, flags) == n) {
        memset(out + n, ' ', padded - n);
        *len = padded;
    } else {
        free(out);
        out = NULL;
    }
    json_decref(root);
    json_decref(m);
    return out;
}

/* ---- checking ----------------------------------------------------------------------------- */

#define CORRUPT(...) (snprintf(msg, cap, __VA_ARGS__), FHD_ERR_CHECKPOINT_CORRUPT)
/* Per tensor: its entry {"data_offsets":[b,e],"dtype":"F32","shape":[a,b,c]} (about 60 bytes
 * besides the name and five numbers of up to 20 digits) and its "checksum.<name>" (about 30
 * besides the name): 2 name lengths + 256 bounds both. A legitimate header holds about 15 JSON
 * values per tensor (entry, keys, dtype, shape and offsets with their numbers, checksum). */
#define HDR_PER_TENSOR 256u
#define HDR_VALUES_PER_TENSOR 16u
#define HDR_FIXED_META 4096u   /* format, versions, backend, flags, their checksum */
#define HDR_SLACK (64u << 10)  /* another writer's whitespace and metadata keys */
#define HDR_EXTRA_MEMBERS 64u  /* metadata keys besides the checksums */

int32_t fhd__ck_header_limits_of(const fhd__config *cfg, const fhd__layout *lo,
                                 fhd__ck_header_limits *out) {
    (void)lo;
    /* the widest architecture the schema allows, with the learner's other keys: its
     * checkpoints have the most tensors, the longest names and the longest config */
    fhd__config w = *cfg;
    w.obs_dim = 1;
    w.num_branches = FHD_MAX_BRANCHES;
    for (uint32_t d = 0; d < FHD_MAX_BRANCHES; d++)
        w.actions[d] = 2;
    w.num_hidden = FHD_MAX_HIDDEN_LAYERS;
    for (uint32_t l = 0; l < FHD_MAX_HIDDEN_LAYERS; l++)
        w.hidden[l] = 1;
    w.dueling = 1;
    w.spectral_norm = FHD_SN_ALL;
    w.prune_sparsity = 0.5; /* masks of every weight tensor */
    w.prune_scope = FHD_PRUNE_ALL;
    w.replay = FHD_REPLAY_PRIORITIZED;
    fhd__layout wl;
    fhd__ck_catalog cat;
    if (fhd__layout_init(&wl, &w) != 0)
        return FHD_ERR_INTERNAL;
    if (fhd__ck_catalog_build(&w, &wl, 1, &cat) != FHD_OK)
        return FHD_ERR_OUT_OF_MEMORY;
    char *js = fhd__config_to_json(&w);
    if (!js) {
        fhd__ck_catalog_free(&cat);
        return FHD_ERR_OUT_OF_MEMORY;
    }
    /* the recorded config: the same keys; action counts and other numbers of up to 24
     * characters; every quote escaped */
    const uint64_t cfg_bytes = 2 * ((uint64_t)strlen(js) + 24u * (64u + FHD_MAX_BRANCHES));
    free(js);
    uint64_t names = 0;
    for (uint32_t i = 0; i < cat.n; i++)
        names += strlen(cat.t[i].name);
    const uint64_t tensors = cat.n;
    fhd__ck_catalog_free(&cat);
    const uint64_t exact = 2 * names + HDR_PER_TENSOR * tensors + cfg_bytes + HDR_FIXED_META;
    out->max_bytes = 2 * exact + HDR_SLACK;
    if (out->max_bytes > FHD_CKPT_HEADER_MAX)
        out->max_bytes = FHD_CKPT_HEADER_MAX;
    out->max_tensors = tensors;
    out->max_members = tensors + HDR_EXTRA_MEMBERS;
    out->max_values = HDR_VALUES_PER_TENSOR * (tensors + HDR_EXTRA_MEMBERS);
    out->max_string = cfg_bytes + 1024;
    return FHD_OK;
}

/* JSON punctuation, whitespace and the string quote: what ends a bare token. */
static int is_structural(char ch) {
    return ch == ',' || ch == ':' || ch == '{' || ch == '}' || ch == '[' || ch == ']' ||
           ch == '"' || ch == ' ' || ch == '\t' || ch == '\n' || ch == '\r';
}

int32_t fhd__ck_header_prescan(const char *s, size_t n, const fhd__ck_header_limits *lim,
                               char *msg, size_t cap) {
    enum { MAX_DEPTH = 3, SMALL = 8 };
    char kind[MAX_DEPTH + 1] = {0};
    uint64_t items[MAX_DEPTH + 1] = {0}; /* commas seen at each open level */
    uint64_t values = 0;                 /* strings, containers and other tokens */
    int depth = 0, in_token = 0;
    if (n == 0 || s[0] != '{')
        return CORRUPT("the header does not start with '{': not a safetensors file");
    for (size_t i = 0; i < n; i++) {
        const char ch = s[i];
        const int bare = !is_structural(ch); /* inside a number or literal */
        const int starts = ch == '"' || ch == '{' || ch == '[' || (bare && !in_token);
        in_token = bare;
        if (starts && ++values > lim->max_values)
            return CORRUPT("the header holds more than %" PRIu64 " JSON values (byte %zu); a "
                           "checkpoint of any architecture has fewer",
                           lim->max_values, i);
        if (ch == '"') {
            size_t j = i + 1;
            while (j < n && s[j] != '"')
                j += s[j] == '\\' ? 2 : 1;
            if (j >= n)
                return CORRUPT("the header has an unterminated string at byte %zu", i);
            if (j - i - 1 > lim->max_string)
                return CORRUPT("the header holds a string of %zu bytes at byte %zu; a checkpoint "
                               "has none longer than %" PRIu64,
                               j - i - 1, i, lim->max_string);
            i = j;
        } else if (ch == '{' || ch == '[') {
            if (depth == MAX_DEPTH)
                return CORRUPT("the header nests deeper than %d levels at byte %zu (a "
                               "checkpoint's header has 3)",
                               MAX_DEPTH, i);
            depth++;
            kind[depth] = ch;
            items[depth] = 0;
        } else if (ch == '}' || ch == ']') {
            if (depth == 0 || (ch == '}') != (kind[depth] == '{'))
                return CORRUPT("the header has an unbalanced '%c' at byte %zu", ch, i);
            if (--depth == 0)
                return FHD_OK; /* jansson reports anything after the root but whitespace */
        } else if (ch == ',' && depth > 0) {
            const uint64_t limit = depth == 1 ? lim->max_tensors + 1
                                   : depth == 2 && kind[2] == '{' ? lim->max_members
                                                                 : SMALL;
            if (++items[depth] >= limit)
                return CORRUPT("the header has %s of more than %" PRIu64 " %s at byte %zu; a "
                               "checkpoint of any architecture has at most %" PRIu64,
                               depth == 1 ? "a root object" : kind[depth] == '{' ? "an object"
                                                                                  : "an array",
                               limit, kind[depth] == '{' ? "members" : "elements", i, limit);
        }
    }
    return FHD_OK;
}

int32_t fhd__ck_header_parse(const char *text, size_t len, json_t **root, const json_t **meta,
                             char *msg, size_t cap) {
    *root = NULL;
    if (len == 0 || text[0] != '{')
        return CORRUPT("the header does not start with '{': not a safetensors file");
    json_error_t je;
    json_t *r = json_loadb(text, len, JSON_REJECT_DUPLICATES, &je);
    if (!r)
        return CORRUPT("the header is not valid JSON (line %d, column %d: %s)", je.line, je.column,
                       je.text);
    const json_t *m = json_object_get(r, "__metadata__");
    if (!json_is_object(r) || !json_is_object(m)) {
        json_decref(r);
        return CORRUPT("the header has no \"__metadata__\" map: not a foxhunt-dqn checkpoint");
    }
    const char *key;
    json_t *v;
    json_object_foreach((json_t *)m, key, v) {
        if (!json_is_string(v)) {
            int32_t rc = CORRUPT("__metadata__.%s is not a string", key);
            json_decref(r);
            return rc;
        }
    }
    *root = r;
    *meta = m;
    return FHD_OK;
}

static void shape_text(const uint64_t *s, uint32_t rank, char *buf, size_t n) {
    size_t k = (size_t)snprintf(buf, n, "[");
    for (uint32_t d = 0; d < rank && k < n; d++)
        k += (size_t)snprintf(buf + k, n - k, "%s%" PRIu64, d ? ", " : "", s[d]);
    if (k < n)
        snprintf(buf + k, n - k, "]");
}

static int get_u64(const json_t *v, uint64_t *out) {
    if (!json_is_integer(v) || json_integer_value(v) < 0)
        return -1;
    *out = (uint64_t)json_integer_value(v);
    return 0;
}

static int32_t check_entry(const json_t *e, fhd__ck_tensor *t, char *msg, size_t cap) {
    const json_t *dtype = json_object_get(e, "dtype"), *shape = json_object_get(e, "shape");
    const json_t *offs = json_object_get(e, "data_offsets");
    if (!json_is_object(e) || json_object_size(e) != 3 || !dtype || !shape || !offs)
        return CORRUPT("tensor \"%s\": the entry must hold exactly \"dtype\", \"shape\" and "
                       "\"data_offsets\"",
                       t->name);
    if (!json_is_string(dtype) || strcmp(json_string_value(dtype), fhd__ck_dtype_name(t->dtype)))
        return CORRUPT("tensor \"%s\" has dtype %s; expected %s", t->name,
                       json_is_string(dtype) ? json_string_value(dtype) : "(not a string)",
                       fhd__ck_dtype_name(t->dtype));
    char want[96], got[96] = "(not an array of rank <= 4)";
    shape_text(t->shape, t->rank, want, sizeof want);
    uint64_t s[4] = {0, 0, 0, 0};
    int ok = json_is_array(shape) && json_array_size(shape) <= 4;
    for (size_t d = 0; ok && d < json_array_size(shape); d++)
        ok = get_u64(json_array_get(shape, d), &s[d]) == 0;
    if (ok)
        shape_text(s, (uint32_t)json_array_size(shape), got, sizeof got);
    /* replay storage: its used rows or all of them; the data check compares the length with
     * the counters (fhd__ck_trim_check) */
    if (ok && json_array_size(shape) == t->rank && t->rows != FHD_CK_ROWS_ALL &&
        memcmp(s + 1, t->shape + 1, sizeof(uint64_t) * 3) == 0)
        fhd__ck_tensor_set_rows(t, s[0] <= t->full_rows ? s[0] : t->full_rows);
    if (!ok || json_array_size(shape) != t->rank || memcmp(s, t->shape, sizeof s) != 0)
        return CORRUPT("tensor \"%s\" has shape %s; this config needs %s", t->name, got, want);
    uint64_t b, en;
    if (!json_is_array(offs) || json_array_size(offs) != 2 ||
        get_u64(json_array_get(offs, 0), &b) || get_u64(json_array_get(offs, 1), &en) || b > en)
        return CORRUPT("tensor \"%s\": data_offsets must be [begin, end] with 0 <= begin <= end",
                       t->name);
    if (en - b != t->bytes)
        return CORRUPT("tensor \"%s\": data_offsets [%" PRIu64 ", %" PRIu64 "] span %" PRIu64
                       " bytes; dtype and shape need %" PRIu64,
                       t->name, b, en, en - b, t->bytes);
    t->begin = b;
    t->end = en;
    t->seen = 1;
    return FHD_OK;
}

static int by_begin(const void *x, const void *y) {
    const fhd__ck_tensor *a = (const fhd__ck_tensor *)x, *b = (const fhd__ck_tensor *)y;
    if (a->begin != b->begin)
        return a->begin < b->begin ? -1 : 1;
    return a->end < b->end ? -1 : a->end > b->end;
}

int32_t fhd__ck_header_match(const json_t *root, const json_t *meta, fhd__ck_catalog *c,
                             uint64_t data_bytes, char *msg, size_t cap) {
    const char *key;
    json_t *v;
    for (uint32_t i = 0; i < c->n; i++)
        c->t[i].seen = 0;
    json_object_foreach((json_t *)root, key, v) {
        if (strcmp(key, "__metadata__") == 0)
            continue;
        fhd__ck_tensor *t = fhd__ck_catalog_find(c, key);
        if (!t)
            return CORRUPT("unknown tensor \"%s\": not part of a checkpoint of the recorded "
                           "config",
                           key);
        int32_t rc = check_entry(v, t, msg, cap);
        if (rc != FHD_OK)
            return rc;
    }
    for (uint32_t i = 0; i < c->n; i++)
        if (!c->t[i].seen)
            return CORRUPT("tensor \"%s\" is missing", c->t[i].name);
    /* checksums: one per tensor plus the metadata's, nothing else */
    json_object_foreach((json_t *)meta, key, v) {
        if (!is_checksum_key(key))
            continue;
        const char *name = key + sizeof FHD_CKPT_CHECKSUM_PREFIX - 1;
        uint64_t h;
        if (fhd__ck_parse_hex64(json_string_value(v), &h) != 0)
            return CORRUPT("__metadata__.%s is not 16 lowercase hex digits", key);
        if (strcmp(name, "__metadata__") == 0)
            continue;
        fhd__ck_tensor *t = fhd__ck_catalog_find(c, name);
        if (!t)
            return CORRUPT("__metadata__.%s names no tensor of the checkpoint", key);
        t->crc = h;
        t->seen = 2;
    }
    for (uint32_t i = 0; i < c->n; i++)
        if (c->t[i].seen != 2)
            return CORRUPT("tensor \"%s\" has no checksum (__metadata__.checksum.%s)", c->t[i].name,
                           c->t[i].name);
    /* data_offsets: no overlap, contiguous from 0, covering the data section exactly */
    qsort(c->t, c->n, sizeof(*c->t), by_begin);
    for (uint32_t i = 1; i < c->n; i++)
        if (c->t[i].begin < c->t[i - 1].end)
            return CORRUPT("tensors \"%s\" and \"%s\" overlap in the data section",
                           c->t[i - 1].name, c->t[i].name);
    uint64_t at = 0;
    for (uint32_t i = 0; i < c->n; i++) {
        const fhd__ck_tensor *t = &c->t[i];
        if (t->begin != at)
            return CORRUPT("tensor \"%s\" begins at data offset %" PRIu64 "; the previous tensor "
                           "ends at %" PRIu64 " (a gap)",
                           t->name, t->begin, at);
        at = t->end;
    }
    if (at != data_bytes)
        return CORRUPT("the tensors end at data offset %" PRIu64 " but the data section holds "
                       "%" PRIu64 " bytes (%s)",
                       at, data_bytes,
                       at < data_bytes ? "trailing bytes" : "the file is truncated");
    return FHD_OK;
}
