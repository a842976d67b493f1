/* host_bench_opts.h - `fhd-host bench`'s command line and the config it builds: the options,
 * their parser and the learner config (preset or file, then the command line's overrides). */
#ifndef FHD_HOST_BENCH_OPTS_H
#define FHD_HOST_BENCH_OPTS_H

#include <stdint.h>

#include <jansson.h>

#define MAX_SETS 32

typedef struct bench_opts {
    const char *preset, *config_path, *backend;
    uint64_t updates, repeats, warmup, fill, envs, act_calls, seed;
    int have_updates, have_warmup, have_fill, have_envs, have_seed;
    double peak_tflops, run_seconds;
    int json, print_config, print_plan, list, help;
    const char *sets[MAX_SETS];
    int nsets;
    char plugin[4096];
} bench_opts;


/* The usage text (--help). */
extern const char fhd_bench_usage[];

/* argv into o; FHD_EXIT_OK, else FHD_EXIT_USAGE with the reason on stderr. */
int fhd_bench_parse_args(int argc, char **argv, bench_opts *o);

/* The learner config of o: the preset's or --config's JSON, then --backend, --envs, --seed
 * (with_bench: the bench's defaults for these too) and every --set. */
int fhd_bench_build_config(const bench_opts *o, int with_bench, json_t **out);

#endif
