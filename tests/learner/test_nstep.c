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

/* ABI 1.1: uint8 observations and the per-env valid mask. An invalid env's transition is not
 * stored and its n-step stream does not advance; its other inputs are not read. */
static void test_valid_mask_u8(void) {
    const char *cfg = "{\"obs_shape\": [1, 1, 2], \"obs_dtype\": \"uint8\", \"actions\": [3], "
                      "\"hidden\": [4], \"batch_size\": 2, \"replay_capacity\": 16, "
                      "\"num_envs\": 2, \"n_step\": 2, \"gamma\": 0.5}";
    fhd_learner *L = NULL;
    fhd_error err = FHD_ERROR_INIT;
    if (fhd__learner_init(cfg, strlen(cfg), &L, &err) != FHD_OK) {
        printf("FAIL init: %s\n", err.message);
        fhd_t_fail++;
        return;
    }
    const float r0[3] = {1, 2, 3}, r1[3] = {10, NAN, 30};
    for (int t = 0; t < 3; t++) {
        uint8_t obs[4] = {(uint8_t)t, 7, (uint8_t)(100 + t), 7};
        uint8_t next[4] = {(uint8_t)(t + 1), 7, (uint8_t)(101 + t), 7};
        int32_t act[2] = {t, t == 1 ? 99 : 1}; /* env 1's action at t = 1 is out of range */
        float rew[2] = {r0[t], r1[t]};
        uint8_t term[2] = {0, t == 1 ? 5 : 0}, trunc[2] = {0, 0}, valid[2] = {1, t != 1};
        fhd_transitions tr = FHD_TRANSITIONS_INIT;
        tr.num_envs = 2;
        tr.obs_u8 = obs;
        tr.actions = act;
        tr.rewards = rew;
        tr.next_obs_u8 = next;
        tr.terminated = term;
        tr.truncated = trunc;
        tr.valid = valid;
        CHECK(fhd__learner_observe(L, &tr) == FHD_OK, "u8 observe t=%d: %s", t, L->err);
    }
    /* env 0: (0 -> 2, R 1 + 0.5 * 2), (1 -> 3, R 2 + 0.5 * 3); env 1 skipped t = 1:
     * (100 -> 103, R 10 + 0.5 * 30) */
    const int start[3] = {0, 1, 100}, nexts[3] = {2, 3, 103};
    const float ret[3] = {2.0f, 3.5f, 25.0f};
    fhd__backend_scalars sc;
    uint8_t ro[32], rn[32], fr[2 * 64];
    uint64_t oid[16], nid[16], fcnt[3];
    float rr[16], rd[16];
    L->ops->get_scalars(L->be, &sc);
    CHECK(sc.replay_size == 3, "u8 replay holds %llu, expected 3", (unsigned long long)sc.replay_size);
    /* image observations: a frame replay; rebuild each slot's rows from the frame ids */
    const uint64_t M = fhd__config_frame_capacity(&L->cfg);
    CHECK(M <= 64 && L->ops->read(L->be, FHD_STATE_FRAMES_U8, 0, 2 * M, fr) == FHD_OK &&
              L->ops->read(L->be, FHD_STATE_REPLAY_OBS_ID, 0, 16, oid) == FHD_OK &&
              L->ops->read(L->be, FHD_STATE_REPLAY_NEXT_ID, 0, 16, nid) == FHD_OK &&
              L->ops->read(L->be, FHD_STATE_FRAME_COUNTERS, 0, 3, fcnt) == FHD_OK,
          "u8 frame replay reads");
    for (int i = 0; i < 3; i++)
        for (int j = 0; j < 2; j++) {
            ro[2 * i + j] = fr[2 * (oid[i] % M) + (uint64_t)j];
            rn[2 * i + j] = fr[2 * (nid[i] % M) + (uint64_t)j];
        }
    /* frames: env 0 adds obs 0 and next 1, 2, 3 (each next is its following obs: reused);
     * env 1 adds 100 and 101 at t = 0, skips t = 1, then 102 (not its last next, 101: a new
     * frame) and 103: 8 frames for 6 env steps */
    CHECK(fcnt[1] == 3 && fcnt[2] == 0, "transitions %llu, first live %llu",
          (unsigned long long)fcnt[1], (unsigned long long)fcnt[2]);
    CHECK(fcnt[0] == 8, "frames added %llu, expected 8", (unsigned long long)fcnt[0]);
    CHECK(L->ops->read(L->be, FHD_STATE_REPLAY_OBS_U8, 0, 32, ro + 16) == FHD_ERR_NOT_FOUND,
          "a frame replay has no obs rows per slot");
    L->ops->read(L->be, FHD_STATE_REPLAY_RETURNS, 0, 16, rr);
    L->ops->read(L->be, FHD_STATE_REPLAY_DISC, 0, 16, rd);
    for (int i = 0; i < 3; i++) {
        CHECK(ro[2 * i] == start[i] && ro[2 * i + 1] == 7, "u8 slot %d: start %u", i, ro[2 * i]);
        CHECK(rn[2 * i] == nexts[i], "u8 slot %d: next %u, want %d", i, rn[2 * i], nexts[i]);
        CHECK(fabsf(rr[i] - ret[i]) < 1e-6f && rd[i] == 0.25f, "u8 slot %d: R %g disc %g", i,
              rr[i], rd[i]);
    }
    CHECK(L->env_steps == 5, "env_steps %llu counts valid envs only",
          (unsigned long long)L->env_steps);
    /* float observations to a uint8 learner: refused, naming both, nothing stored */
    float fobs[4] = {0};
    int32_t act[2] = {0, 0};
    float rew[2] = {0, 0};
    uint8_t z[2] = {0, 0};
    fhd_transitions bad = {sizeof bad, 2, fobs, act, rew, fobs, z, z, NULL, NULL, NULL};
    CHECK(fhd__learner_observe(L, &bad) == FHD_ERR_INVALID_ARGUMENT && strstr(L->err, "`obs`") &&
              strstr(L->err, "`obs_u8`") && strstr(L->err, "uint8"),
          "float obs refused: %s", L->err);
    uint8_t bvalid[2] = {1, 2};
    bad.obs = NULL;
    bad.next_obs = NULL;
    bad.obs_u8 = (const uint8_t *)fobs;
    bad.next_obs_u8 = (const uint8_t *)fobs;
    bad.valid = bvalid;
    CHECK(fhd__learner_observe(L, &bad) == FHD_ERR_INVALID_ARGUMENT && strstr(L->err, "valid[1]"),
          "valid must be 0/1: %s", L->err);
    L->ops->get_scalars(L->be, &sc);
    CHECK(sc.replay_size == 3 && L->env_steps == 5, "rejected calls change nothing");
    fhd__learner_destroy(L);

    /* step() with Gymnasium NEXT_STEP autoreset: the call after an episode's end carries the
     * reset observation with valid = 0, and no transition (A -> B terminal) is bridged to it */
    const char *cfg1 = "{\"obs_dim\": 1, \"actions\": [2], \"hidden\": [4], \"batch_size\": 2, "
                       "\"replay_capacity\": 16, \"learning_starts\": 1000}";
    if (fhd__learner_init(cfg1, strlen(cfg1), &L, &err) != FHD_OK) {
        printf("FAIL init: %s\n", err.message);
        fhd_t_fail++;
        return;
    }
    const float seq[4] = {1, 2, 50, 3}; /* A, B (terminal), R (reset), C */
    const uint8_t term_seq[4] = {0, 1, 0, 0}, valid_seq[4] = {1, 1, 0, 1};
    for (int t = 0; t < 4; t++) {
        float o = seq[t], r = (float)t;
        uint8_t te = term_seq[t], tru = 0, va = valid_seq[t];
        int32_t a = 0;
        fhd_step_args sa = FHD_STEP_ARGS_INIT;
        sa.num_envs = 1;
        sa.obs = &o;
        sa.actions = &a;
        sa.valid = &va;
        if (t > 0) {
            sa.rewards = &r;
            sa.terminated = &te;
            sa.truncated = &tru;
        }
        CHECK(fhd__learner_step(L, &sa) == FHD_OK, "step t=%d: %s", t, L->err);
    }
    float so[16], sn[16], sd[16];
    L->ops->get_scalars(L->be, &sc);
    L->ops->read(L->be, FHD_STATE_REPLAY_OBS, 0, 16, so);
    L->ops->read(L->be, FHD_STATE_REPLAY_NEXT_OBS, 0, 16, sn);
    L->ops->read(L->be, FHD_STATE_REPLAY_DISC, 0, 16, sd);
    CHECK(sc.replay_size == 2 && so[0] == 1 && sn[0] == 2 && sd[0] == 0.0f && so[1] == 50 &&
              sn[1] == 3 && sd[1] > 0.0f,
          "NEXT_STEP: (A -> B terminal), (R -> C); got %llu: (%g -> %g, %g), (%g -> %g)",
          (unsigned long long)sc.replay_size, so[0], sn[0], sd[0], so[1], sn[1]);
    fhd__learner_destroy(L);
}

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
        fhd_transitions tr = {sizeof tr, 2, obs, act, rew, next, term, trunc, NULL, NULL, NULL};
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
    test_valid_mask_u8();
    return fhd_test_finish();
}
