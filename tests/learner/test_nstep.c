/* test_nstep.c - n-step returns per env stream with Gymnasium terminated/truncated semantics,
 * checked on what the front stores in replay (white-box through the core objects). */
#include <math.h>

#include "fhd_test.h"
#include "learner.h"

typedef struct {
    int start_id;   /* obs id of s_t */
    float ret;      /* expected R */
    float disc;     /* expected gamma^m (1 - terminated) */
    int next_id;    /* obs id of the bootstrap state */
} expect_t;

int main(void) {
    const char *cfg = "{\"obs_dim\": 2, \"actions\": [3], \"hidden\": [4], \"batch_size\": 2, "
                      "\"replay_capacity\": 64, \"num_envs\": 2, \"n_step\": 3, \"gamma\": 0.5}";
    fhd_learner *L = NULL;
    fhd_error err = FHD_ERROR_INIT;
    if (fhd__learner_init(cfg, strlen(cfg), &L, &err) != FHD_OK) {
        printf("FAIL init: %s\n", err.message);
        return 1;
    }
    /* env 0: rewards 1, 2, 4, 8, terminated at t = 4. env 1: rewards 1 x5, truncated at t = 5.
     * obs id = 100 * env + t; the final obs of env 1 has id 199 (a true final observation
     * that differs from the reset one). */
    const float r0[5] = {1, 2, 4, 8, 0}, r1[5] = {1, 1, 1, 1, 1};
    for (int t = 0; t < 5; t++) {
        float obs[4] = {(float)t, 0, (float)(100 + t), 0};
        float next[4] = {(float)(t + 1), 0, (float)(t == 4 ? 199 : 100 + t + 1), 0};
        int32_t act[2] = {t % 3, 2};
        float rew[2] = {r0[t], r1[t]};
        uint8_t term[2] = {t == 3, 0}, trunc[2] = {0, t == 4};
        if (t == 4) { /* env 0 restarted after its termination: a fresh episode */
            obs[0] = 50;
            next[0] = 51;
        }
        fhd_transitions tr = {sizeof tr, 2, obs, act, rew, next, term, trunc};
        CHECK(fhd__learner_observe(L, &tr) == FHD_OK, "observe t=%d: %s", t, L->err);
    }
    const expect_t want[] = {
        {0, 1 + 0.5f * 2 + 0.25f * 4, 0.125f, 3},   /* env 0, full 3-step */
        {100, 1.75f, 0.125f, 103},                  /* env 1, full 3-step */
        {1, 2 + 0.5f * 4 + 0.25f * 8, 0.0f, 4},     /* env 0 flush at termination */
        {2, 4 + 0.5f * 8, 0.0f, 4},
        {3, 8, 0.0f, 4},
        {101, 1.75f, 0.125f, 104},                  /* env 1, full 3-step */
        {102, 1.75f, 0.125f, 199},                  /* env 1 flush at truncation: bootstrap */
        {103, 1.5f, 0.25f, 199},
        {104, 1.0f, 0.5f, 199},
    };
    const size_t n_want = sizeof want / sizeof want[0];
    fhd__backend_scalars sc;
    L->ops->get_scalars(L->be, &sc);
    CHECK(sc.replay_size == n_want, "replay holds %llu, expected %zu",
          (unsigned long long)sc.replay_size, n_want);
    float obs[64 * 2], next[64 * 2], ret[64], disc[64];
    int32_t act[64];
    L->ops->read(L->be, FHD_STATE_REPLAY_OBS, 0, 128, obs);
    L->ops->read(L->be, FHD_STATE_REPLAY_NEXT_OBS, 0, 128, next);
    L->ops->read(L->be, FHD_STATE_REPLAY_RETURNS, 0, 64, ret);
    L->ops->read(L->be, FHD_STATE_REPLAY_DISC, 0, 64, disc);
    L->ops->read(L->be, FHD_STATE_REPLAY_ACTIONS, 0, 64, act);
    for (size_t i = 0; i < n_want && i < sc.replay_size; i++) {
        const expect_t *w = &want[i];
        CHECK((int)obs[2 * i] == w->start_id, "slot %zu: start %g, want %d", i, obs[2 * i],
              w->start_id);
        CHECK(fabsf(ret[i] - w->ret) < 1e-6f, "slot %zu: R %g, want %g", i, ret[i], w->ret);
        CHECK(disc[i] == w->disc, "slot %zu: disc %g, want %g", i, disc[i], w->disc);
        CHECK((int)next[2 * i] == w->next_id, "slot %zu: next %g, want %d", i, next[2 * i],
              w->next_id);
        int expect_act = w->start_id >= 100 ? 2 : w->start_id % 3;
        CHECK(act[i] == expect_act, "slot %zu: action %d, want %d", i, act[i], expect_act);
    }
    /* env 0's new episode (obs 50) is pending in its ring, not stored */
    CHECK(L->st_len[0] == 1 && L->st_len[1] == 0, "pending %u %u", L->st_len[0], L->st_len[1]);
    CHECK(L->episodes == 2 && L->env_steps == 10, "episodes %llu steps %llu",
          (unsigned long long)L->episodes, (unsigned long long)L->env_steps);
    fhd__learner_destroy(L);
    return fhd_test_finish();
}
