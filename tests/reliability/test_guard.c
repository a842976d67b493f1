/* test_guard.c - the training guard (config `guard`) on the CPU backend. White-box (links the
 * core objects) to read the priorities and the sampled slots.
 *
 *   1. train_batch: an update whose loss is +Inf (MSE of a 1e30 return), one whose loss is
 *      over max_loss and one whose gradient norm is over max_grad_norm are skipped: FHD_OK,
 *      updates_done 0, updates_skipped 1, every tensor (params, grad, Adam, sn) and the update
 *      count unchanged; metrics skipped_updates counts them and skip_last_* hold the offending
 *      values (null for the +Inf loss and its non-finite norm); a sane batch then trains. The
 *      power iteration's u, v (spectral norm) keep their step; the skipped update's TD errors
 *      still reach the caller.
 *      A caller's fhd_train_stats of the 1.1 size (FHD_TRAIN_STATS_SIZE_V1_1) is written only
 *      up to it.
 *   2. train(): every update skipped (a bound below any norm) leaves parameters, Adam state,
 *      target network and the PER priorities unchanged, and the sampling counter advances:
 *      the batch of each skipped update is the batch a learner without a guard draws at the
 *      same update (updates + skipped), so a bad batch is not drawn again.
 *   3. a replay where some batches hold 1e30 returns: train skips some and applies the rest;
 *      a checkpoint with the replay resumes exactly (counters.skipped_updates restored: the
 *      same tensors and metrics after more training); step() reports its skips in its stats.
 * usage: test_guard <scratch dir> */
#define _GNU_SOURCE
#include <math.h>
#include <sys/stat.h>

#include "fhd_test.h"
#include "learner.h"
#include "rel_common.h"

static const fhd_api_v1 *api;
static char dir[512], path[700];

#define GD_B 4
#define GD_CONFIG(extra)                                                                           \
    "{\"obs_dim\": 3, \"actions\": [2, 3], \"hidden\": [8], \"num_envs\": 2, "                     \
    "\"replay_capacity\": 16, \"batch_size\": 4, \"seed\": 5, \"spectral_norm\": \"all\", "        \
    "\"learning_starts\": 4, \"train_freq\": 2" extra "}"

/* Every named tensor (grad.* included), but the power iteration's vectors (sn.*) when !with_sn:
 * a skip keeps their step, a function of the unchanged weights alone. */
static uint64_t hash_of(fhd_learner *L, int with_sn) {
    uint64_t h = 1469598103934665603ull;
    fhd_tensor_info ti = FHD_TENSOR_INFO_INIT;
    for (uint32_t i = 0; api->tensor_info(L, i, &ti) == FHD_OK; i++) {
        if (!with_sn && strncmp(ti.name, "sn.", 3) == 0)
            continue;
        float *b = malloc(sizeof(float) * (ti.count ? ti.count : 1));
        api->tensor_read(L, ti.name, b, ti.count);
        h = rel_fnv(h, b, sizeof(float) * ti.count);
        free(b);
    }
    return h;
}

static uint64_t tensors_hash(fhd_learner *L) {
    return hash_of(L, 0);
}

/* A metric's text value ("" when absent). */
static const char *metric_text(fhd_learner *L, const char *key, char *out, size_t cap) {
    char buf[8192], pat[64];
    size_t need = 0;
    out[0] = '\0';
    if (api->metrics(L, buf, sizeof buf, &need) != FHD_OK)
        return out;
    snprintf(pat, sizeof pat, "\"%s\":", key);
    const char *p = strstr(buf, pat);
    if (!p)
        return out;
    p += strlen(pat);
    size_t n = strcspn(p, ",}");
    snprintf(out, cap, "%.*s", (int)(n < cap ? n : cap - 1), p);
    return out;
}

static double metric(fhd_learner *L, const char *key) {
    char t[64];
    metric_text(L, key, t, sizeof t);
    return t[0] && strcmp(t, "null") != 0 ? atof(t) : NAN;
}

static float td_out[GD_B * REL_D], y_out[GD_B]; /* batch()'s TD errors and targets */

static int32_t batch(fhd_learner *L, float ret1, fhd_train_stats *st) {
    float obs[GD_B * REL_S], next[GD_B * REL_S], rew[GD_B];
    int32_t act[GD_B * REL_D];
    uint8_t term[GD_B];
    fhd_batch b;
    rel_batch(&b, GD_B, obs, next, act, rew, term);
    rew[1] = ret1;
    b.td_errors = td_out;
    b.targets = y_out;
    for (int i = 0; i < GD_B * REL_D; i++)
        td_out[i] = -777.0f;
    return api->train_batch(L, &b, st);
}

/* A skipped train_batch: FHD_OK, nothing applied, counted. */
static void expect_skip(fhd_learner *L, float ret1, const char *what, double skipped) {
    const uint64_t h = tensors_hash(L);
    const double updates = metric(L, "updates");
    fhd_train_stats st = FHD_TRAIN_STATS_INIT;
    int32_t rc = batch(L, ret1, &st);
    CHECK(rc == FHD_OK && st.updates_done == 0 && st.updates_skipped == 1,
          "%s: %s (%s), done %u skipped %u", what, api->status_name(rc), api->last_error(L),
          st.updates_done, st.updates_skipped);
    CHECK(tensors_hash(L) == h, "%s: the skipped update changed a tensor", what);
    CHECK(metric(L, "updates") == updates, "%s: updates moved", what);
    CHECK(metric(L, "skipped_updates") == skipped, "%s: skipped_updates %g, expected %g", what,
          metric(L, "skipped_updates"), skipped);
    CHECK(metric(L, "diverged_updates") == 0, "%s: counted as diverged", what);
}

static void fill(fhd_learner *L, float big) {
    for (int s = 0; s < 8; s++) {
        float obs[REL_E * REL_S], next[REL_E * REL_S],
            rew[REL_E] = {0.5f, s % 4 == 1 ? big : -0.25f};
        for (int i = 0; i < REL_E * REL_S; i++) {
            obs[i] = 0.1f * (float)((s + i) % 5) - 0.2f;
            next[i] = 0.07f * (float)((s * 3 + i) % 4) - 0.1f;
        }
        int32_t act[REL_E * REL_D] = {s % 2, s % 3, (s + 1) % 2, (s + 2) % 3};
        uint8_t no[REL_E] = {0, 0};
        fhd_transitions t = {sizeof t, REL_E, obs, act, rew, next, no, no, NULL, NULL, NULL};
        CHECK(api->observe(L, &t) == FHD_OK, "observe: %s", api->last_error(L));
    }
}

static void test_batches(void) {
    fhd_learner *L = fhd_test_create(
        api,
        GD_CONFIG(", \"loss\": \"mse\", \"guard\": {\"max_loss\": 100, \"max_grad_norm\": 1e4}"));
    CHECK(batch(L, 1.0f, NULL) == FHD_OK, "a sane batch: %s", api->last_error(L));
    expect_skip(L, 1e30f, "MSE of a 1e30 return (loss inf)", 1);
    char t[64];
    CHECK(strcmp(metric_text(L, "skip_last_loss", t, sizeof t), "null") == 0 &&
              strcmp(metric_text(L, "skip_last_grad_norm", t, sizeof t), "null") == 0 &&
              metric(L, "skip_last_update") == 2,
          "skip_last_*: loss %s, update %g", metric_text(L, "skip_last_loss", t, sizeof t),
          metric(L, "skip_last_update"));
    expect_skip(L, 1e3f, "a loss over max_loss 100", 2);
    const double lossv = metric(L, "skip_last_loss");
    CHECK(lossv > 100 && isfinite(metric(L, "skip_last_grad_norm")),
          "skip_last_loss %g (> 100), grad norm %g", lossv, metric(L, "skip_last_grad_norm"));
    fhd_train_stats st = FHD_TRAIN_STATS_INIT;
    CHECK(batch(L, 1.0f, &st) == FHD_OK && st.updates_done == 1 && st.updates_skipped == 0,
          "a sane batch after the skips: %s", api->last_error(L));
    CHECK(metric(L, "updates") == 2, "updates %g", metric(L, "updates"));
    api->destroy(L);

    L = fhd_test_create(api, GD_CONFIG(", \"guard\": {\"max_grad_norm\": 1e-20}"));
    expect_skip(L, 1.0f, "a norm over max_grad_norm 1e-20", 1);
    CHECK(metric(L, "skip_last_grad_norm") > 1e-20 && metric(L, "skip_last_loss") > 0,
          "skip_last_grad_norm %g", metric(L, "skip_last_grad_norm"));
    CHECK(td_out[0] != -777.0f && isfinite(td_out[0]),
          "a skipped train_batch still returns its TD errors (%g)", (double)td_out[0]);
    /* a 1.1 host's smaller stats struct: nothing written past it */
    fhd_train_stats old = FHD_TRAIN_STATS_INIT;
    old.struct_size = FHD_TRAIN_STATS_SIZE_V1_1;
    old.updates_skipped = 77;
    CHECK(batch(L, 1.0f, &old) == FHD_OK && old.updates_skipped == 77 && old.updates_done == 0,
          "a 1.1-sized stats struct: updates_skipped %u", old.updates_skipped);
    api->destroy(L);

    /* without a guard the same +Inf loss is FHD_ERR_DIVERGED, as before */
    L = fhd_test_create(api, GD_CONFIG(", \"loss\": \"mse\""));
    CHECK(batch(L, 1e30f, NULL) == FHD_ERR_DIVERGED && metric(L, "skipped_updates") == 0 &&
              metric(L, "diverged_updates") == 1,
          "no guard: %s", api->last_error(L));
    api->destroy(L);
}

static void read_prio(fhd_learner *L, uint64_t *p) {
    CHECK(L->ops->read(L->be, FHD_STATE_REPLAY_PRIORITY, 0, 16, p) == FHD_OK, "read priorities");
}

static void read_slots(fhd_learner *L, uint32_t *s) {
    CHECK(L->ops->read(L->be, FHD_STATE_LAST_INDICES, 0, GD_B, s) == FHD_OK, "read slots");
}

static void test_train(void) {
    /* PER: priorities unchanged by skipped updates */
    fhd_learner *L = fhd_test_create(
        api, GD_CONFIG(", \"replay\": \"prioritized\", \"guard\": {\"max_grad_norm\": 1e-20}"));
    fill(L, 1.0f);
    uint64_t p0[16], p1[16];
    read_prio(L, p0);
    const uint64_t h = tensors_hash(L);
    fhd_train_stats st = FHD_TRAIN_STATS_INIT;
    CHECK(api->train(L, 5, &st) == FHD_OK && st.updates_done == 0 && st.updates_skipped == 5 &&
              st.update_index == 0,
          "train(5), every update skipped: %s, done %u skipped %u", api->last_error(L),
          st.updates_done, st.updates_skipped);
    read_prio(L, p1);
    CHECK(memcmp(p0, p1, sizeof p0) == 0, "a skipped update changed a priority");
    CHECK(tensors_hash(L) == h && metric(L, "updates") == 0 && metric(L, "skipped_updates") == 5,
          "train(5) skipped: tensors or counters changed");
    api->destroy(L);

    /* uniform: the skipped updates' batches are those of a learner without a guard */
    fhd_learner *G = fhd_test_create(api, GD_CONFIG(", \"guard\": {\"max_grad_norm\": 1e-20}"));
    fhd_learner *N = fhd_test_create(api, GD_CONFIG(""));
    fill(G, 1.0f);
    fill(N, 1.0f);
    for (int k = 0; k < 3; k++) {
        uint32_t sg[GD_B], sn[GD_B];
        CHECK(api->train(G, 1, NULL) == FHD_OK && api->train(N, 1, NULL) == FHD_OK, "train");
        read_slots(G, sg);
        read_slots(N, sn);
        CHECK(memcmp(sg, sn, sizeof sg) == 0, "update %d: the skipped update drew another batch",
              k + 1);
    }
    CHECK(metric(G, "skipped_updates") == 3 && metric(N, "updates") == 3, "counters");
    api->destroy(G);
    api->destroy(N);
}

static void test_resume(void) {
    const char *cfg = GD_CONFIG(", \"loss\": \"mse\", \"guard\": {}");
    fhd_learner *L = fhd_test_create(api, cfg);
    fill(L, 1e30f);
    fhd_train_stats st = FHD_TRAIN_STATS_INIT;
    CHECK(api->train(L, 12, &st) == FHD_OK, "train: %s", api->last_error(L));
    CHECK(st.updates_done > 0 && st.updates_skipped > 0 &&
              st.updates_done + st.updates_skipped == 12,
          "a mix of applied and skipped updates: done %u skipped %u", st.updates_done,
          st.updates_skipped);
    CHECK(metric(L, "skipped_updates") == st.updates_skipped &&
              metric(L, "updates") == st.updates_done,
          "metrics: skipped %g updates %g", metric(L, "skipped_updates"), metric(L, "updates"));
    CHECK(api->checkpoint_save(L, path, FHD_CKPT_INCLUDE_REPLAY) == FHD_OK, "save: %s",
          api->last_error(L));
    fhd_learner *R = fhd_test_create(api, cfg);
    CHECK(api->checkpoint_load(R, path, FHD_CKPT_INCLUDE_REPLAY) == FHD_OK, "load: %s",
          api->last_error(R));
    CHECK(metric(R, "skipped_updates") == st.updates_skipped, "skipped_updates after load %g",
          metric(R, "skipped_updates"));
    fhd_train_stats a = FHD_TRAIN_STATS_INIT, b = FHD_TRAIN_STATS_INIT;
    CHECK(api->train(L, 10, &a) == FHD_OK && api->train(R, 10, &b) == FHD_OK, "train on");
    CHECK(a.updates_done == b.updates_done && a.updates_skipped == b.updates_skipped &&
              hash_of(L, 1) == hash_of(R, 1) && rel_fingerprint(api, L) == rel_fingerprint(api, R),
          "the resumed learner went another way: done %u/%u skipped %u/%u", a.updates_done,
          b.updates_done, a.updates_skipped, b.updates_skipped);
    /* step(): its stats report the skips of its updates */
    float obs[REL_E * REL_S] = {0}, rew[REL_E] = {1e30f, 1e30f};
    int32_t actions[REL_E * REL_D];
    uint8_t no[REL_E] = {0, 0};
    fhd_train_stats ss = FHD_TRAIN_STATS_INIT;
    fhd_step_args s = FHD_STEP_ARGS_INIT;
    s.num_envs = REL_E;
    s.obs = obs;
    s.actions = actions;
    s.stats = &ss;
    CHECK(api->step(L, &s) == FHD_OK, "first step: %s", api->last_error(L));
    s.rewards = rew;
    s.terminated = no;
    s.truncated = no;
    uint32_t ran = 0;
    for (int k = 0; k < 8; k++) {
        CHECK(api->step(L, &s) == FHD_OK, "step: %s", api->last_error(L));
        ran += ss.updates_done + ss.updates_skipped;
        CHECK(ss.updates_skipped <= ss.updates_done + ss.updates_skipped, "step stats");
    }
    CHECK(ran == 8 && metric(L, "skipped_updates") + metric(L, "updates") == (double)(12 + 10 + 8),
          "step ran %u updates; skipped %g + updates %g", ran, metric(L, "skipped_updates"),
          metric(L, "updates"));
    api->destroy(R);
    api->destroy(L);
}

int main(int argc, char **argv) {
    if (argc < 2) {
        printf("usage: %s <scratch dir>\n", argv[0]);
        return 2;
    }
    api = (const fhd_api_v1 *)fhd_get_api_base()->get_api(1, NULL);
    snprintf(dir, sizeof dir, "%s/guard", argv[1]);
    mkdir(argv[1], 0755);
    mkdir(dir, 0755);
    snprintf(path, sizeof path, "%s/guard.safetensors", dir);
    test_batches();
    test_train();
    test_resume();
    return fhd_test_finish();
}
