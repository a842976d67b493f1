/* host_bench.h - the benchmark presets of `fhd-host bench`: every bench/presets/NAME.json,
 * embedded byte for byte at build time (host_stub/CMakeLists.txt generates the table from the
 * folder, so a preset is added by adding its file; library fhd_bench_presets, which
 * bench/cuda/cuda_bench links too). bench/torch_reference.py reads the same files, so the two
 * sides of a comparison run one config. */
#ifndef FHD_HOST_BENCH_H
#define FHD_HOST_BENCH_H

#include <stddef.h>
#include <stdio.h>

typedef struct fhd_host_preset {
    const char *name; /* the file name without ".json" */
    const char *json; /* the file's text, NUL-terminated */
} fhd_host_preset;

/* (fhd_host_num_presets + 1) entries in name order (strcmp), the last {NULL, NULL}. */
extern const fhd_host_preset fhd_host_presets[];
extern const size_t fhd_host_num_presets;

/* The preset called `name`, or NULL. */
const fhd_host_preset *fhd_host_find_preset(const char *name);

/* One line per preset: the name and a summary of the file (the network's shape, then the
 * switches it sets: booleans that are true, strings, a non-zero cql_alpha). */
void fhd_host_list_presets(FILE *out);

/* The known names, space-separated, after `prefix` (for error messages). */
void fhd_host_print_preset_names(FILE *out, const char *prefix);

#endif
