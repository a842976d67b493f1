/* host_bench_geom.h - what `fhd-host bench` knows about the network it times: the shape, read
 * from the config over the manifest's defaults and checked against the learner's own tensors,
 * and the GEMM floating-point operations of one update. */
#ifndef FHD_HOST_BENCH_GEOM_H
#define FHD_HOST_BENCH_GEOM_H

#include <stdint.h>

#include <jansson.h>

#include "foxhunt_dqn.h"

#define BENCH_MAX_LAYERS 16

/* Conv layer c: (cin, hin, win) -> (cout, hout, wout), square kernel k, as PyTorch's Conv2d. */
typedef struct bench_conv {
    uint32_t cin, cout, k, stride, pad, hout, wout;
} bench_conv;

typedef struct bench_geom {
    uint32_t S, D, KT, L, B, HO; /* obs values, branches, actions, linear layers, batch, head */
    uint32_t hidden[BENCH_MAX_LAYERS];
    int dueling, double_dqn;
    uint64_t capacity;
    int u8;         /* obs_dtype "uint8" (data passed in the ABI 1.1 *_u8 fields) */
    uint32_t NC, F; /* conv layers; F the linear torso's input (S without convs) */
    bench_conv conv[BENCH_MAX_LAYERS];
} bench_geom;

/* Config value of `key`, else the manifest schema's default (NULL if neither). */
json_t *fhd_host_cfg_get(json_t *cfg, json_t *manifest, const char *key);

/* The network of config `cfg` (values over the manifest schema's defaults; torso "nature"
 * expanded as the library expands it). 0, or -1 when the shape cannot be read. */
int fhd_host_bench_geom(json_t *cfg, json_t *manifest, bench_geom *g);

/* 0 when the learner's tensors have the shapes *g predicts (every conv weight (cout, cin, k,
 * k), the first linear layer's (H_0, F)); else -1 with the first difference in why. */
int fhd_host_bench_geom_check(const fhd_api_v1 *api, fhd_learner *L, const bench_geom *g, char *why,
                              size_t cap);

/* GEMM FLOPs of one update (see host_bench_geom.c). */
double fhd_host_bench_flops(const bench_geom *g);

#endif
