/* host_bench_presets.c - lookup and listing of the presets embedded from bench/presets/NAME.json
 * (the table itself is generated at build time; see host_bench.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "host_bench.h"

const fhd_host_preset *fhd_host_find_preset(const char *name) {
    for (size_t i = 0; i < fhd_host_num_presets; i++)
        if (!strcmp(fhd_host_presets[i].name, name))
            return &fhd_host_presets[i];
    return NULL;
}

void fhd_host_print_preset_names(FILE *out, const char *prefix) {
    fputs(prefix, out);
    for (size_t i = 0; i < fhd_host_num_presets; i++)
        fprintf(out, "%s%s", i ? " " : "", fhd_host_presets[i].name);
    if (!fhd_host_num_presets)
        fputs("(none)", out);
}

/* Keys that give the network's shape, printed first, in this order. */
static const struct {
    const char *key, *label;
} shape_keys[] = {
    {"obs_dim", "S="},       {"obs_shape", "obs "},    {"hidden", "hidden "},
    {"actions", "actions "}, {"batch_size", "batch "},
};
#define NUM_SHAPE_KEYS (sizeof shape_keys / sizeof shape_keys[0])

static int is_shape_key(const char *key) {
    for (size_t i = 0; i < NUM_SHAPE_KEYS; i++)
        if (!strcmp(shape_keys[i].key, key))
            return 1;
    return 0;
}

/* "S=64, hidden [256,256], actions [8], batch 256; dueling, double_dqn, replay prioritized" */
static void summary(const char *text, char *out, size_t cap) {
    json_t *cfg = json_loads(text, 0, NULL);
    if (!json_is_object(cfg)) {
        snprintf(out, cap, "(not a JSON object)");
        json_decref(cfg);
        return;
    }
    size_t n = 0;
    out[0] = '\0';
#define PUT(...)                                                                                   \
    do {                                                                                           \
        if (n < cap)                                                                               \
            n += (size_t)snprintf(out + n, cap - n, __VA_ARGS__);                                  \
    } while (0)
    for (size_t i = 0; i < NUM_SHAPE_KEYS; i++) {
        json_t *v = json_object_get(cfg, shape_keys[i].key);
        if (!v)
            continue;
        char *s = json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY);
        PUT("%s%s%s", n ? ", " : "", shape_keys[i].label, s ? s : "?");
        free(s);
    }
    const char *sep = "; ";
    const char *key;
    json_t *v;
    json_object_foreach(cfg, key, v) {
        if (is_shape_key(key))
            continue;
        if (json_is_true(v))
            PUT("%s%s", sep, key);
        else if (json_is_string(v))
            PUT("%s%s %s", sep, key, json_string_value(v));
        else if (!strcmp(key, "cql_alpha") && json_is_number(v) && json_number_value(v) > 0)
            PUT("%s%s %g", sep, key, json_number_value(v));
        else
            continue;
        sep = ", ";
    }
#undef PUT
    json_decref(cfg);
}

void fhd_host_list_presets(FILE *out) {
    for (size_t i = 0; i < fhd_host_num_presets; i++) {
        char line[512];
        summary(fhd_host_presets[i].json, line, sizeof line);
        fprintf(out, "%-6s %s\n", fhd_host_presets[i].name, line);
    }
}
