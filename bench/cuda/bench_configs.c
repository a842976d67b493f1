/* bench_configs.c - cuda_bench's configs: a preset, the bench's keys and a suffix's precision
 * (the rule is in bench_configs.h); and gemm_sweep's MLP shapes, read from the same configs
 * through the core's parser and layout. */
#include "bench_configs.h"

#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "config.h"
#include "host_bench.h"
#include "layout.h"

const char *const bench_default_names[] = {
    "C0", "B1",       "B1-sn",   "U1",      "A1",       "A1-tf32f", "A1-bf16",
    "A2", "A2-tf32f", "A2-bf16", "B2-fp32", "B2-tf32f", "B2-tf32",  "B2-bf16",
    "B3", "B3-tf32f", "B3-tf32", "B3-bf16", NULL,
};

/* Over every preset: the bench writes the replay itself, so updates start at once. */
static const char bench_keys[] = "{\"backend\": \"cuda\", \"learning_starts\": 0, \"seed\": 1, "
                                 "\"target_update_interval\": 1000, \"num_envs\": 256}";
/* Over image presets (obs_shape): the fill writes 16384 transitions through observe. */
static const char bench_image_keys[] = "{\"replay_capacity\": 100000}";

/* The -PREC suffixes and the matmul_precision each sets. */
static const struct {
    const char *suffix, *precision;
} precisions[] = {
    {"fp32", "fp32"},
    {"tf32f", "tf32_forward"},
    {"tf32", "tf32"},
    {"bf16", "bf16"},
};
#define NUM_PRECISIONS (sizeof precisions / sizeof precisions[0])

/* Named changes of a preset that are no preset themselves. */
static const struct {
    const char *name, *preset, *keys;
} extras[] = {
    /* a user's shape: 37 -> 384 -> 192 -> 7, dueling, batch 512 */
    {"U1", "B1",
     "{\"obs_dim\": 37, \"hidden\": [384, 192], \"actions\": [7], \"batch_size\": 512}"},
};
#define NUM_EXTRAS (sizeof extras / sizeof extras[0])

/* The preset and the extra's keys (NULL: none) of a name without a suffix; 0 when unknown. */
static int find_base(const char *name, const fhd_host_preset **preset, const char **keys) {
    *keys = NULL;
    for (size_t i = 0; i < NUM_EXTRAS; i++)
        if (!strcmp(extras[i].name, name)) {
            *keys = extras[i].keys;
            name = extras[i].preset;
            break;
        }
    *preset = fhd_host_find_preset(name);
    return *preset != NULL;
}

/* Set every key of the JSON object `text` in cfg (0 when text is no object). */
static int merge(json_t *cfg, const char *text) {
    json_t *keys = json_loads(text, 0, NULL);
    const int ok = json_is_object(keys) && json_object_update(cfg, keys) == 0;
    json_decref(keys);
    return ok;
}

char *bench_config_json(const char *name, const char *autotune, char *err, size_t cap) {
    const fhd_host_preset *preset = NULL;
    const char *keys = NULL, *precision = NULL;
    if (!find_base(name, &preset, &keys)) {
        const char *dash = strrchr(name, '-');
        char stem[64];
        for (size_t i = 0; dash && i < NUM_PRECISIONS; i++)
            if (!strcmp(dash + 1, precisions[i].suffix))
                precision = precisions[i].precision;
        if (precision && (size_t)(dash - name) < sizeof stem) {
            memcpy(stem, name, (size_t)(dash - name));
            stem[dash - name] = '\0';
            find_base(stem, &preset, &keys);
        }
        if (!preset) {
            snprintf(err, cap, "unknown config \"%s\"", name);
            return NULL;
        }
    }
    json_error_t jerr;
    json_t *cfg = json_loads(preset->json, 0, &jerr);
    if (!json_is_object(cfg)) {
        snprintf(err, cap, "preset %s: not a JSON object (%s)", preset->name, jerr.text);
        json_decref(cfg);
        return NULL;
    }
    int ok = (!keys || merge(cfg, keys)) && merge(cfg, bench_keys) &&
             (!json_object_get(cfg, "obs_shape") || merge(cfg, bench_image_keys));
    if (precision)
        ok = ok && json_object_set_new(cfg, "matmul_precision", json_string(precision)) == 0;
    if (autotune)
        ok = ok && json_object_set_new(cfg, "autotune", json_string(autotune)) == 0;
    char *text = ok ? json_dumps(cfg, JSON_COMPACT) : NULL;
    json_decref(cfg);
    if (!text)
        snprintf(err, cap, "%s: the config could not be built", name);
    return text;
}

int bench_mlp_shape(const char *name, uint32_t *S, uint32_t *H, uint32_t *HO, uint32_t *B,
                    char *err, size_t cap) {
    char *json = bench_config_json(name, NULL, err, cap);
    if (!json)
        return 0;
    fhd__config cfg;
    fhd_error e = FHD_ERROR_INIT;
    const int32_t rc = fhd__config_parse(json, strlen(json), &cfg, &e);
    free(json);
    if (rc != FHD_OK) {
        snprintf(err, cap, "%s: the config is refused (%s: %s)", name, e.path, e.message);
        return 0;
    }
    fhd__layout lo;
    if (fhd__layout_init(&lo, &cfg) != 0) {
        snprintf(err, cap, "%s: the network's sizes overflow the layout's limits", name);
        return 0;
    }
    if (lo.NC != 0 || cfg.num_hidden != 2 || cfg.hidden[0] != cfg.hidden[1]) {
        snprintf(err, cap, "%s: not an MLP of two hidden layers of one width", name);
        return 0;
    }
    *S = lo.S;
    *H = cfg.hidden[0];
    *HO = lo.head_out;
    *B = cfg.batch_size;
    return 1;
}

void bench_print_names(FILE *out) {
    fhd_host_print_preset_names(out, "names: a preset (");
    fputs("), PRESET-PREC with PREC in", out);
    for (size_t i = 0; i < NUM_PRECISIONS; i++)
        fprintf(out, " %s", precisions[i].suffix);
    fputs(", or", out);
    for (size_t i = 0; i < NUM_EXTRAS; i++)
        fprintf(out, " %s (%s changed)", extras[i].name, extras[i].preset);
    fputs("\ndefault:", out);
    for (size_t i = 0; bench_default_names[i]; i++)
        fprintf(out, " %s", bench_default_names[i]);
    fputs("\n", out);
}
