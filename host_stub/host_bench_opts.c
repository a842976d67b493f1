/* host_bench_opts.c - `fhd-host bench`'s command line (host_bench_opts.h). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "host_bench.h"
#include "host_bench_opts.h"
#include "host_cmds.h"
#include "host_plugin.h"

const char fhd_bench_usage[] =
    "usage: fhd-host bench --preset NAME [options]     (NAME: bench --list)\n"
    "       fhd-host bench --config FILE [options]\n"
    "       fhd-host bench --list | --preset NAME --print-config\n"
    "       fhd-host bench (--preset NAME | --config FILE) --print-plan [--backend B] [--json]\n"
    "options:\n"
    "  --backend cpu|cuda|auto  backend (default: the config's, cpu)\n"
    "  --updates N              updates per timed run (default: ~--run-seconds, >= 1000 on cuda)\n"
    "  --run-seconds X          target length of a timed run when --updates is not given (0.25)\n"
    "  --repeats N              timed runs (default 7)\n"
    "  --warmup N               warm-up updates (default: 0.3 s of updates)\n"
    "  --fill N                 replay fill (default min(capacity, max(16 B, 65536)))\n"
    "  --envs N                 num_envs: transitions per observe call (default 64)\n"
    "  --act-calls N            timed act calls per size (default 2000)\n"
    "  --seed S                 learner and data seed (default 1)\n"
    "  --set KEY=VALUE          override a config key (VALUE is JSON, else a string)\n"
    "  --peak-tflops X          report the fraction of this peak the GEMMs reach\n"
    "  --json                   print one JSON object instead of a table\n"
    "  --print-plan             create the learner, print the backend's plan (metrics \"plan\")\n"
    "                           and exit\n"
    "  --plugin PATH            the plugin library\n";


static int parse_u64(const char *opt, const char *s, uint64_t lo, uint64_t hi, uint64_t *out) {
    char *end = NULL;
    unsigned long long v = strtoull(s, &end, 10);
    if (!*s || *end || s[0] == '-' || v < lo || v > hi) {
        fprintf(stderr, "error: %s is \"%s\"; allowed: an integer in [%llu, %llu]\n", opt, s,
                (unsigned long long)lo, (unsigned long long)hi);
        return FHD_EXIT_USAGE;
    }
    *out = v;
    return FHD_EXIT_OK;
}

int fhd_bench_parse_args(int argc, char **argv, bench_opts *o) {
    memset(o, 0, sizeof(*o));
    o->repeats = 7;
    o->run_seconds = 0.25;
    o->envs = 64;
    o->act_calls = 2000;
    o->seed = 1;
    fhd_host_default_plugin(o->plugin, sizeof o->plugin);
    for (int i = 1; i < argc; i++) {
        int bad = 0, rc = FHD_EXIT_OK;
        const char *v;
        if ((v = fhd_opt(argc, argv, &i, "--preset", &bad)))
            o->preset = v;
        else if (!bad && (v = fhd_opt(argc, argv, &i, "--config", &bad)))
            o->config_path = v;
        else if (!bad && (v = fhd_opt(argc, argv, &i, "--backend", &bad)))
            o->backend = v;
        else if (!bad && (v = fhd_opt(argc, argv, &i, "--updates", &bad))) {
            rc = parse_u64("--updates", v, 1, 1000000, &o->updates);
            o->have_updates = 1;
        } else if (!bad && (v = fhd_opt(argc, argv, &i, "--repeats", &bad)))
            rc = parse_u64("--repeats", v, 1, 10000, &o->repeats);
        else if (!bad && (v = fhd_opt(argc, argv, &i, "--warmup", &bad))) {
            rc = parse_u64("--warmup", v, 0, 1000000, &o->warmup);
            o->have_warmup = 1;
        } else if (!bad && (v = fhd_opt(argc, argv, &i, "--fill", &bad))) {
            rc = parse_u64("--fill", v, 1, 1ull << 31, &o->fill);
            o->have_fill = 1;
        } else if (!bad && (v = fhd_opt(argc, argv, &i, "--envs", &bad))) {
            rc = parse_u64("--envs", v, 1, 65536, &o->envs);
            o->have_envs = 1;
        } else if (!bad && (v = fhd_opt(argc, argv, &i, "--act-calls", &bad)))
            rc = parse_u64("--act-calls", v, 1, 10000000, &o->act_calls);
        else if (!bad && (v = fhd_opt(argc, argv, &i, "--seed", &bad))) {
            rc = parse_u64("--seed", v, 0, 9007199254740991ull, &o->seed);
            o->have_seed = 1;
        } else if (!bad && (v = fhd_opt(argc, argv, &i, "--set", &bad))) {
            if (o->nsets == MAX_SETS || !strchr(v, '=') || v[0] == '=') {
                fprintf(stderr, "error: --set takes KEY=VALUE (at most %d of them)\n", MAX_SETS);
                return FHD_EXIT_USAGE;
            }
            o->sets[o->nsets++] = v;
        } else if (!bad && (v = fhd_opt(argc, argv, &i, "--peak-tflops", &bad))) {
            char *end = NULL;
            o->peak_tflops = strtod(v, &end);
            if (!*v || *end || !(o->peak_tflops > 0.0) || !isfinite(o->peak_tflops)) {
                fprintf(stderr, "error: --peak-tflops is \"%s\"; allowed: a number > 0\n", v);
                return FHD_EXIT_USAGE;
            }
        } else if (!bad && (v = fhd_opt(argc, argv, &i, "--run-seconds", &bad))) {
            char *end = NULL;
            o->run_seconds = strtod(v, &end);
            if (!*v || *end || !(o->run_seconds > 0.0) || !(o->run_seconds <= 3600.0)) {
                fprintf(stderr, "error: --run-seconds is \"%s\"; allowed: a number in (0, 3600]\n",
                        v);
                return FHD_EXIT_USAGE;
            }
        } else if (!bad && (v = fhd_opt(argc, argv, &i, "--plugin", &bad)))
            snprintf(o->plugin, sizeof o->plugin, "%s", v);
        else if (bad)
            return FHD_EXIT_USAGE;
        else if (!strcmp(argv[i], "--json"))
            o->json = 1;
        else if (!strcmp(argv[i], "--print-config"))
            o->print_config = 1;
        else if (!strcmp(argv[i], "--print-plan"))
            o->print_plan = 1;
        else if (!strcmp(argv[i], "--list"))
            o->list = 1;
        else if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h"))
            o->help = 1;
        else {
            fprintf(stderr, "error: unknown option \"%s\"\n%s", argv[i], fhd_bench_usage);
            return FHD_EXIT_USAGE;
        }
        if (rc != FHD_EXIT_OK)
            return rc;
    }
    if (o->list || o->help)
        return FHD_EXIT_OK;
    if (!o->preset == !o->config_path) {
        fprintf(stderr, "error: bench needs exactly one of --preset NAME and --config FILE\n%s",
                fhd_bench_usage);
        return FHD_EXIT_USAGE;
    }
    if (o->preset && !fhd_host_find_preset(o->preset)) {
        fprintf(stderr, "error: unknown preset \"%s\"; ", o->preset);
        fhd_host_print_preset_names(stderr, "known: ");
        fputc('\n', stderr);
        return FHD_EXIT_USAGE;
    }
    return FHD_EXIT_OK;
}

/* The learner config: preset or file, then the command line's overrides. with_bench adds the
 * bench's own defaults (num_envs, seed); --print-config shows the config without them. */
int fhd_bench_build_config(const bench_opts *o, int with_bench, json_t **out) {
    *out = NULL;
    char *file = NULL;
    const char *text;
    if (o->config_path) {
        file = fhd_host_read_file(o->config_path, NULL);
        if (!file) {
            fprintf(stderr, "error: cannot read config %s\n", o->config_path);
            return FHD_EXIT_CONFIG;
        }
        text = file;
    } else {
        text = fhd_host_find_preset(o->preset)->json;
    }
    json_error_t jerr;
    json_t *cfg = json_loads(text, 0, &jerr);
    free(file);
    if (!cfg || !json_is_object(cfg)) {
        fprintf(stderr, "error: %s: not a JSON object (line %d: %s)\n",
                o->config_path ? o->config_path : o->preset, jerr.line, jerr.text);
        json_decref(cfg);
        return FHD_EXIT_CONFIG;
    }
    if (o->backend)
        json_object_set_new(cfg, "backend", json_string(o->backend));
    if (with_bench || o->have_envs)
        json_object_set_new(cfg, "num_envs", json_integer((json_int_t)o->envs));
    if (with_bench || o->have_seed)
        json_object_set_new(cfg, "seed", json_integer((json_int_t)o->seed));
    for (int i = 0; i < o->nsets; i++) {
        const char *eq = strchr(o->sets[i], '=');
        char key[256];
        snprintf(key, sizeof key, "%.*s", (int)(eq - o->sets[i]), o->sets[i]);
        json_t *v = json_loads(eq + 1, JSON_DECODE_ANY, NULL);
        json_object_set_new(cfg, key, v ? v : json_string(eq + 1));
    }
    *out = cfg;
    return FHD_EXIT_OK;
}

