/* api.c - the one exported symbol, version negotiation and the v1 function table. */
#include <stddef.h>

#include "config.h"
#include "error.h"
#include "learner.h"

#ifndef FHD_VERSION_STRING
#error "FHD_VERSION_STRING must be defined by the build"
#endif

/* ---- v1 table --------------------------------------------------------------------------- */

static const char *api_manifest(void) { return fhd__manifest_json; }

static int32_t api_init(const char *json, size_t len, fhd_learner **out, fhd_error *err) {
    if (err && err->struct_size >= offsetof(fhd_error, code) + sizeof(int32_t))
        err->code = FHD_OK;
    if (!out) {
        fhd__error_set(err, FHD_ERR_NULL_POINTER, "", "init: `out` is NULL");
        return FHD_ERR_NULL_POINTER;
    }
    *out = NULL;
    if (!json) {
        fhd__error_set(err, FHD_ERR_NULL_POINTER, "", "init: `config_json` is NULL");
        return FHD_ERR_NULL_POINTER;
    }
    return fhd__learner_init(json, len, out, err);
}

static void api_destroy(fhd_learner *L) { fhd__learner_destroy(L); }

static const char *api_last_error(const fhd_learner *L) {
    return L ? L->err : "last_error: the learner handle is NULL";
}

#define FHD__CHECK_LEARNER(L)                                                                  \
    do {                                                                                       \
        if (!(L))                                                                              \
            return FHD_ERR_NULL_POINTER;                                                       \
    } while (0)

static int32_t api_act(fhd_learner *L, const fhd_act_args *a) {
    FHD__CHECK_LEARNER(L);
    return fhd__learner_act(L, a);
}
static int32_t api_observe(fhd_learner *L, const fhd_transitions *t) {
    FHD__CHECK_LEARNER(L);
    return fhd__learner_observe(L, t);
}
static int32_t api_train(fhd_learner *L, uint32_t n, fhd_train_stats *st) {
    FHD__CHECK_LEARNER(L);
    return fhd__learner_train(L, n, st);
}
static int32_t api_train_batch(fhd_learner *L, const fhd_batch *b, fhd_train_stats *st) {
    FHD__CHECK_LEARNER(L);
    return fhd__learner_train_batch(L, b, st);
}
static int32_t api_step(fhd_learner *L, const fhd_step_args *a) {
    FHD__CHECK_LEARNER(L);
    return fhd__learner_step(L, a);
}
static int32_t api_metrics(fhd_learner *L, char *buf, size_t cap, size_t *needed) {
    FHD__CHECK_LEARNER(L);
    return fhd__learner_metrics(L, buf, cap, needed);
}
static int32_t api_save(fhd_learner *L, const char *path, uint32_t flags) {
    FHD__CHECK_LEARNER(L);
    return fhd__checkpoint_save(L, path, flags);
}
static int32_t api_load(fhd_learner *L, const char *path, uint32_t flags) {
    FHD__CHECK_LEARNER(L);
    return fhd__checkpoint_load(L, path, flags);
}
static int32_t api_tensor_info(fhd_learner *L, uint32_t i, fhd_tensor_info *info) {
    FHD__CHECK_LEARNER(L);
    return fhd__learner_tensor_info(L, i, info);
}
static int32_t api_tensor_read(fhd_learner *L, const char *name, float *dst, uint64_t n) {
    FHD__CHECK_LEARNER(L);
    return fhd__learner_tensor_read(L, name, dst, n);
}
static int32_t api_tensor_write(fhd_learner *L, const char *name, const float *src, uint64_t n) {
    FHD__CHECK_LEARNER(L);
    return fhd__learner_tensor_write(L, name, src, n);
}

static int32_t api_obs_info(fhd_learner *L, fhd_obs_info *info) {
    FHD__CHECK_LEARNER(L);
    return fhd__learner_obs_info(L, info);
}

static const fhd_api_v1 api_v1 = {
    sizeof(fhd_api_v1),
    1,
    FHD_ABI_MINOR,
    0,
    api_manifest,
    fhd__status_name,
    fhd__status_message,
    api_init,
    api_destroy,
    api_last_error,
    api_act,
    api_observe,
    api_train,
    api_train_batch,
    api_step,
    api_metrics,
    api_save,
    api_load,
    api_tensor_info,
    api_tensor_read,
    api_tensor_write,
    /* minor 1 */
    api_obs_info,
};

static const void *get_api(uint32_t major, fhd_error *err) {
    if (err && err->struct_size >= offsetof(fhd_error, code) + sizeof(int32_t))
        err->code = FHD_OK;
    if (major == 1)
        return &api_v1;
    fhd__error_set(err, FHD_ERR_UNSUPPORTED_VERSION, "",
                   "foxhunt-dqn %s: ABI major %u is not supported; this library provides "
                   "major 1 (minor %d)",
                   FHD_VERSION_STRING, major, FHD_ABI_MINOR);
    return NULL;
}

static const fhd_api_base api_base = {sizeof(fhd_api_base), FHD_ABI_MAJOR, FHD_VERSION_STRING,
                                      get_api};

FHD_EXPORT const fhd_api_base *fhd_get_api_base(void) { return &api_base; }
