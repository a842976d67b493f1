/* test_config.c - the config suite: data-driven invalid and valid configs, the parser's contract
 * (error struct, NULL handling, round trip, comparisons), then the manifest and schema checks.
 *
 * Usage: test_config <tests/config source directory>
 *   invalid/<case>/config.json  a config that must be rejected
 *   invalid/<case>/expected     "key: value" lines: status, path (absent: ""), line and column
 *                               (absent: 0), message_contains and message_excludes (repeatable)
 *   valid/<case>.json           a config that must be accepted and round-trip exactly
 * Prints one line per check and ends with "N passed, N failed"; exits 1 on any failure.
 */
#define _POSIX_C_SOURCE 200809L

#include <dirent.h>
#include <jansson.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "test_common.h"

static int passed, failed;

int tc_check(int ok, const char *fmt, ...) {
    va_list ap;
    printf("%s ", ok ? "ok  " : "FAIL");
    va_start(ap, fmt);
    vprintf(fmt, ap);
    va_end(ap);
    printf("\n");
    if (ok)
        passed++;
    else
        failed++;
    return ok;
}

char *tc_read_file(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    char *buf = NULL;
    size_t cap = 0, n = 0;
    if (!f)
        return NULL;
    for (;;) {
        if (n + 4096 + 1 > cap) {
            char *grown = realloc(buf, cap = 2 * cap + 4096 + 1);
            if (!grown) {
                free(buf);
                fclose(f);
                return NULL;
            }
            buf = grown;
        }
        size_t got = fread(buf + n, 1, 4096, f);
        n += got;
        if (got < 4096)
            break;
    }
    fclose(f);
    buf[n] = '\0';
    *len = n;
    return buf;
}

const char *tc_status_name(int32_t code) {
#define STATUS_CASE(name, value, msg)                                                              \
    case value:                                                                                    \
        return "FHD_" #name;
    switch (code) { FHD_STATUS_MAP(STATUS_CASE) }
#undef STATUS_CASE
    return "?";
}

int32_t tc_parse(const char *text, fhd__config *cfg, fhd_error *err) {
    return fhd__config_parse(text, strlen(text), cfg, err);
}

/* Sorted entries of a directory (without "." names), as a malloc'd array of malloc'd names. */
static size_t list_dir(const char *dir, char ***out) {
    DIR *d = opendir(dir);
    struct dirent *e;
    char **names = NULL;
    size_t n = 0;
    *out = NULL;
    if (!d)
        return 0;
    while ((e = readdir(d)) != NULL) {
        char **grown;
        if (e->d_name[0] == '.')
            continue;
        grown = realloc(names, (n + 1) * sizeof *names);
        if (!grown)
            break;
        names = grown;
        names[n++] = strdup(e->d_name);
    }
    closedir(d);
    for (size_t i = 1; i < n; i++) /* insertion sort: a few dozen names */
        for (size_t j = i; j > 0 && strcmp(names[j - 1], names[j]) > 0; j--) {
            char *t = names[j];
            names[j] = names[j - 1];
            names[j - 1] = t;
        }
    *out = names;
    return n;
}

static void free_list(char **names, size_t n) {
    for (size_t i = 0; i < n; i++)
        free(names[i]);
    free(names);
}

/* ---- invalid cases ------------------------------------------------------------------------ */

static char *trim(char *s) {
    char *end;
    while (*s == ' ' || *s == '\t')
        s++;
    end = s + strlen(s);
    while (end > s && (end[-1] == ' ' || end[-1] == '\t' || end[-1] == '\n' || end[-1] == '\r'))
        *--end = '\0';
    return s;
}

static void run_invalid_case(const char *dir, const char *name) {
    char path[1024];
    char *text, *expected, *line, *save = NULL, *copy;
    size_t len, elen;
    const char *want_status = NULL, *want_path = "";
    int want_line = 0, want_column = 0;
    fhd__config cfg, sentinel;
    fhd_error err = FHD_ERROR_INIT;
    int32_t rc;

    text = snprintf(path, sizeof path, "%s/%s/config.json", dir, name) < (int)sizeof path
               ? tc_read_file(path, &len)
               : NULL;
    expected = snprintf(path, sizeof path, "%s/%s/expected", dir, name) < (int)sizeof path
                   ? tc_read_file(path, &elen)
                   : NULL;
    if (!tc_check(text && expected, "invalid/%s: config.json and expected readable", name)) {
        free(text);
        free(expected);
        return;
    }
    /* Parse from an exact-size copy: the parser must not read past len. */
    copy = malloc(len ? len : 1);
    memcpy(copy, text, len);
    memset(&cfg, 0xAB, sizeof cfg);
    sentinel = cfg;
    rc = fhd__config_parse(copy, len, &cfg, &err);

    for (line = strtok_r(expected, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
        char *colon = strchr(line, ':'), *key, *value;
        if (*trim(line) == '\0' || line[0] == '#')
            continue;
        if (!tc_check(colon != NULL, "invalid/%s: expected line \"%s\" is \"key: value\"", name,
                      line))
            continue;
        *colon = '\0';
        key = trim(line);
        value = trim(colon + 1);
        if (strcmp(key, "status") == 0)
            want_status = value;
        else if (strcmp(key, "path") == 0)
            want_path = value;
        else if (strcmp(key, "line") == 0)
            want_line = atoi(value);
        else if (strcmp(key, "column") == 0)
            want_column = atoi(value);
        else if (strcmp(key, "message_contains") == 0)
            tc_check(strstr(err.message, value) != NULL, "invalid/%s: message contains \"%s\" (%s)",
                     name, value, err.message);
        else if (strcmp(key, "message_excludes") == 0)
            tc_check(strstr(err.message, value) == NULL, "invalid/%s: message lacks \"%s\" (%s)",
                     name, value, err.message);
        else
            tc_check(0, "invalid/%s: unknown expected key \"%s\"", name, key);
    }
    tc_check(want_status && strcmp(want_status, tc_status_name(rc)) == 0 && err.code == rc,
             "invalid/%s: status %s (got %s, err.code %s)", name, want_status ? want_status : "?",
             tc_status_name(rc), tc_status_name(err.code));
    tc_check(strcmp(err.path, want_path) == 0, "invalid/%s: path \"%s\" (got \"%s\")", name,
             want_path, err.path);
    tc_check(err.line == want_line && err.column == want_column,
             "invalid/%s: line %d column %d (got %d, %d)", name, want_line, want_column, err.line,
             err.column);
    tc_check(err.path[0] == '\0' || (strncmp(err.message, err.path, strlen(err.path)) == 0 &&
                                     strncmp(err.message + strlen(err.path), ": ", 2) == 0),
             "invalid/%s: message starts with the path", name);
    tc_check(memcmp(&cfg, &sentinel, sizeof cfg) == 0, "invalid/%s: cfg untouched on failure",
             name);
    tc_check(fhd__config_parse(copy, len, &cfg, NULL) == rc,
             "invalid/%s: same status with err NULL", name);
    free(copy);
    free(text);
    free(expected);
}

/* ---- valid cases -------------------------------------------------------------------------- */

/* The file's keys over the manifest's defaults, as a complete config text (malloc'd). */
static char *merge_with_defaults(const char *text) {
    json_t *manifest = json_loads(fhd__manifest_json, 0, NULL);
    json_t *given = json_loads(text, 0, NULL);
    json_t *all = json_object();
    const char *key;
    json_t *entry;
    char *out = NULL;
    json_object_foreach(json_object_get(manifest, "config_schema"), key, entry) {
        if (json_object_get(entry, "default"))
            json_object_set(all, key, json_object_get(entry, "default"));
    }
    if (json_is_object(given) && json_object_update(all, given) == 0)
        out = json_dumps(all, JSON_COMPACT);
    json_decref(all);
    json_decref(given);
    json_decref(manifest);
    return out;
}

static void run_valid_case(const char *dir, const char *name) {
    char path[1024];
    size_t len;
    char *text, *json1 = NULL, *json2 = NULL, *merged;
    fhd__config cfg, again, full;
    fhd_error err = FHD_ERROR_INIT;
    json_t *canon;

    text = snprintf(path, sizeof path, "%s/%s", dir, name) < (int)sizeof path
               ? tc_read_file(path, &len)
               : NULL;
    if (!tc_check(text != NULL, "valid/%s: readable", name))
        return;
    if (!tc_check(fhd__config_parse(text, len, &cfg, &err) == FHD_OK && err.code == FHD_OK &&
                      err.path[0] == '\0' && err.message[0] == '\0',
                  "valid/%s: parses (%s)", name, err.message)) {
        free(text);
        return;
    }
    json1 = fhd__config_to_json(&cfg);
    tc_check(json1 != NULL, "valid/%s: to_json", name);
    if (json1) {
        canon = json_loads(json1, 0, NULL);
        /* every key, except obs_dim when obs_shape gives it (the two are exclusive) */
        size_t want = 57 - (cfg.num_obs_shape ? 1 : 0);
        tc_check(json_is_object(canon) && json_object_size(canon) == want &&
                     (json_object_get(canon, "obs_dim") == NULL) == (cfg.num_obs_shape > 0),
                 "valid/%s: to_json is an object of all %zu keys", name, want);
        json_decref(canon);
        tc_check(tc_parse(json1, &again, &err) == FHD_OK, "valid/%s: to_json parses (%s)", name,
                 err.message);
        tc_check(fhd__config_equal(&cfg, &again) &&
                     fhd__config_first_difference(&cfg, &again, 1) == NULL,
                 "valid/%s: round trip is exact", name);
        json2 = fhd__config_to_json(&again);
        tc_check(json2 && strcmp(json1, json2) == 0, "valid/%s: to_json is canonical", name);
    }
    /* (torso "nature" replaces the defaults of conv and hidden: not a defaults case) */
    merged = strstr(text, "\"nature\"") ? NULL : merge_with_defaults(text);
    tc_check(strstr(text, "\"nature\"") ||
                 (merged && tc_parse(merged, &full, &err) == FHD_OK && fhd__config_equal(&cfg, &full)),
             "valid/%s: absent keys take the manifest defaults", name);
    free(merged);
    free(json1);
    free(json2);
    free(text);
}

static void run_cases(const char *root) {
    char dir[1024], **names;
    size_t n, valid = 0;
    snprintf(dir, sizeof dir, "%s/invalid", root);
    n = list_dir(dir, &names);
    for (size_t i = 0; i < n; i++)
        run_invalid_case(dir, names[i]);
    tc_check(n >= 30, "at least 30 invalid cases (%zu)", n);
    free_list(names, n);

    snprintf(dir, sizeof dir, "%s/valid", root);
    n = list_dir(dir, &names);
    for (size_t i = 0; i < n; i++) {
        size_t l = strlen(names[i]);
        if (l > 5 && strcmp(names[i] + l - 5, ".json") == 0) {
            run_valid_case(dir, names[i]);
            valid++;
        }
    }
    tc_check(valid >= 5, "at least 5 valid cases (%zu)", valid);
    free_list(names, n);
}

/* ---- the parser's contract ------------------------------------------------------------------ */

static void contract_tests(void) {
    static const char minimal[] = "{\"obs_dim\":4,\"actions\":[2]}";
    static const char bad[] = "{\"obs_dim\":4,\"actions\":[2],\"lr\":0}";
    fhd__config a, b;
    fhd_error err;
    const char *const *keys = fhd__config_keys();
    size_t nkeys = 0;
    char *json;

    memset(&err, 0x5A, sizeof err);
    err.struct_size = sizeof err;
    tc_check(fhd__config_parse(NULL, 0, &a, &err) == FHD_ERR_NULL_POINTER &&
                 err.code == FHD_ERR_NULL_POINTER && err.path[0] == '\0',
             "NULL text gives FHD_ERR_NULL_POINTER (%s)", err.message);
    tc_check(fhd__config_parse(minimal, strlen(minimal), NULL, &err) == FHD_ERR_NULL_POINTER,
             "NULL cfg gives FHD_ERR_NULL_POINTER");
    tc_check(fhd__config_parse(minimal, strlen(minimal), &a, NULL) == FHD_OK,
             "err may be NULL on success");

    /* struct_size: nothing below the code, only the code below the message, else a cut message */
    memset(&err, 0x5A, sizeof err);
    err.struct_size = 4;
    tc_check(tc_parse(bad, &a, &err) == FHD_ERR_CONFIG_RANGE && err.code == 0x5A5A5A5A,
             "struct_size 4: nothing written");
    err.struct_size = (uint32_t)offsetof(fhd_error, message);
    tc_check(tc_parse(bad, &a, &err) == FHD_ERR_CONFIG_RANGE && err.code == FHD_ERR_CONFIG_RANGE &&
                 err.line == 0x5A5A5A5A && err.path[0] == 0x5A,
             "struct_size up to the message: only the code written");
    err.struct_size = (uint32_t)offsetof(fhd_error, message) + 8;
    tc_check(tc_parse(bad, &a, &err) == FHD_ERR_CONFIG_RANGE && strcmp(err.path, "$.lr") == 0 &&
                 strcmp(err.message, "$.lr: 0") == 0 && err.message[8] == 0x5A,
             "struct_size with 8 message bytes: message cut to 7 (\"%.7s\")", err.message);
    err.struct_size = sizeof err;
    tc_check(tc_parse(minimal, &a, &err) == FHD_OK && err.code == 0 && err.line == 0 &&
                 err.path[0] == '\0' && err.message[0] == '\0',
             "success clears a used error struct");

    /* a text that is not NUL-terminated: the parser reads only len bytes */
    tc_check(fhd__config_parse("{\"obs_dim\":4,\"actions\":[2]}garbage", strlen(minimal), &a,
                               &err) == FHD_OK,
             "only len bytes are read");

    while (keys[nkeys])
        nkeys++;
    tc_check(nkeys == 57, "fhd__config_keys lists 57 keys (%zu)", nkeys);

    /* enum strings map onto the C enums of config.h */
    {
        static const struct {
            const char *json;
            size_t offset;
            int value;
        } enums[] = {
            {"\"backend\":\"cpu\"", offsetof(fhd__config, backend), FHD_BACKEND_CPU},
            {"\"backend\":\"cuda\"", offsetof(fhd__config, backend), FHD_BACKEND_CUDA},
            {"\"backend\":\"auto\"", offsetof(fhd__config, backend), FHD_BACKEND_AUTO},
            {"\"backend\":\"cuda\",\"matmul_precision\":\"fp32\"",
             offsetof(fhd__config, matmul_precision), FHD_PREC_FP32},
            {"\"backend\":\"cuda\",\"matmul_precision\":\"tf32_forward\"",
             offsetof(fhd__config, matmul_precision), FHD_PREC_TF32_FORWARD},
            {"\"backend\":\"cuda\",\"matmul_precision\":\"tf32\"",
             offsetof(fhd__config, matmul_precision), FHD_PREC_TF32},
            {"\"backend\":\"cuda\",\"matmul_precision\":\"bf16\"",
             offsetof(fhd__config, matmul_precision), FHD_PREC_BF16},
            {"\"backend\":\"cpu\",\"matmul_precision\":\"bf16\"",
             offsetof(fhd__config, matmul_precision), FHD_PREC_BF16},
            {"\"spectral_norm\":\"none\"", offsetof(fhd__config, spectral_norm), FHD_SN_NONE},
            {"\"spectral_norm\":\"last\"", offsetof(fhd__config, spectral_norm), FHD_SN_LAST},
            {"\"spectral_norm\":\"all\"", offsetof(fhd__config, spectral_norm), FHD_SN_ALL},
            {"\"prune_scope\":\"torso\"", offsetof(fhd__config, prune_scope), FHD_PRUNE_TORSO},
            {"\"prune_scope\":\"all\"", offsetof(fhd__config, prune_scope), FHD_PRUNE_ALL},
            {"\"loss\":\"huber\"", offsetof(fhd__config, loss), FHD_LOSS_HUBER},
            {"\"loss\":\"mse\"", offsetof(fhd__config, loss), FHD_LOSS_MSE},
            {"\"optimizer\":\"adam\"", offsetof(fhd__config, optimizer), FHD_OPT_ADAM},
            {"\"optimizer\":\"adamw\"", offsetof(fhd__config, optimizer), FHD_OPT_ADAMW},
            {"\"replay\":\"uniform\"", offsetof(fhd__config, replay), FHD_REPLAY_UNIFORM},
            {"\"replay\":\"prioritized\"", offsetof(fhd__config, replay), FHD_REPLAY_PRIORITIZED},
        };
        for (size_t i = 0; i < sizeof enums / sizeof enums[0]; i++) {
            char text[256];
            int got = -1;
            snprintf(text, sizeof text, "{\"obs_dim\":4,\"actions\":[2],%s}", enums[i].json);
            if (tc_parse(text, &a, &err) == FHD_OK)
                memcpy(&got, (const char *)&a + enums[i].offset, sizeof got);
            tc_check(got == enums[i].value, "enum %s stores %d (got %d)", enums[i].json,
                     enums[i].value, got);
        }
    }

    /* derived sizes */
    tc_parse("{\"obs_dim\":4,\"actions\":[3,4,5]}", &a, &err);
    tc_check(fhd__config_total_actions(&a) == 12, "total_actions of [3,4,5] is 12");
    tc_check(fhd__config_param_count(&a) == (4 * 64 + 64) + (64 * 64 + 64) + (64 * 13 + 13),
             "param_count of S=4, [64,64], KT=12, dueling (%llu)",
             (unsigned long long)fhd__config_param_count(&a));

    /* comparisons: architecture keys are named, overridable keys skipped on request */
    tc_parse(minimal, &a, &err);
    tc_parse("{\"obs_dim\":4,\"actions\":[2],\"lr\":0.5,\"tau\":0.5}", &b, &err);
    tc_check(!fhd__config_equal(&a, &b), "configs differing in lr are not equal");
    tc_check(fhd__config_first_difference(&a, &b, 1) &&
                 strcmp(fhd__config_first_difference(&a, &b, 1), "lr") == 0,
             "first difference is lr");
    tc_check(fhd__config_first_difference(&a, &b, 0) == NULL, "lr and tau are resume-overridable");
    tc_parse("{\"obs_dim\":4,\"actions\":[2],\"lr\":0.5,\"hidden\":[64,65]}", &b, &err);
    tc_check(fhd__config_first_difference(&a, &b, 0) &&
                 strcmp(fhd__config_first_difference(&a, &b, 0), "hidden") == 0,
             "an architecture difference names the field (hidden)");
    tc_parse("{\"obs_dim\":4,\"actions\":[2],\"seed\":1}", &b, &err);
    tc_check(fhd__config_first_difference(&a, &b, 0) &&
                 strcmp(fhd__config_first_difference(&a, &b, 0), "seed") == 0,
             "seed is not resume-overridable");
    b = a;
    b.hidden[5] = 7; /* past num_hidden: not part of the config */
    tc_check(fhd__config_equal(&a, &b), "array entries past the length are ignored");

    /* a config JSON cannot carry is not serialised */
    b = a;
    b.backend = 9;
    json = fhd__config_to_json(&b);
    tc_check(json == NULL, "to_json refuses an enum value outside the manifest's list");
    free(json);
    b = a;
    b.lr = NAN;
    json = fhd__config_to_json(&b);
    tc_check(json == NULL, "to_json refuses NaN");
    free(json);
    b.lr = -INFINITY;
    json = fhd__config_to_json(&b);
    tc_check(json == NULL, "to_json refuses an infinity");
    free(json);
    tc_check(fhd__config_to_json(NULL) == NULL, "to_json(NULL) is NULL");
}

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: %s <tests/config source directory>\n", argv[0]);
        return 2;
    }
    contract_tests();
    tc_manifest_tests(argv[1]);
    tc_schema_tests();
    run_cases(argv[1]);
    printf("%d passed, %d failed\n", passed, failed);
    return failed ? 1 : 0;
}
