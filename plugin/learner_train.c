/* learner_train.c - training: train (n updates from the replay), train_batch (one update on a
 * caller's batch) and step (observe, then the schedule's updates, then act), with the stats
 * they return and the divergence count.
 */
#include <string.h>

#include "learner.h"

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
        return fhd__fail(L, FHD_ERR_INVALID_ARGUMENT,
                         "train: num_updates is %u; allowed: [0, 1000000]", n);
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
    FHD__TRY(fhd__pick_obs(L, b->obs, FHD__ARG_FIELD(b, fhd_batch, obs_u8), 1, "train_batch", "obs",
                           "obs_u8", &obs));
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
        FHD__TRY(fhd__check_finite(L, b->discounts, B, 1, NULL, "train_batch", "discounts", "row"));
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
        int32_t rc = fhd__ingest(L, L->prev_obs, L->prev_act, a->rewards, L->next_rows,
                                 a->terminated, a->truncated, valid, 1);
        if (rc != FHD_OK)
            return rc;
        /* schedule: gradient_steps updates per train_freq env steps after learning_starts */
        const uint64_t tf = L->cfg.train_freq, after = L->env_steps;
        uint64_t rounds = after / tf - before / tf;
        if (after >= L->cfg.learning_starts && rounds > 0 && replay_size(L) >= L->cfg.batch_size) {
            uint64_t n = rounds * L->cfg.gradient_steps;
            trained = run_updates(L, (uint32_t)n, &local);
            if (trained != FHD_OK && trained != FHD_ERR_DIVERGED)
                return trained;
        }
    }
    /* with the frame-once replay the obs are in the frame ring (most already by the ingest):
     * act reads them there where the backend can */
    const uint64_t *ids = NULL;
    if (L->frames) {
        for (uint32_t e = 0; e < E; e++) {
            const int ok = has_transition && (!valid || valid[e]);
            const int done = ok && (a->terminated[e] || a->truncated[e]);
            L->frame_stored[e] = ok && !(done && final_obs);
        }
        int32_t rc = fhd__frames_current(L, obs, L->frame_stored);
        if (rc != FHD_OK)
            return rc;
        ids = L->last_frame;
    }
    int32_t rc = fhd__choose_actions(L, E, obs, ids, a->actions, NULL, 1);
    if (rc != FHD_OK)
        return rc;
    memcpy(L->prev_obs, obs, ob * E);
    memcpy(L->prev_act, a->actions, sizeof(int32_t) * E * L->lo.D);
    L->have_prev = 1;
    stats_out(a->stats, &local);
    return trained;
}
