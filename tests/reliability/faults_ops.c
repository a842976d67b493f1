/* faults_ops.c - the operations test_faults sweeps, each one ABI call (step: two) on a
 * learner with fixed inputs: act, observe, step, train, train_batch, metrics (which must carry
 * every key when it succeeds), checkpoint_save and checkpoint_load. */
#include "faults.h"

/* ---- the operations --------------------------------------------------------------------- */

int32_t op_act(fhd_learner *L, void *ctx) {
    (void)ctx;
    float obs[4 * REL_S] = {0.1f, 0.2f, 0.3f, -0.1f, -0.2f, -0.3f, 0.5f, 0.5f, 0.5f, 0, 0, 1};
    int32_t act[4 * REL_D];
    float q[4 * 5];
    fhd_act_args a = FHD_ACT_ARGS_INIT;
    a.num_obs = 4;
    a.obs = obs;
    a.actions = act;
    a.q_values = q;
    a.explore = 1;
    return api->act(L, &a);
}

int32_t op_observe(fhd_learner *L, void *ctx) {
    return rel_observe(api, L, *(int *)ctx);
}

int32_t op_train(fhd_learner *L, void *ctx) {
    (void)ctx;
    fhd_train_stats st = FHD_TRAIN_STATS_INIT;
    return api->train(L, 3, &st);
}

int32_t op_train_batch(fhd_learner *L, void *ctx) {
    (void)ctx;
    float obs[8 * REL_S], next[8 * REL_S], rew[8], td[8 * REL_D], y[8];
    int32_t act[8 * REL_D];
    uint8_t term[8];
    for (int i = 0; i < 8; i++) {
        for (int j = 0; j < REL_S; j++) {
            obs[i * REL_S + j] = 0.05f * (float)(i + j);
            next[i * REL_S + j] = -0.05f * (float)(i * j);
        }
        act[i * REL_D] = i % 2;
        act[i * REL_D + 1] = i % 3;
        rew[i] = (float)i - 3.5f;
        term[i] = i == 5;
    }
    fhd_batch b = {sizeof b, 8, obs, act, rew, next, term, NULL, NULL, td, y, NULL, NULL};
    return api->train_batch(L, &b, NULL);
}

int32_t op_step(fhd_learner *L, void *ctx) {
    (void)ctx;
    float obs[REL_E * REL_S] = {0.1f, 0.2f, 0.3f, 0.4f, 0.5f, 0.6f}, rew[REL_E] = {1, -1};
    int32_t act[REL_E * REL_D];
    uint8_t term[REL_E] = {0, 1}, trunc[REL_E] = {0, 0};
    fhd_step_args a = FHD_STEP_ARGS_INIT;
    a.num_envs = REL_E;
    a.obs = obs;
    a.actions = act;
    int32_t rc = api->step(L, &a); /* first call: no transition */
    if (rc != FHD_OK)
        return rc;
    a.rewards = rew;
    a.terminated = term;
    a.truncated = trunc;
    return api->step(L, &a);
}

static const char *metric_keys[] = {"backend",
                                    "backend_requested",
                                    "backend_fallback_reason",
                                    "device",
                                    "env_steps",
                                    "updates",
                                    "episodes",
                                    "replay_size",
                                    "replay_capacity",
                                    "epsilon",
                                    "stats_update",
                                    "loss",
                                    "td_abs_mean",
                                    "q_mean",
                                    "grad_norm",
                                    "beta",
                                    "updates_per_second",
                                    "episode_return_last",
                                    "episode_return_mean_100",
                                    "uptime_seconds"};

/* metrics; a success must carry every key (a value that could not be allocated must not be
 * dropped silently): FHD_ERR_INTERNAL flags an incomplete object. */
int32_t op_metrics(fhd_learner *L, void *ctx) {
    metrics_ctx *m = ctx;
    size_t need = 0;
    memset(m->buf, 0, sizeof m->buf);
    int32_t rc = api->metrics(L, m->buf, sizeof m->buf, &need);
    if (rc != FHD_OK)
        return rc;
    for (size_t i = 0; i < sizeof metric_keys / sizeof metric_keys[0]; i++) {
        char k[64];
        snprintf(k, sizeof k, "\"%s\":", metric_keys[i]);
        if (!strstr(m->buf, k)) {
            printf("  metrics succeeded without \"%s\": %s\n", metric_keys[i], m->buf);
            metrics_incomplete = 1;
            return FHD_ERR_INTERNAL;
        }
    }
    return FHD_OK;
}

int32_t op_save(fhd_learner *L, void *ctx) {
    ckpt_ctx *c = ctx;
    return api->checkpoint_save(L, c->path, c->flags);
}

int32_t op_load(fhd_learner *L, void *ctx) {
    ckpt_ctx *c = ctx;
    return api->checkpoint_load(L, c->path, c->flags);
}
