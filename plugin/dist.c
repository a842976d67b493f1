/* dist.c - config `distributed`: load the MPI module, check that every rank agrees, hand the
 * communicator to the backend (docs/design.md section 10).
 *
 * The agreement check is one allgather of each rank's facts (below) that every rank reaches
 * and judges alike, so a mismatch fails on every rank with the same message instead of
 * leaving some ranks waiting in a later collective. A config difference is named by its key:
 * rank 0 and the first differing rank broadcast their canonical configs and every rank
 * compares the two.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dist.h"
#include "learner.h"

#ifndef FHD_VERSION_STRING
#define FHD_VERSION_STRING "0"
#endif

/* The facts every rank must share, in allgather order. */
enum { F_CONFIG, F_JSON_LEN, F_PARAMS, F_LIBRARY, F_WORLD, F_BACKEND, F_N };

static void module_path(char *out, size_t cap) {
    const char *env = getenv("FHD_MPI_MODULE");
    Dl_info info;
    if (env && *env)
        snprintf(out, cap, "%s", env);
    else if (dladdr((void *)&module_path, &info) && info.dli_fname && strrchr(info.dli_fname, '/'))
        snprintf(out, cap, "%.*s/%s", (int)(strrchr(info.dli_fname, '/') - info.dli_fname),
                 info.dli_fname, FHD_MPI_MODULE_NAME);
    else
        snprintf(out, cap, "%s", FHD_MPI_MODULE_NAME);
}

static int32_t unavailable(fhd_error *err, const char *why) {
    fhd__error_set(err, FHD_ERR_BACKEND_UNAVAILABLE, "$.distributed",
                   "$.distributed: data-parallel training needs the MPI module: %s (build with "
                   "MPI found, Debian: libopenmpi-dev, or set $FHD_MPI_MODULE)",
                   why);
    return FHD_ERR_BACKEND_UNAVAILABLE;
}

static const fhd__comm_ops *load_module(fhd_learner *L, fhd_error *err) {
    char path[4096], why[4400];
    module_path(path, sizeof path);
    /* RTLD_GLOBAL: Open MPI's own components resolve libmpi's symbols from the global scope;
     * RTLD_NODELETE: MPI_Finalize runs at exit, from this module's code */
    void *h = dlopen(path, RTLD_NOW | RTLD_GLOBAL | RTLD_NODELETE);
    if (!h) {
        const char *e = dlerror();
        snprintf(why, sizeof why, "it could not be loaded (%s)", e ? e : path);
        unavailable(err, why);
        return NULL;
    }
    fhd__mpi_module_get_ops_fn get = (fhd__mpi_module_get_ops_fn)dlsym(h, FHD_MPI_MODULE_ENTRY);
    const fhd__comm_ops *ops = get ? get(FHD_COMM_OPS_VERSION) : NULL;
    if (!ops) {
        snprintf(why, sizeof why, "%s does not export %s of version %u", path,
                 FHD_MPI_MODULE_ENTRY, FHD_COMM_OPS_VERSION);
        dlclose(h);
        unavailable(err, why);
        return NULL;
    }
    L->mpi_module = h;
    return ops;
}

uint64_t fhd__dist_params_checksum(const float *params, uint64_t n) {
    return fhd__fnv1a(params, sizeof(float) * n, FHD_FNV_INIT);
}

static int32_t comm_fail(fhd_error *err, const char *msg) {
    fhd__error_set(err, FHD_ERR_INTERNAL, "$.distributed", "$.distributed: %s", msg);
    return FHD_ERR_INTERNAL;
}

/* The first key where rank 0's config and rank d's differ (every rank computes the same). */
static int32_t name_difference(const fhd__comm *c, const char *mine, const uint64_t *all,
                               uint32_t d, fhd_error *err) {
    char msg[512] = {0}, *text[2] = {NULL, NULL};
    const uint32_t root[2] = {0, d};
    const char *key = NULL;
    int ok = 1;
    for (int k = 0; k < 2; k++) {
        const uint64_t n = all[(uint64_t)root[k] * F_N + F_JSON_LEN];
        text[k] = calloc(n + 1, 1);
        if (!text[k])
            ok = 0;
        if (text[k] && c->rank == root[k])
            memcpy(text[k], mine, n);
        /* every rank takes part in both broadcasts; one out of memory here gives a count of 0,
         * an erroneous broadcast MPI may report or end the job on (the rare case left) */
        char scratch[1];
        if (c->ops->bcast(text[k] ? (void *)text[k] : (void *)scratch, text[k] ? n : 0, root[k],
                          msg, sizeof msg) != 0) {
            free(text[0]);
            free(text[1]);
            return comm_fail(err, msg);
        }
    }
    fhd__config a, b;
    if (ok && fhd__config_parse(text[0], strlen(text[0]), &a, NULL) == FHD_OK &&
        fhd__config_parse(text[1], strlen(text[1]), &b, NULL) == FHD_OK)
        key = fhd__config_first_difference(&a, &b, 1);
    free(text[0]);
    free(text[1]);
    char path[80];
    snprintf(path, sizeof path, "$.%s", key ? key : "");
    fhd__error_set(err, FHD_ERR_CONFIG_INCONSISTENT, key ? path : "$",
                   "%s: distributed: the config of rank %u differs from rank 0's%s%s; every rank "
                   "needs the same config (seed and network included)",
                   key ? path : "$", d, key ? " in " : "", key ? path : "");
    return FHD_ERR_CONFIG_INCONSISTENT;
}

int32_t fhd__dist_attach(fhd_learner *L, const float *params, uint64_t n_params, fhd_error *err) {
    if (!L->cfg.distributed.on)
        return FHD_OK;
    if (!L->ops->set_comm) { /* a CUDA module built without NCCL, not this core's */
        fhd__error_set(err, FHD_ERR_BACKEND_UNAVAILABLE, "$.distributed",
                       "$.distributed: the %s backend's module does not train data-parallel "
                       "(a CUDA module built without NCCL)",
                       L->ops->name);
        return FHD_ERR_BACKEND_UNAVAILABLE;
    }
    const fhd__comm_ops *ops = load_module(L, err);
    if (!ops)
        return FHD_ERR_BACKEND_UNAVAILABLE;
    char msg[512] = {0};
    int rank = 0, size = 0;
    if (ops->init(&rank, &size, msg, sizeof msg) != 0)
        return unavailable(err, msg);
    fhd__comm *c = &L->comm;
    c->ops = ops;
    c->rank = (uint32_t)rank;
    c->world = (uint32_t)size;

    char *json = fhd__config_to_json(&L->cfg);
    const char *lib = FHD_VERSION_STRING;
    uint64_t mine[F_N] = {json ? fhd__fnv1a(json, strlen(json), FHD_FNV_INIT) : 0,
                          json ? strlen(json) : 0, fhd__dist_params_checksum(params, n_params),
                          fhd__fnv1a(lib, strlen(lib), FHD_FNV_INIT), L->cfg.distributed.world_size,
                          /* "auto" may resolve differently per rank: one engine for all */
                          fhd__fnv1a(L->ops->name, strlen(L->ops->name), FHD_FNV_INIT)};
    uint64_t *all = calloc((size_t)size * F_N, sizeof(uint64_t));
    if (!all) { /* cannot take part: MPI's runtime ends the job when this process exits */
        free(json);
        fhd__error_set(err, FHD_ERR_OUT_OF_MEMORY, "$.distributed",
                       "$.distributed: out of memory for the agreement check of %d ranks", size);
        return FHD_ERR_OUT_OF_MEMORY;
    }
    int32_t rc = FHD_OK;
    if (ops->allgather_u64(mine, F_N, all, msg, sizeof msg) != 0) {
        rc = comm_fail(err, msg);
        goto done;
    }
    for (uint32_t r = 0; r < c->world && rc == FHD_OK; r++) {
        const uint64_t *f = all + (uint64_t)r * F_N;
        if (f[F_CONFIG] == 0) { /* a rank could not serialise its config: all fail alike */
            fhd__error_set(err, FHD_ERR_OUT_OF_MEMORY, "$.distributed",
                           "$.distributed: rank %u could not serialise its config (out of "
                           "memory)", r);
            rc = FHD_ERR_OUT_OF_MEMORY;
        } else if (f[F_CONFIG] != all[F_CONFIG]) {
            rc = name_difference(c, json, all, r, err);
        } else if (f[F_LIBRARY] != all[F_LIBRARY]) {
            fhd__error_set(err, FHD_ERR_CONFIG_INCONSISTENT, "$.distributed",
                           "$.distributed: rank %u runs another version of the library than "
                           "rank 0; every rank needs the same build", r);
            rc = FHD_ERR_CONFIG_INCONSISTENT;
        } else if (f[F_BACKEND] != all[F_BACKEND]) {
            fhd__error_set(err, FHD_ERR_CONFIG_INCONSISTENT, "$.backend",
                           "$.backend: rank %u runs another backend than rank 0 (this rank: "
                           "%s); every rank needs the same one (backend \"auto\" found a GPU "
                           "on some ranks only?)",
                           r, L->ops->name);
            rc = FHD_ERR_CONFIG_INCONSISTENT;
        } else if (f[F_PARAMS] != all[F_PARAMS]) {
            fhd__error_set(err, FHD_ERR_CONFIG_INCONSISTENT, "$.distributed",
                           "$.distributed: the initial parameters of rank %u differ from rank "
                           "0's with the same config; every rank needs the same build", r);
            rc = FHD_ERR_CONFIG_INCONSISTENT;
        }
    }
    const uint32_t want = L->cfg.distributed.world_size; /* 0: MPI's */
    if (rc == FHD_OK && want && want != c->world) {
        fhd__error_set(err, FHD_ERR_CONFIG_INCONSISTENT, "$.distributed.world_size",
                       "$.distributed.world_size: %u, but MPI started %u ranks (mpirun -np)",
                       L->cfg.distributed.world_size, c->world);
        rc = FHD_ERR_CONFIG_INCONSISTENT;
    }
    if (rc == FHD_OK) { /* the backend's own status: NCCL missing is BACKEND_UNAVAILABLE */
        const int32_t src = L->ops->set_comm(L->be, c);
        if (src != FHD_OK) {
            fhd__error_set(err, src, "$.distributed", "$.distributed: %s", L->ops->error(L->be));
            rc = src;
        }
    }
done:
    free(all);
    free(json);
    return rc;
}
