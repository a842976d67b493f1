/* learner.c - the learner front: creation, validation, n-step returns, schedule, exploration.
 *
 * Every ABI call validates all of its input before it changes anything, so a rejected call
 * leaves the learner exactly as it was.
 */
#define _POSIX_C_SOURCE 200809L
#include "learner.h"

#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "philox.h"

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
    return L->st_obs && L->st_act && L->st_rew && L->st_head && L->st_len && L->em_obs &&
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

/* ---- act -------------------------------------------------------------------------------- */

/* Greedy or epsilon-greedy actions for n rows of obs (validated). */
static int32_t choose_actions(fhd_learner *L, uint32_t n, const unsigned char *obs,
                              int32_t *actions, float *q, int explore) {
    const fhd__layout *lo = &L->lo;
    const uint32_t D = lo->D;
    const float eps = explore ? fhd__epsilon(&L->cfg, L->env_steps) : 0.0f;
    const uint64_t event = L->act_calls;
    /* rows whose coin says "explore" take uniform random actions per branch */
    int need_greedy = q != NULL || eps < 1.0f;
    if (need_greedy) {
        for (uint32_t r0 = 0; r0 < n; r0 += L->cap_rows) {
            uint32_t m = n - r0 < L->cap_rows ? n - r0 : L->cap_rows;
            const unsigned char *rows = obs + (size_t)r0 * L->ob;
            float *qr = q ? q + (size_t)r0 * lo->KT : NULL;
            int32_t rc = L->cfg.obs_dtype == FHD_OBS_UINT8
                             ? L->ops->q_values_u8(L->be, m, rows, qr, L->greedy)
                             : L->ops->q_values(L->be, m, (const float *)(const void *)rows, qr,
                                                L->greedy);
            if (rc != FHD_OK)
                return fhd__backend_fail(L, rc, "act");
            memcpy(actions + (size_t)r0 * D, L->greedy, sizeof(int32_t) * m * D);
        }
    }
    if (explore) {
        /* distributed: rank r's rows are rows [r n, (r + 1) n) of one draw over the ranks, so
         * ranks of one seed explore independently (docs/design.md section 10) */
        const uint32_t row0 = L->comm.ops ? L->comm.rank * n : 0;
        for (uint32_t i = 0; i < n; i++) {
            const uint32_t k0 = (row0 + i) * (D + 1);
            fhd__u32x4 coin = fhd__rng_draw(L->cfg.seed, FHD_RNG_STREAM_EXPLORE, event, k0);
            if (fhd__rng_u01f(coin.v[0]) >= eps)
                continue;
            for (uint32_t d = 0; d < D; d++) {
                fhd__u32x4 r = fhd__rng_draw(L->cfg.seed, FHD_RNG_STREAM_EXPLORE, event, k0 + 1 + d);
                actions[(size_t)i * D + d] = (int32_t)fhd__rng_below(r.v[0], lo->K[d]);
            }
        }
        L->act_calls++;
    }
    return FHD_OK;
}

int32_t fhd__learner_act(fhd_learner *L, const fhd_act_args *a) {
    const unsigned char *obs;
    FHD__TRY(fhd__check_struct(L, a, offsetof(fhd_act_args, reserved), "act", "args"));
    if (a->num_obs == 0 || a->num_obs > (1u << 24))
        return fhd__fail(L, FHD_ERR_INVALID_ARGUMENT, "act: num_obs is %u; allowed: [1, 16777216]",
                         a->num_obs);
    FHD__TRY(fhd__pick_obs(L, a->obs, FHD__ARG_FIELD(a, fhd_act_args, obs_u8), 1, "act", "obs",
                           "obs_u8", &obs));
    if (!a->actions)
        return fhd__fail(L, FHD_ERR_NULL_POINTER, "act: `actions` is NULL");
    if (a->explore > 1)
        return fhd__fail(L, FHD_ERR_INVALID_ARGUMENT, "act: explore is %u; allowed: 0 or 1",
                         a->explore);
    FHD__TRY(fhd__check_obs_rows(L, obs, a->num_obs, NULL, "act", "obs", "observation"));
    return choose_actions(L, a->num_obs, obs, a->actions, a->q_values, (int)a->explore);
}

/* ---- observe: n-step accumulation ------------------------------------------------------- */

/* Emit the transition starting at entry j (0 = oldest) of env e's ring, ending at next_obs. */
static void emit(fhd_learner *L, uint32_t e, uint32_t j, const unsigned char *next_obs,
                 int terminated, uint32_t *count) {
    const uint32_t D = L->lo.D, n = L->n;
    const size_t ob = (size_t)L->ob;
    const uint32_t len = L->st_len[e];
    const double g = L->cfg.gamma;
    double ret = 0.0, gk = 1.0;
    for (uint32_t k = j; k < len; k++) {
        uint32_t slot = (L->st_head[e] + k) % n;
        ret += gk * (double)L->st_rew[(size_t)e * n + slot];
        gk *= g;
    }
    const uint32_t slot = (L->st_head[e] + j) % n;
    const uint32_t o = (*count)++;
    if (L->frames) { /* next_obs: the frames just added for env e */
        const size_t k = L->fk;
        memcpy(L->em_obs_id + o * k, L->st_id + ((size_t)e * n + slot) * k, sizeof(uint64_t) * k);
        memcpy(L->em_next_id + o * k, L->last_frame + e * k, sizeof(uint64_t) * k);
    } else {
        memcpy(L->em_obs + (size_t)o * ob, L->st_obs + ((size_t)e * n + slot) * ob, ob);
        memcpy(L->em_next + (size_t)o * ob, next_obs, ob);
    }
    memcpy(L->em_act + (size_t)o * D, L->st_act + ((size_t)e * n + slot) * D, sizeof(int32_t) * D);
    L->em_ret[o] = (float)ret;
    L->em_disc[o] = terminated ? 0.0f : (float)gk; /* gamma^m, m = len - j */
}

/* Validated transitions -> n-step accumulators -> replay. Envs with valid[e] == 0 (valid may
 * be NULL) take no part: nothing stored, their stream and episode unchanged. */
static int32_t ingest(fhd_learner *L, const unsigned char *obs, const int32_t *act,
                      const float *rew, const unsigned char *const *next_rows,
                      const uint8_t *term, const uint8_t *trunc, const uint8_t *valid) {
    const uint32_t E = L->E, D = L->lo.D, n = L->n;
    const size_t ob = (size_t)L->ob;
    uint32_t count = 0, stepped = 0;
    for (uint32_t e = 0; e < E; e++) {
        if (valid && !valid[e])
            continue;
        stepped++;
        /* push (s, a, r) */
        uint32_t slot = (L->st_head[e] + L->st_len[e]) % n;
        if (L->frames) { /* s: the last next_obs when it is the same; s': s shifted on */
            uint64_t *ids = L->st_id + ((size_t)e * n + slot) * L->fk;
            int32_t rc = L->ops->frame_add(L->be, obs + (size_t)e * ob,
                                           L->last_frame + (size_t)e * L->fk, ids);
            if (rc == FHD_OK)
                rc = L->ops->frame_add(L->be, next_rows[e], ids,
                                       L->last_frame + (size_t)e * L->fk);
            if (rc != FHD_OK)
                return fhd__backend_fail(L, rc, "observe");
        } else {
            memcpy(L->st_obs + ((size_t)e * n + slot) * ob, obs + (size_t)e * ob, ob);
        }
        memcpy(L->st_act + ((size_t)e * n + slot) * D, act + (size_t)e * D, sizeof(int32_t) * D);
        L->st_rew[(size_t)e * n + slot] = rew[e];
        L->st_len[e]++;
        const int done = term[e] || trunc[e];
        if (done) { /* flush: every pending start gets its m-step return */
            for (uint32_t j = 0; j < L->st_len[e]; j++)
                emit(L, e, j, next_rows[e], term[e], &count);
            L->st_len[e] = 0;
            L->st_head[e] = 0;
        } else if (L->st_len[e] == n) {
            emit(L, e, 0, next_rows[e], 0, &count);
            L->st_head[e] = (L->st_head[e] + 1) % n;
            L->st_len[e]--;
        }
        L->ep_return[e] += rew[e];
        L->ep_len[e]++;
        if (done) {
            L->last_episode_return = L->ep_return[e];
            L->recent[L->recent_pos] = L->ep_return[e];
            L->recent_pos = (L->recent_pos + 1) % FHD_RECENT_EPISODES;
            if (L->recent_count < FHD_RECENT_EPISODES)
                L->recent_count++;
            L->episodes++;
            L->ep_return[e] = 0.0;
            L->ep_len[e] = 0;
        }
    }
    L->env_steps += stepped;
    if (count && L->frames) {
        int32_t rc = L->ops->replay_add_ids(L->be, count, L->em_obs_id, L->em_act, L->em_ret,
                                            L->em_next_id, L->em_disc);
        if (rc != FHD_OK)
            return fhd__backend_fail(L, rc, "observe");
    } else if (count) {
        int32_t rc = L->cfg.obs_dtype == FHD_OBS_UINT8
                         ? L->ops->replay_add_u8(L->be, count, L->em_obs, L->em_act, L->em_ret,
                                                 L->em_next, L->em_disc)
                         : L->ops->replay_add(L->be, count, (const float *)(void *)L->em_obs,
                                              L->em_act, L->em_ret,
                                              (const float *)(void *)L->em_next, L->em_disc);
        if (rc != FHD_OK)
            return fhd__backend_fail(L, rc, "observe");
    }
    return FHD_OK;
}

int32_t fhd__learner_observe(fhd_learner *L, const fhd_transitions *t) {
    const unsigned char *obs, *next;
    FHD__TRY(fhd__check_struct(L, t, FHD_TRANSITIONS_SIZE_V1_0, "observe", "transitions"));
    if (t->num_envs != L->E)
        return fhd__fail(L, FHD_ERR_SIZE_MISMATCH,
                         "observe: num_envs is %u; the config's num_envs is %u", t->num_envs, L->E);
    const uint8_t *valid = FHD__ARG_FIELD(t, fhd_transitions, valid);
    FHD__TRY(fhd__pick_obs(L, t->obs, FHD__ARG_FIELD(t, fhd_transitions, obs_u8), 1, "observe",
                           "obs", "obs_u8", &obs));
    FHD__TRY(fhd__pick_obs(L, t->next_obs, FHD__ARG_FIELD(t, fhd_transitions, next_obs_u8), 1,
                           "observe", "next_obs", "next_obs_u8", &next));
    const char *names[4] = {"actions", "rewards", "terminated", "truncated"};
    const void *ptrs[4] = {t->actions, t->rewards, t->terminated, t->truncated};
    for (int i = 0; i < 4; i++)
        if (!ptrs[i])
            return fhd__fail(L, FHD_ERR_NULL_POINTER, "observe: `%s` is NULL", names[i]);
    const uint32_t E = L->E;
    if (valid)
        FHD__TRY(fhd__check_flags(L, valid, E, NULL, "observe", "valid"));
    FHD__TRY(fhd__check_obs_rows(L, obs, E, valid, "observe", "obs", "env"));
    FHD__TRY(fhd__check_obs_rows(L, next, E, valid, "observe", "next_obs", "env"));
    FHD__TRY(fhd__check_finite(L, t->rewards, E, 1, valid, "observe", "rewards", "env"));
    FHD__TRY(fhd__check_actions(L, t->actions, E, valid, "observe", "actions", "env"));
    FHD__TRY(fhd__check_flags(L, t->terminated, E, valid, "observe", "terminated"));
    FHD__TRY(fhd__check_flags(L, t->truncated, E, valid, "observe", "truncated"));
    FHD__TRY(fhd__check_returns(L, t->rewards, valid, "observe"));
    for (uint32_t e = 0; e < E; e++)
        L->next_rows[e] = next + (size_t)e * L->ob;
    return ingest(L, obs, t->actions, t->rewards, L->next_rows, t->terminated, t->truncated,
                  valid);
}

/* ---- training --------------------------------------------------------------------------- */

/* FHD_ERR_DIVERGED: one diverged update on the CPU (it stops there); the CUDA backend, which
 * skips diverged updates on the device, reports them as the call's skipped ones */
static void count_diverged(fhd_learner *L, int32_t rc, const fhd_train_stats *st) {
    if (rc == FHD_ERR_DIVERGED)
        L->diverged_updates += st->updates_skipped ? st->updates_skipped : 1;
}

static int32_t run_updates(fhd_learner *L, uint32_t n, fhd_train_stats *st) {
    double t0 = fhd__now();
    int32_t rc = L->ops->train(L->be, n, st);
    L->train_seconds += fhd__now() - t0;
    count_diverged(L, rc, st);
    if (rc != FHD_OK)
        return fhd__backend_fail(L, rc, "train");
    L->timed_updates += n;
    return FHD_OK;
}

static void stats_reset(fhd_train_stats *st) {
    if (!st)
        return;
    uint32_t sz = st->struct_size;
    fhd_train_stats z = FHD_TRAIN_STATS_INIT;
    memcpy(st, &z, sz < sizeof z ? sz : sizeof z);
    st->struct_size = sz;
}

/* The caller's stats struct may be an older, shorter version: use a full local one. */
static void stats_out(fhd_train_stats *dst, const fhd_train_stats *src) {
    if (!dst)
        return;
    uint32_t sz = dst->struct_size;
    memcpy(dst, src, sz < sizeof *src ? sz : sizeof *src);
    dst->struct_size = sz;
}

static uint64_t replay_size(fhd_learner *L) {
    fhd__backend_scalars s;
    L->ops->get_scalars(L->be, &s);
    return s.replay_size;
}

int32_t fhd__learner_train(fhd_learner *L, uint32_t n, fhd_train_stats *st) {
    if (st)
        FHD__TRY(fhd__check_struct(L, st, offsetof(fhd_train_stats, loss), "train", "stats"));
    if (n > 1000000)
        return fhd__fail(L, FHD_ERR_INVALID_ARGUMENT, "train: num_updates is %u; allowed: [0, 1000000]",
                         n);
    uint64_t have = replay_size(L);
    uint64_t need = L->cfg.batch_size;
    if (have < need)
        return fhd__fail(L, FHD_ERR_NOT_READY,
                         "train: the replay holds %llu transitions; batch_size %llu are needed",
                         (unsigned long long)have, (unsigned long long)need);
    fhd_train_stats local = FHD_TRAIN_STATS_INIT;
    stats_reset(st);
    int32_t rc = n ? run_updates(L, n, &local) : FHD_OK;
    stats_out(st, &local);
    return rc;
}

int32_t fhd__learner_train_batch(fhd_learner *L, const fhd_batch *b, fhd_train_stats *st) {
    const unsigned char *obs, *next;
    FHD__TRY(fhd__check_struct(L, b, FHD_BATCH_SIZE_V1_0, "train_batch", "batch"));
    if (st)
        FHD__TRY(fhd__check_struct(L, st, offsetof(fhd_train_stats, loss), "train_batch", "stats"));
    const uint32_t B = L->cfg.batch_size;
    if (b->batch_size != B)
        return fhd__fail(L, FHD_ERR_SIZE_MISMATCH,
                         "train_batch: batch_size is %u; the config's batch_size is %u",
                         b->batch_size, B);
    FHD__TRY(fhd__pick_obs(L, b->obs, FHD__ARG_FIELD(b, fhd_batch, obs_u8), 1, "train_batch",
                           "obs", "obs_u8", &obs));
    FHD__TRY(fhd__pick_obs(L, b->next_obs, FHD__ARG_FIELD(b, fhd_batch, next_obs_u8), 1,
                           "train_batch", "next_obs", "next_obs_u8", &next));
    const char *names[3] = {"actions", "rewards", "terminated"};
    const void *ptrs[3] = {b->actions, b->rewards, b->terminated};
    for (int i = 0; i < 3; i++)
        if (!ptrs[i])
            return fhd__fail(L, FHD_ERR_NULL_POINTER, "train_batch: `%s` is NULL", names[i]);
    FHD__TRY(fhd__check_obs_rows(L, obs, B, NULL, "train_batch", "obs", "row"));
    FHD__TRY(fhd__check_obs_rows(L, next, B, NULL, "train_batch", "next_obs", "row"));
    FHD__TRY(fhd__check_finite(L, b->rewards, B, 1, NULL, "train_batch", "rewards", "row"));
    FHD__TRY(fhd__check_actions(L, b->actions, B, NULL, "train_batch", "actions", "row"));
    FHD__TRY(fhd__check_flags(L, b->terminated, B, NULL, "train_batch", "terminated"));
    if (b->discounts) {
        FHD__TRY(fhd__check_finite(L, b->discounts, B, 1, NULL, "train_batch", "discounts",
                                   "row"));
        for (uint32_t i = 0; i < B; i++)
            if (b->discounts[i] < 0.0f || b->discounts[i] > 1.0f)
                return fhd__fail(L, FHD_ERR_INVALID_ARGUMENT,
                                 "train_batch: discounts[%u] = %g; allowed: [0, 1]", i,
                                 (double)b->discounts[i]);
    }
    if (b->weights) {
        FHD__TRY(fhd__check_finite(L, b->weights, B, 1, NULL, "train_batch", "weights", "row"));
        for (uint32_t i = 0; i < B; i++)
            if (b->weights[i] < 0.0f)
                return fhd__fail(L, FHD_ERR_INVALID_ARGUMENT,
                                 "train_batch: weights[%u] = %g; allowed: >= 0", i,
                                 (double)b->weights[i]);
    }
    for (uint32_t i = 0; i < B; i++) {
        float g = b->discounts ? b->discounts[i] : (float)L->cfg.gamma;
        L->tb_disc[i] = b->terminated[i] ? 0.0f : g;
        L->tb_w[i] = b->weights ? b->weights[i] : 1.0f;
    }
    const int u8 = L->cfg.obs_dtype == FHD_OBS_UINT8;
    fhd__host_batch hb = {B,
                          u8 ? NULL : b->obs,
                          b->actions,
                          b->rewards,
                          u8 ? NULL : b->next_obs,
                          L->tb_disc,
                          L->tb_w,
                          b->td_errors,
                          b->targets,
                          u8 ? obs : NULL,
                          u8 ? next : NULL};
    fhd_train_stats local = FHD_TRAIN_STATS_INIT;
    stats_reset(st);
    double t0 = fhd__now();
    int32_t rc = L->ops->train_batch(L->be, &hb, &local);
    L->train_seconds += fhd__now() - t0;
    count_diverged(L, rc, &local);
    if (rc != FHD_OK)
        return fhd__backend_fail(L, rc, "train_batch");
    L->timed_updates++;
    stats_out(st, &local);
    return FHD_OK;
}

/* ---- step ------------------------------------------------------------------------------- */

int32_t fhd__learner_step(fhd_learner *L, const fhd_step_args *a) {
    const unsigned char *obs, *final_obs;
    FHD__TRY(fhd__check_struct(L, a, FHD_STEP_ARGS_SIZE_V1_0, "step", "args"));
    if (a->stats)
        FHD__TRY(fhd__check_struct(L, a->stats, offsetof(fhd_train_stats, loss), "step", "stats"));
    const uint32_t E = L->E;
    const size_t ob = (size_t)L->ob;
    if (a->num_envs != E)
        return fhd__fail(L, FHD_ERR_SIZE_MISMATCH,
                         "step: num_envs is %u; the config's num_envs is %u", a->num_envs, E);
    const uint8_t *valid = FHD__ARG_FIELD(a, fhd_step_args, valid);
    FHD__TRY(fhd__pick_obs(L, a->obs, FHD__ARG_FIELD(a, fhd_step_args, obs_u8), 1, "step", "obs",
                           "obs_u8", &obs));
    FHD__TRY(fhd__pick_obs(L, a->final_obs, FHD__ARG_FIELD(a, fhd_step_args, final_obs_u8), 0,
                           "step", "final_obs", "final_obs_u8", &final_obs));
    if (!a->actions)
        return fhd__fail(L, FHD_ERR_NULL_POINTER, "step: `actions` is NULL");
    if (valid)
        FHD__TRY(fhd__check_flags(L, valid, E, NULL, "step", "valid"));
    FHD__TRY(fhd__check_obs_rows(L, obs, E, NULL, "step", "obs", "env"));
    const int has_transition = a->rewards != NULL;
    if (has_transition) {
        if (!L->have_prev)
            return fhd__fail(L, FHD_ERR_INVALID_ARGUMENT,
                             "step: rewards given but there is no previous step to attach them "
                             "to; pass rewards = NULL on the first call");
        if (!a->terminated)
            return fhd__fail(L, FHD_ERR_NULL_POINTER, "step: `terminated` is NULL");
        if (!a->truncated)
            return fhd__fail(L, FHD_ERR_NULL_POINTER, "step: `truncated` is NULL");
        FHD__TRY(fhd__check_finite(L, a->rewards, E, 1, valid, "step", "rewards", "env"));
        FHD__TRY(fhd__check_flags(L, a->terminated, E, valid, "step", "terminated"));
        FHD__TRY(fhd__check_flags(L, a->truncated, E, valid, "step", "truncated"));
        FHD__TRY(fhd__check_returns(L, a->rewards, valid, "step"));
        if (final_obs)
            for (uint32_t e = 0; e < E; e++)
                if ((!valid || valid[e]) && (a->terminated[e] || a->truncated[e]))
                    FHD__TRY(fhd__check_obs_rows(L, final_obs + e * ob, 1, NULL, "step",
                                                 "final_obs", "env"));
    }
    fhd_train_stats local = FHD_TRAIN_STATS_INIT;
    stats_reset(a->stats);
    int32_t trained = FHD_OK; /* FHD_ERR_DIVERGED: the step completes, and says so */
    if (has_transition) {
        for (uint32_t e = 0; e < E; e++) {
            const int done = (!valid || valid[e]) && (a->terminated[e] || a->truncated[e]);
            L->next_rows[e] = (done && final_obs ? final_obs : obs) + e * ob;
        }
        const uint64_t before = L->env_steps;
        int32_t rc = ingest(L, L->prev_obs, L->prev_act, a->rewards, L->next_rows, a->terminated,
                            a->truncated, valid);
        if (rc != FHD_OK)
            return rc;
        /* schedule: gradient_steps updates per train_freq env steps after learning_starts */
        const uint64_t tf = L->cfg.train_freq, after = L->env_steps;
        uint64_t rounds = after / tf - before / tf;
        if (after >= L->cfg.learning_starts && rounds > 0 &&
            replay_size(L) >= L->cfg.batch_size) {
            uint64_t n = rounds * L->cfg.gradient_steps;
            trained = run_updates(L, (uint32_t)n, &local);
            if (trained != FHD_OK && trained != FHD_ERR_DIVERGED)
                return trained;
        }
    }
    int32_t rc = choose_actions(L, E, obs, a->actions, NULL, 1);
    if (rc != FHD_OK)
        return rc;
    memcpy(L->prev_obs, obs, ob * E);
    memcpy(L->prev_act, a->actions, sizeof(int32_t) * E * L->lo.D);
    L->have_prev = 1;
    stats_out(a->stats, &local);
    return trained;
}
