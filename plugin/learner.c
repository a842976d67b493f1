/* learner.c - the learner's lifecycle: creation (config, backend, buffers) and destruction,
 * and the helpers every ABI call shares (the last error, the clock, the epsilon schedule).
 * Acting and observing are in learner_observe.c, training and step() in learner_train.c.
 *
 * Every ABI call validates all of its input before it changes anything, so a rejected call
 * leaves the learner exactly as it was.
 */
#define _POSIX_C_SOURCE 200809L
#include "learner.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

int32_t fhd__fail(fhd_learner *L, int32_t code, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(L->err, sizeof L->err, fmt, ap);
    va_end(ap);
    return code;
}

double fhd__now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

float fhd__epsilon(const fhd__config *c, uint64_t env_steps) {
    double f = (double)env_steps / (double)c->epsilon_decay_steps;
    if (f > 1.0)
        f = 1.0;
    return (float)(c->epsilon_start + (c->epsilon_end - c->epsilon_start) * f);
}

int32_t fhd__backend_fail(fhd_learner *L, int32_t rc, const char *what) {
    return fhd__fail(L, rc, "%s: %s", what, L->ops->error(L->be));
}

/* ---- creation --------------------------------------------------------------------------- */

static int alloc_all(fhd_learner *L) {
    const uint32_t E = L->E, n = L->n, D = L->lo.D, B = L->cfg.batch_size;
    const size_t En = (size_t)E * n, ob = (size_t)L->ob;
    L->cap_rows = E > 256 ? E : 256;
    L->st_obs = calloc(En, ob);
    L->st_act = calloc(En * D, sizeof(int32_t));
    L->st_rew = calloc(En, sizeof(float));
    L->st_head = calloc(E, sizeof(uint32_t));
    L->st_len = calloc(E, sizeof(uint32_t));
    L->em_obs = calloc(En, ob);
    L->em_next = calloc(En, ob);
    L->em_ret = calloc(En, sizeof(float));
    L->em_disc = calloc(En, sizeof(float));
    L->em_act = calloc(En * D, sizeof(int32_t));
    L->prev_obs = calloc(E, ob);
    L->prev_act = calloc((size_t)E * D, sizeof(int32_t));
    L->ep_return = calloc(E, sizeof(double));
    L->ep_len = calloc(E, sizeof(uint64_t));
    L->greedy = calloc((size_t)L->cap_rows * D, sizeof(int32_t));
    L->tb_disc = calloc(B, sizeof(float));
    L->tb_w = calloc(B, sizeof(float));
    L->next_rows = calloc(E, sizeof(*L->next_rows));
    const size_t k = L->fk;
    L->st_id = calloc(En * k, sizeof(uint64_t));
    L->em_obs_id = calloc(En * k, sizeof(uint64_t));
    L->em_next_id = calloc(En * k, sizeof(uint64_t));
    L->last_frame = malloc(sizeof(uint64_t) * E * k);
    for (size_t i = 0; L->last_frame && i < E * k; i++)
        L->last_frame[i] = FHD_FRAME_NONE;
    L->frame_ids = calloc(k, sizeof(uint64_t));
    L->frame_stored = calloc(E, 1);
    L->obs_known = calloc(E, 1);
    return L->frame_ids && L->frame_stored && L->obs_known && L->st_obs && L->st_act && L->st_rew && L->st_head && L->st_len && L->em_obs &&
           L->em_next && L->em_ret && L->em_disc && L->em_act && L->prev_obs && L->prev_act &&
           L->ep_return && L->ep_len && L->greedy && L->tb_disc && L->tb_w && L->next_rows &&
           L->st_id && L->em_obs_id && L->em_next_id && L->last_frame;
}

static void free_all(fhd_learner *L) {
    free(L->st_obs);
    free(L->st_act);
    free(L->st_rew);
    free(L->st_head);
    free(L->st_len);
    free(L->em_obs);
    free(L->em_next);
    free(L->em_ret);
    free(L->em_disc);
    free(L->em_act);
    free(L->prev_obs);
    free(L->prev_act);
    free(L->ep_return);
    free(L->ep_len);
    free(L->greedy);
    free(L->tb_disc);
    free(L->tb_w);
    free((void *)L->next_rows);
    free(L->st_id);
    free(L->em_obs_id);
    free(L->em_next_id);
    free(L->last_frame);
    free(L->frame_ids);
    free(L->frame_stored);
    free(L->obs_known);
}

void fhd__learner_destroy(fhd_learner *L) {
    if (!L)
        return;
    if (L->ops && L->be)
        L->ops->destroy(L->be);
    fhd__unload_backend(L);
    free_all(L);
    free(L);
}

int32_t fhd__learner_init(const char *json, size_t len, fhd_learner **out, fhd_error *err) {
    fhd__config cfg;
    int32_t rc = fhd__config_parse(json, len, &cfg, err);
    if (rc != FHD_OK)
        return rc;
    fhd_learner *L = calloc(1, sizeof(*L));
    if (!L) {
        fhd__error_set(err, FHD_ERR_OUT_OF_MEMORY, "", "init: out of memory");
        return FHD_ERR_OUT_OF_MEMORY;
    }
    L->cfg = cfg;
    L->backend_requested = cfg.backend;
    if (fhd__layout_init(&L->lo, &cfg) != 0) {
        free(L);
        fhd__error_set(err, FHD_ERR_CONFIG_INCONSISTENT, "$.hidden",
                       "$.hidden: the network has more than 2^31 parameters");
        return FHD_ERR_CONFIG_INCONSISTENT;
    }
    L->E = cfg.num_envs;
    L->n = cfg.n_step;
    L->ob = fhd__config_obs_bytes(&cfg);
    L->fk = cfg.num_obs_shape && cfg.frame_stack ? cfg.frame_stack : 1;
    if (!alloc_all(L)) {
        /* alloc_all's buffers: the staging ring and one observe's emitted transitions hold
         * E n (3 S + 2 D + 3) values, the step() state E (S + D + 4) (doubles as two) */
        const double En = (double)cfg.num_envs * cfg.n_step, S = L->lo.S, D = L->lo.D;
        const double bytes = 4.0 * (En * (3 * S + 2 * D + 3) + cfg.num_envs * (S + D + 10) +
                                    (double)L->cap_rows * D + 2.0 * cfg.batch_size);
        fhd__learner_destroy(L);
        fhd__error_set(err, FHD_ERR_OUT_OF_MEMORY, "",
                       "init: out of memory: the n-step staging needs about %.1f MiB (num_envs "
                       "%u x n_step %u x obs_dim %u floats, 3 copies: the ring and one observe's "
                       "emitted obs and next_obs)",
                       bytes / 1048576.0, cfg.num_envs, cfg.n_step, cfg.obs_dim);
        return FHD_ERR_OUT_OF_MEMORY;
    }
    rc = fhd__select_backend(L, err);
    if (rc == FHD_OK && cfg.obs_dtype == FHD_OBS_UINT8 &&
        !(L->ops->q_values_u8 && L->ops->replay_add_u8)) {
        fhd__error_set(err, FHD_ERR_BACKEND_UNAVAILABLE, "$.obs_dtype",
                       "$.obs_dtype: the %s backend takes float32 observations only", L->ops->name);
        rc = FHD_ERR_BACKEND_UNAVAILABLE;
    }
    if (rc == FHD_OK && cfg.num_obs_shape > 0 && !(L->ops->frame_add && L->ops->replay_add_ids)) {
        fhd__error_set(err, FHD_ERR_BACKEND_UNAVAILABLE, "$.obs_shape",
                       "$.obs_shape: the %s backend has no frame replay for image observations",
                       L->ops->name);
        rc = FHD_ERR_BACKEND_UNAVAILABLE;
    }
    L->frames = cfg.num_obs_shape > 0;
    if (rc != FHD_OK) {
        fhd__learner_destroy(L);
        return rc;
    }
    /* initial parameters and spectral-norm vectors: computed here, identical for all backends */
    const uint64_t P = L->lo.num_params;
    float *params = malloc(sizeof(float) * 2 * P);
    float *sn = malloc(sizeof(float) * (2 * L->lo.sn_size + 1));
    if (params && sn) {
        fhd__layout_init_params(&L->lo, cfg.seed, params);
        if (fhd__layout_init_sn(&L->lo, cfg.seed, params, sn) != 0) {
            free(sn);
            sn = NULL;
        }
    }
    if (!params || !sn) {
        free(params);
        free(sn);
        fhd__learner_destroy(L);
        fhd__error_set(err, FHD_ERR_OUT_OF_MEMORY, "",
                       "init: out of memory for %llu parameters (%.1f MiB: the online and target "
                       "initial values)",
                       (unsigned long long)P, 8.0 * (double)P / 1048576.0);
        return FHD_ERR_OUT_OF_MEMORY;
    }
    memcpy(params + P, params, sizeof(float) * P); /* target = online */
    if (L->lo.sn_size)
        memcpy(sn + L->lo.sn_size, sn, sizeof(float) * L->lo.sn_size);
    char msg[512] = {0};
    rc = L->ops->create(&L->cfg, &L->lo, params, sn, &L->be, msg, sizeof msg);
    if (rc != FHD_OK)
        fhd__error_set(err, rc, "", "init: %s", msg);
    else /* every rank reaches here with its initial parameters (docs/design.md section 10) */
        rc = fhd__dist_attach(L, params, 2 * P, err);
    free(params);
    free(sn);
    if (rc != FHD_OK) {
        fhd__learner_destroy(L);
        return rc;
    }
    L->created_at = fhd__now();
    *out = L;
    return FHD_OK;
}
