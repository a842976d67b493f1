/* test_nonfinite.c - one rule for NaN and Inf: no learner state ever holds them, so every file
 * checkpoint_save writes loads, and a non-finite value in a file means damage (issue 34,
 * finding 1). White-box (links the core objects) for the one case the ABI cannot reach.
 *
 *   1. observe/step: with n_step 2 and gamma 1, rewards FLT_MAX twice would make the n-step
 *      return +Inf: the second call is refused (FHD_ERR_NONFINITE, naming rewards[e] and the
 *      env) with the learner byte for byte unchanged; FLT_MAX then -FLT_MAX (return 0) and a
 *      third step after a refusal are accepted; the state saves and loads again. The same
 *      through step(), and through an episode end (the flush of every pending start).
 *   2. train_batch and train on the CPU backend: a batch whose loss is +Inf (MSE of a 1e30
 *      return), and one with a finite loss whose gradient norm squared overflows (no
 *      clipping, an observation of 1e30), return FHD_ERR_DIVERGED with every tensor (grad.*,
 *      adam.*, sn.* included), the replay and the counters unchanged (a save with the replay
 *      compared byte for byte), metrics "diverged_updates" counting them; step() diverging
 *      on schedule still stores its transition and returns actions.
 *   3. checkpoint_save of a state holding NaN (planted through the backend, bypassing the
 *      front's checks: what a diverged CUDA learner can hold) returns FHD_ERR_DIVERGED naming
 *      the tensor and element, writes nothing (the old file intact, no temporary left); the
 *      loader's answer to a NaN in a file stays FHD_ERR_CHECKPOINT_CORRUPT.
 * usage: test_nonfinite <scratch dir> */
#define _GNU_SOURCE
#include <float.h>
#include <math.h>
#include <sys/stat.h>

#include "fhd_proc.h"
#include "fhd_test.h"
#include "learner.h"
#include "rel_common.h"

static const fhd_api_v1 *api;
static char dir[512], path[700], cmp[700];

/* The learner's whole state as a checkpoint with the replay (bytes; caller frees). */
static unsigned char *state_bytes(fhd_learner *L, size_t *n) {
    if (api->checkpoint_save(L, cmp, FHD_CKPT_INCLUDE_REPLAY) != FHD_OK) {
        printf("save failed: %s\n", api->last_error(L));
        return NULL;
    }
    return fhd_test_read_file(cmp, n);
}

/* Every named tensor (grad.* included: not in a checkpoint). */
static uint64_t tensors_hash(fhd_learner *L) {
    uint64_t h = 1469598103934665603ull;
    fhd_tensor_info ti = FHD_TENSOR_INFO_INIT;
    for (uint32_t i = 0; api->tensor_info(L, i, &ti) == FHD_OK; i++) {
        float *b = malloc(sizeof(float) * (ti.count ? ti.count : 1));
        api->tensor_read(L, ti.name, b, ti.count);
        h = rel_fnv(h, b, sizeof(float) * ti.count);
        free(b);
    }
    return h;
}

static long long metric(fhd_learner *L, const char *key) {
    char buf[4096], pat[64];
    size_t need = 0;
    if (api->metrics(L, buf, sizeof buf, &need) != FHD_OK)
        return -1;
    snprintf(pat, sizeof pat, "\"%s\":", key);
    const char *p = strstr(buf, pat);
    return p ? atoll(p + strlen(pat)) : -1;
}

typedef struct frozen {
    unsigned char *bytes;
    size_t n;
    uint64_t tensors;
} frozen;

static frozen freeze(fhd_learner *L) {
    frozen f;
    f.bytes = state_bytes(L, &f.n);
    f.tensors = tensors_hash(L);
    return f;
}

static int same(fhd_learner *L, const frozen *f) {
    size_t n = 0;
    unsigned char *b = state_bytes(L, &n);
    int ok =
        b && f->bytes && n == f->n && memcmp(b, f->bytes, n) == 0 && tensors_hash(L) == f->tensors;
    free(b);
    return ok;
}

/* ---- 1. n-step returns ---------------------------------------------------------------------- */

#define NF_CONFIG(extra)                                                                           \
    "{\"obs_dim\": 3, \"actions\": [2, 3], \"hidden\": [8], \"num_envs\": 2, \"n_step\": 2, "      \
    "\"gamma\": 1.0, \"replay_capacity\": 64, \"batch_size\": 4, \"seed\": 5" extra "}"

static int32_t observe_r(fhd_learner *L, float r0, float r1, uint8_t end0) {
    float obs[REL_E * REL_S] = {0.1f, 0.2f, 0.3f, -0.1f, -0.2f, -0.3f}, next[REL_E * REL_S];
    for (int i = 0; i < REL_E * REL_S; i++)
        next[i] = obs[i] * 0.5f;
    int32_t act[REL_E * REL_D] = {1, 2, 0, 1};
    float rew[REL_E] = {r0, r1};
    uint8_t term[REL_E] = {end0, 0}, trunc[REL_E] = {0, 0};
    fhd_transitions t = {sizeof t, REL_E, obs, act, rew, next, term, trunc, NULL, NULL, NULL};
    return api->observe(L, &t);
}

static void test_returns(void) {
    fhd_learner *L = fhd_test_create(api, NF_CONFIG(""));
    CHECK(observe_r(L, FLT_MAX, 1.0f, 0) == FHD_OK, "FLT_MAX alone: %s", api->last_error(L));
    frozen f = freeze(L);
    int32_t rc = observe_r(L, FLT_MAX, 1.0f, 0);
    const char *m = api->last_error(L);
    CHECK(rc == FHD_ERR_NONFINITE && strstr(m, "observe: rewards[0]") && strstr(m, "env 0") &&
              strstr(m, "2-step return"),
          "FLT_MAX twice (n_step 2, gamma 1): %s: %s", api->status_name(rc), m);
    CHECK(same(L, &f), "the refused observe changed the learner");
    /* -FLT_MAX after FLT_MAX: the return is 0, accepted; the stream goes on */
    CHECK(observe_r(L, -FLT_MAX, 1.0f, 0) == FHD_OK, "FLT_MAX then -FLT_MAX: %s",
          api->last_error(L));
    CHECK(observe_r(L, 2.0f, 1.0f, 0) == FHD_OK, "a later step: %s", api->last_error(L));
    /* the end of an episode flushes every pending start: -FLT_MAX pending, then -FLT_MAX */
    CHECK(observe_r(L, -FLT_MAX, 0.0f, 0) == FHD_OK, "-FLT_MAX: %s", api->last_error(L));
    free(f.bytes);
    f = freeze(L);
    rc = observe_r(L, -FLT_MAX, 0.0f, 1);
    CHECK(rc == FHD_ERR_NONFINITE &&
              strstr(api->last_error(L), "-6.80565e+38, beyond the float range"),
          "-FLT_MAX twice at an episode end: %s: %s", api->status_name(rc), api->last_error(L));
    CHECK(same(L, &f), "the refused episode end changed the learner");
    CHECK(observe_r(L, 0.0f, 0.0f, 1) == FHD_OK, "the episode ends: %s", api->last_error(L));
    /* what was accepted saves and loads again: the bug of the issue */
    CHECK(api->checkpoint_save(L, path, FHD_CKPT_INCLUDE_REPLAY) == FHD_OK, "save: %s",
          api->last_error(L));
    fhd_learner *M = fhd_test_create(api, NF_CONFIG(""));
    rc = api->checkpoint_load(M, path, FHD_CKPT_INCLUDE_REPLAY);
    CHECK(rc == FHD_OK, "the saved state does not load: %s", api->last_error(M));
    free(f.bytes);

    /* step(): the same rule */
    float obs[REL_E * REL_S] = {0}, rew[REL_E] = {FLT_MAX, 0.0f};
    int32_t actions[REL_E * REL_D];
    uint8_t no[REL_E] = {0, 0};
    fhd_step_args s = FHD_STEP_ARGS_INIT;
    s.num_envs = REL_E;
    s.obs = obs;
    s.actions = actions;
    CHECK(api->step(M, &s) == FHD_OK, "first step: %s", api->last_error(M));
    s.rewards = rew;
    s.terminated = no;
    s.truncated = no;
    CHECK(api->step(M, &s) == FHD_OK, "step FLT_MAX: %s", api->last_error(M));
    f = freeze(M);
    rc = api->step(M, &s);
    CHECK(rc == FHD_ERR_NONFINITE && strstr(api->last_error(M), "step: rewards[0]"),
          "step FLT_MAX twice: %s: %s", api->status_name(rc), api->last_error(M));
    CHECK(same(M, &f), "the refused step changed the learner");
    free(f.bytes);
    api->destroy(M);
    api->destroy(L);
}

/* ---- 2. divergence ----------------------------------------------------------------------------
 */

#define DV_B 4

static int32_t batch(fhd_learner *L, float obs0, float ret0) {
    float obs[DV_B * REL_S], next[DV_B * REL_S], rew[DV_B];
    int32_t act[DV_B * REL_D];
    uint8_t term[DV_B];
    fhd_batch b;
    rel_batch(&b, DV_B, obs, next, act, rew, term);
    obs[0] = obs0;
    rew[1] = ret0;
    return api->train_batch(L, &b, NULL);
}

static void expect_diverged(fhd_learner *L, int32_t rc, const char *what, const char *needle,
                            const frozen *f, long long count) {
    const char *m = api->last_error(L);
    CHECK(rc == FHD_ERR_DIVERGED && strstr(m, "diverged") && strstr(m, needle) &&
              strstr(m, "not applied"),
          "%s: %s: %s", what, api->status_name(rc), m);
    CHECK(same(L, f), "%s: the diverged update changed the learner", what);
    CHECK(metric(L, "diverged_updates") == count, "%s: diverged_updates %lld, expected %lld", what,
          metric(L, "diverged_updates"), count);
}

static void test_divergence(void) {
    /* spectral norm on: the power iteration's u, v must be restored too */
    fhd_learner *L =
        fhd_test_create(api, NF_CONFIG(", \"loss\": \"mse\", \"spectral_norm\": \"all\""));
    fhd_learner *H =
        fhd_test_create(api, NF_CONFIG(", \"spectral_norm\": \"all\", \"max_grad_norm\": 0"));
    fhd_learner *both[2] = {L, H};
    for (int k = 0; k < 2; k++) {
        for (int s = 0; s < 6; s++)
            CHECK(rel_observe(api, both[k], s) == FHD_OK, "observe");
        CHECK(batch(both[k], 0.1f, 1.0f) == FHD_OK, "a sane batch: %s", api->last_error(both[k]));
        CHECK(api->train(both[k], 2, NULL) == FHD_OK, "train: %s", api->last_error(both[k]));
    }
    long long updates = metric(L, "updates");
    frozen f = freeze(L);
    expect_diverged(L, batch(L, 0.1f, 1e30f), "MSE of a 1e30 return", "loss inf", &f, 1);
    expect_diverged(L, batch(L, 0.1f, 1e30f), "the same batch again", "loss inf", &f, 2);
    CHECK(metric(L, "updates") == updates, "the update count moved");
    free(f.bytes);
    f = freeze(H);
    expect_diverged(H, batch(H, 1e30f, 1.0f), "Huber, an observation of 1e30, no clipping",
                    "overflows Adam's second moment", &f, 1);
    free(f.bytes);
    /* both train on afterwards */
    CHECK(batch(L, 0.1f, 1.0f) == FHD_OK, "a sane batch after: %s", api->last_error(L));
    CHECK(batch(H, 0.1f, 1.0f) == FHD_OK, "a sane batch after: %s", api->last_error(H));
    CHECK(metric(L, "updates") == updates + 1, "updates after: %lld", metric(L, "updates"));
    api->destroy(H);

    /* train(): a replay of 1e30 returns (n_step 1); no update is done */
    fhd_learner *R = fhd_test_create(
        api, "{\"obs_dim\": 3, \"actions\": [2, 3], \"hidden\": [8], \"num_envs\": 2, "
             "\"replay_capacity\": 16, \"batch_size\": 4, \"loss\": \"mse\", \"seed\": 5, "
             "\"replay\": \"prioritized\", \"learning_starts\": 4, \"train_freq\": 2}");
    for (int s = 0; s < 4; s++)
        CHECK(observe_r(R, 1e30f, -1e30f, 0) == FHD_OK, "observe: %s", api->last_error(R));
    f = freeze(R);
    fhd_train_stats st = FHD_TRAIN_STATS_INIT;
    int32_t rc = api->train(R, 5, &st);
    expect_diverged(R, rc, "train on 1e30 returns", "update 1 diverged", &f, 1);
    CHECK(st.updates_done == 0, "updates_done %u", st.updates_done);
    free(f.bytes);
    /* step() on schedule: the transition is stored, actions chosen, DIVERGED returned */
    float obs[REL_E * REL_S] = {0}, rew[REL_E] = {1e30f, 1e30f};
    int32_t actions[REL_E * REL_D] = {-1, -1, -1, -1};
    uint8_t no[REL_E] = {0, 0};
    fhd_step_args s = FHD_STEP_ARGS_INIT;
    s.num_envs = REL_E;
    s.obs = obs;
    s.actions = actions;
    CHECK(api->step(R, &s) == FHD_OK, "first step: %s", api->last_error(R));
    const long long steps = metric(R, "env_steps");
    s.rewards = rew;
    s.terminated = no;
    s.truncated = no;
    actions[0] = -1;
    rc = api->step(R, &s);
    CHECK(rc == FHD_ERR_DIVERGED && metric(R, "env_steps") == steps + REL_E && actions[0] >= 0 &&
              metric(R, "diverged_updates") == 2,
          "step diverging on schedule: %s (%s), env_steps %lld -> %lld, action %d",
          api->status_name(rc), api->last_error(R), steps, metric(R, "env_steps"), actions[0]);
    api->destroy(R);
    api->destroy(L);
}

/* ---- 3. saving a non-finite state -------------------------------------------------------------
 */

static void test_save(void) {
    fhd_learner *L = fhd_test_create(api, REL_CONFIG);
    for (int s = 0; s < 10; s++)
        CHECK(rel_observe(api, L, s) == FHD_OK, "observe");
    CHECK(api->checkpoint_save(L, path, FHD_CKPT_INCLUDE_REPLAY) == FHD_OK, "save: %s",
          api->last_error(L));
    size_t n0 = 0, n1 = 0;
    unsigned char *before = fhd_test_read_file(path, &n0);
    /* what a diverged CUDA learner can hold: NaN in Adam's second moment, Inf in the replay */
    const float nan = NAN, inf = INFINITY;
    CHECK(L->ops->write(L->be, FHD_STATE_ADAM_V, 7, 1, &nan) == FHD_OK, "plant NaN");
    int32_t rc = api->checkpoint_save(L, path, 0);
    const char *m = api->last_error(L);
    CHECK(rc == FHD_ERR_DIVERGED && strstr(m, "adam.v.") && strstr(m, "is nan") &&
              strstr(m, "nothing was written"),
          "save of a NaN state: %s: %s", api->status_name(rc), m);
    unsigned char *after = fhd_test_read_file(path, &n1);
    CHECK(after && n0 == n1 && memcmp(before, after, n0) == 0, "the old checkpoint changed");
    CHECK(fhd_test_count_tmp_files(dir) == 0, "a temporary file was left");
    free(after);
    float zero = 0.0f;
    CHECK(L->ops->write(L->be, FHD_STATE_ADAM_V, 7, 1, &zero) == FHD_OK, "repair");
    CHECK(L->ops->write(L->be, FHD_STATE_REPLAY_RETURNS, 3, 1, &inf) == FHD_OK, "plant Inf");
    CHECK(api->checkpoint_save(L, path, 0) == FHD_OK, "without the replay the Inf is not saved: %s",
          api->last_error(L));
    rc = api->checkpoint_save(L, path, FHD_CKPT_INCLUDE_REPLAY);
    CHECK(rc == FHD_ERR_DIVERGED && strstr(api->last_error(L), "replay.returns\" element 3"),
          "save of an Inf return: %s: %s", api->status_name(rc), api->last_error(L));
    free(before);
    api->destroy(L);
}

int main(int argc, char **argv) {
    if (argc < 2) {
        printf("usage: %s <scratch dir>\n", argv[0]);
        return 2;
    }
    api = (const fhd_api_v1 *)fhd_get_api_base()->get_api(1, NULL);
    snprintf(dir, sizeof dir, "%s/nonfinite", argv[1]);
    mkdir(argv[1], 0755);
    mkdir(dir, 0755);
    snprintf(path, sizeof path, "%s/nf.safetensors", dir);
    snprintf(cmp, sizeof cmp, "%s/cmp.safetensors", dir);
    CHECK(strcmp(api->status_name(FHD_ERR_DIVERGED), "FHD_ERR_DIVERGED") == 0, "status name %s",
          api->status_name(FHD_ERR_DIVERGED));
    test_returns();
    test_divergence();
    test_save();
    return fhd_test_finish();
}
