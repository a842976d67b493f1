/* bench_configs.h - the learner configs that cuda_bench times, built from the presets of
 * bench/presets (embedded at build time: host_bench.h) by one rule, so that no network is
 * written twice.
 *
 * A name is one of
 *   PRESET            a file bench/presets/PRESET.json (C0 B1 B1-sn B2 B3 A1 A2 ...)
 *   PRESET-PREC       that preset at matmul_precision PREC: -fp32, -tf32f (tf32_forward),
 *                     -tf32, -bf16 (the CUDA backend refuses bf16 with a conv torso)
 *   EXTRA             a named change of a preset that is no preset itself (U1: a user's
 *                     37 -> 384 -> 192 -> 7 dueling network at batch 512, otherwise B1)
 * and its config is the preset, then the bench's own keys (backend cuda, learning from the
 * first update, seed 1, 256 envs, target update every 1000; a 100k replay for image presets,
 * whose fill writes 16384 transitions), then the suffix's precision, then `autotune` when given.
 */
#ifndef FHD_BENCH_CONFIGS_H
#define FHD_BENCH_CONFIGS_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

/* The names run when none is given, in order; NULL-terminated. */
extern const char *const bench_default_names[];

/* The config JSON of `name` (malloc'd, the caller frees), with "autotune": autotune unless that
 * is NULL; or NULL with a message naming the problem in err. */
char *bench_config_json(const char *name, const char *autotune, char *err, size_t cap);

/* The network of `name` (a name as above) as gemm_sweep's call sites take it, an MLP
 * S -> H -> H -> HO with batch B: S obs_dim, H the width of both hidden layers, HO the head's
 * outputs as the backends' layout counts them (head_out: the actions of every branch, + 1 with
 * dueling), B batch_size. Returns 1, or 0 with a message in err when the name is unknown or its
 * network is not of that form (a conv torso, another number of hidden layers or widths). */
int bench_mlp_shape(const char *name, uint32_t *S, uint32_t *H, uint32_t *HO, uint32_t *B,
                    char *err, size_t cap);

/* The accepted forms of a name and the presets there are, for a usage message. */
void bench_print_names(FILE *out);

#endif
