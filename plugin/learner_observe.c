/* learner_observe.c - experience in and actions out: act (greedy or epsilon-greedy, the
 * exploration draws of docs/design.md section 10) and observe (n-step accumulation of each
 * env's stream into the replay). step() (learner_train.c) uses both.
 */
#include <string.h>

#include "learner.h"
#include "philox.h"

/* ---- act -------------------------------------------------------------------------------- */

/* Greedy or epsilon-greedy actions for n rows of obs (validated); with ids (n, fk) the same
 * rows' frame ids in the ring, read there where the backend can (q_values_frames). */
int32_t fhd__choose_actions(fhd_learner *L, uint32_t n, const unsigned char *obs,
                            const uint64_t *ids, int32_t *actions, float *q, int explore) {
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
            int32_t rc =
                ids && L->ops->q_values_frames
                    ? L->ops->q_values_frames(L->be, m, ids + (size_t)r0 * L->fk, qr, L->greedy)
                : L->cfg.obs_dtype == FHD_OBS_UINT8
                    ? L->ops->q_values_u8(L->be, m, rows, qr, L->greedy)
                    : L->ops->q_values(L->be, m, (const float *)(const void *)rows, qr, L->greedy);
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
                fhd__u32x4 r =
                    fhd__rng_draw(L->cfg.seed, FHD_RNG_STREAM_EXPLORE, event, k0 + 1 + d);
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
    return fhd__choose_actions(L, a->num_obs, obs, NULL, a->actions, a->q_values, (int)a->explore);
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
int32_t fhd__ingest(fhd_learner *L, const unsigned char *obs, const int32_t *act, const float *rew,
                    const unsigned char *const *next_rows, const uint8_t *term,
                    const uint8_t *trunc, const uint8_t *valid, int known) {
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
            int32_t rc = FHD_OK;
            if (known && L->obs_known[e]) /* the bytes step stored them from (prev_obs) */
                memcpy(ids, L->last_frame + (size_t)e * L->fk, sizeof(uint64_t) * L->fk);
            else
                rc = L->ops->frame_add(L->be, obs + (size_t)e * ob,
                                       L->last_frame + (size_t)e * L->fk, ids);
            L->obs_known[e] = 0;
            if (rc == FHD_OK)
                rc = L->ops->frame_add(L->be, next_rows[e], ids, L->last_frame + (size_t)e * L->fk);
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
        int32_t rc =
            L->cfg.obs_dtype == FHD_OBS_UINT8
                ? L->ops->replay_add_u8(L->be, count, L->em_obs, L->em_act, L->em_ret, L->em_next,
                                        L->em_disc)
                : L->ops->replay_add(L->be, count, (const float *)(void *)L->em_obs, L->em_act,
                                     L->em_ret, (const float *)(void *)L->em_next, L->em_disc);
        if (rc != FHD_OK)
            return fhd__backend_fail(L, rc, "observe");
    }
    return FHD_OK;
}

int32_t fhd__frames_current(fhd_learner *L, const unsigned char *obs, const uint8_t *stored) {
    const size_t k = L->fk, ob = (size_t)L->ob;
    uint64_t *ids = L->frame_ids;
    for (uint32_t e = 0; e < L->E; e++) {
        if (stored[e])
            continue;
        uint64_t *last = L->last_frame + (size_t)e * k;
        int32_t rc = L->ops->frame_add(L->be, obs + (size_t)e * ob, last, ids);
        if (rc != FHD_OK)
            return fhd__backend_fail(L, rc, "step");
        memcpy(last, ids, sizeof(uint64_t) * k);
    }
    memset(L->obs_known, 1, L->E); /* step copies obs into prev_obs next */
    return FHD_OK;
}

void fhd__frames_forget(fhd_learner *L) {
    if (L->obs_known)
        memset(L->obs_known, 0, L->E);
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
    return fhd__ingest(L, obs, t->actions, t->rewards, L->next_rows, t->terminated, t->truncated,
                       valid, 0);
}
