/* test_learner.c - the CPU learner through the public ABI: determinism, schedule, and bad
 * input at every function (a status, a message naming the field, the learner unchanged).
 * usage: test_learner LIBRARY */
#include <math.h>
#include <stdint.h>

#include "fhd_test.h"

static const fhd_api_v1 *api;

/* A deterministic toy environment: 3-d observation, 2 actions, episodes of <= 20 steps. */
typedef struct {
    float x[3];
    int t;
    uint32_t rng;
} toy_env;

static float toy_rand(toy_env *e) {
    e->rng = e->rng * 1664525u + 1013904223u;
    return (float)(e->rng >> 8) / 16777216.0f - 0.5f;
}
static void toy_reset(toy_env *e) {
    for (int i = 0; i < 3; i++)
        e->x[i] = toy_rand(e);
    e->t = 0;
}
static void toy_step(toy_env *e, int a, float *r, uint8_t *term, uint8_t *trunc) {
    e->x[0] += a ? 0.1f : -0.1f;
    e->x[1] = 0.9f * e->x[1] + 0.1f * toy_rand(e);
    e->x[2] = e->x[0] * e->x[1];
    e->t++;
    *r = 1.0f - fabsf(e->x[0]);
    *term = fabsf(e->x[0]) > 0.8f;
    *trunc = !*term && e->t >= 20;
}

/* Run `steps` agent steps through step() with 2 envs. */
static void run_steps(fhd_learner *L, int steps, uint32_t env_seed) {
    toy_env env[2] = {{{0}, 0, env_seed}, {{0}, 0, env_seed + 7}};
    float obs[6], final_obs[6], rew[2];
    uint8_t term[2], trunc[2];
    int32_t act[2];
    for (int e = 0; e < 2; e++) {
        toy_reset(&env[e]);
        memcpy(obs + 3 * e, env[e].x, sizeof env[e].x);
    }
    fhd_step_args a = FHD_STEP_ARGS_INIT;
    a.num_envs = 2;
    a.obs = obs;
    a.actions = act;
    int rc = api->step(L, &a);
    CHECK(rc == FHD_OK, "first step: %s", api->last_error(L));
    for (int s = 0; s < steps; s++) {
        for (int e = 0; e < 2; e++) {
            toy_step(&env[e], act[e], &rew[e], &term[e], &trunc[e]);
            memcpy(final_obs + 3 * e, env[e].x, sizeof env[e].x);
            if (term[e] || trunc[e])
                toy_reset(&env[e]);
            memcpy(obs + 3 * e, env[e].x, sizeof env[e].x);
        }
        a.rewards = rew;
        a.terminated = term;
        a.truncated = trunc;
        a.final_obs = final_obs;
        rc = api->step(L, &a);
        if (rc != FHD_OK) {
            CHECK(rc == FHD_OK, "step %d: %s", s, api->last_error(L));
            return;
        }
    }
}

static const char *cfg_a =
    "{\"obs_dim\": 3, \"actions\": [2], \"hidden\": [16, 16], \"batch_size\": 16, "
    "\"replay_capacity\": 512, \"learning_starts\": 64, \"train_freq\": 2, \"gradient_steps\": 1, "
    "\"num_envs\": 2, \"n_step\": 3, \"replay\": \"prioritized\", \"spectral_norm\": \"all\", "
    "\"target_update_interval\": 50, \"epsilon_decay_steps\": 500, \"lr\": 0.001, \"seed\": %d}";

static fhd_learner *make(int seed) {
    char cfg[1024];
    snprintf(cfg, sizeof cfg, cfg_a, seed);
    return fhd_test_create(api, cfg);
}

/* Concatenate every tensor (online, target, grad, adam, sn) into one malloc'd array. */
static float *snapshot(fhd_learner *L, size_t *n_out) {
    size_t n = 0, cap = 1 << 16;
    float *all = malloc(cap * sizeof(float));
    fhd_tensor_info ti = FHD_TENSOR_INFO_INIT;
    for (uint32_t i = 0; api->tensor_info(L, i, &ti) == FHD_OK; i++) {
        if (n + ti.count > cap) {
            cap = (n + ti.count) * 2;
            all = realloc(all, cap * sizeof(float));
        }
        CHECK(api->tensor_read(L, ti.name, all + n, ti.count) == FHD_OK, "read %s", ti.name);
        n += ti.count;
    }
    *n_out = n;
    return all;
}

static void counters(fhd_learner *L, char *buf, size_t cap) {
    size_t need;
    CHECK(api->metrics(L, buf, cap, &need) == FHD_OK, "metrics");
    /* drop the wall-clock fields so two snapshots of an unchanged learner compare equal */
    char *p = strstr(buf, "\"updates_per_second\"");
    if (p)
        *p = '\0';
}

static void test_determinism(void) {
    fhd_learner *a = make(3), *b = make(3), *c = make(4);
    run_steps(a, 1100, 11);
    run_steps(b, 1100, 11);
    run_steps(c, 1100, 11);
    fhd_train_stats st = FHD_TRAIN_STATS_INIT;
    CHECK(api->train(a, 0, &st) == FHD_OK, "train(0)");
    size_t na, nb, nc;
    float *sa = snapshot(a, &na), *sb = snapshot(b, &nb), *sc = snapshot(c, &nc);
    CHECK(na == nb && na == nc && na > 1000, "sizes %zu %zu %zu", na, nb, nc);
    CHECK(memcmp(sa, sb, na * sizeof(float)) == 0, "same seed: bitwise identical state");
    CHECK(memcmp(sa, sc, na * sizeof(float)) != 0, "different seeds differ");
    char ma[2048], mb[2048];
    counters(a, ma, sizeof ma);
    counters(b, mb, sizeof mb);
    CHECK(strcmp(ma, mb) == 0, "same metrics\n%s\n%s", ma, mb);
    /* 2200 env steps, learning from 64 with train_freq 2: (2200 - 64) / 2 + 1 updates */
    CHECK(strstr(ma, "\"env_steps\":2200") != NULL, "env steps: %s", ma);
    CHECK(strstr(ma, "\"updates\":1069") != NULL, "updates on schedule: %s", ma);
    printf("determinism: %zu floats identical after 1069 updates; seed 4 differs\n", na);
    free(sa);
    free(sb);
    free(sc);
    api->destroy(a);
    api->destroy(b);
    api->destroy(c);
}

/* Each bad call must fail with `code`, mention `needle`, and leave the learner unchanged. */
static fhd_learner *gL;
static float *g_before;
static size_t g_n;
static char g_metrics[2048];

static void expect_rejected(int32_t rc, int32_t code, const char *needle, const char *what) {
    CHECK(rc == code, "%s: got %s, expected %s (%s)", what, api->status_name(rc),
          api->status_name(code), api->last_error(gL));
    CHECK(strstr(api->last_error(gL), needle) != NULL, "%s: message \"%s\" lacks \"%s\"", what,
          api->last_error(gL), needle);
    size_t n;
    float *now = snapshot(gL, &n);
    char m[2048];
    counters(gL, m, sizeof m);
    CHECK(n == g_n && memcmp(now, g_before, n * sizeof(float)) == 0, "%s: state changed", what);
    CHECK(strcmp(m, g_metrics) == 0, "%s: counters changed", what);
    free(now);
}

static void test_bad_input(void) {
    gL = make(5);
    run_steps(gL, 200, 3);
    g_before = snapshot(gL, &g_n);
    counters(gL, g_metrics, sizeof g_metrics);
    float obs[6] = {0}, nan_obs[6] = {0, 0, 0, 0, NAN, 0}, rew[2] = {1, 1};
    float nan_rew[2] = {1, INFINITY};
    int32_t act[2] = {0, 1}, bad_act[2] = {0, 2}, neg_act[2] = {-1, 0};
    uint8_t zero[2] = {0, 0}, two[2] = {0, 2};

    /* act */
    fhd_act_args a = FHD_ACT_ARGS_INIT;
    a.num_obs = 2;
    a.obs = obs;
    a.actions = act;
    fhd_act_args x = a;
    x.obs = NULL;
    expect_rejected(api->act(gL, &x), FHD_ERR_NULL_POINTER, "obs", "act obs NULL");
    x = a;
    x.actions = NULL;
    expect_rejected(api->act(gL, &x), FHD_ERR_NULL_POINTER, "actions", "act actions NULL");
    x = a;
    x.num_obs = 0;
    expect_rejected(api->act(gL, &x), FHD_ERR_INVALID_ARGUMENT, "num_obs", "act 0 obs");
    x = a;
    x.obs = nan_obs;
    expect_rejected(api->act(gL, &x), FHD_ERR_NONFINITE, "obs[1][1] is NaN", "act NaN");
    x = a;
    x.explore = 2;
    expect_rejected(api->act(gL, &x), FHD_ERR_INVALID_ARGUMENT, "explore", "act explore 2");
    expect_rejected(api->act(gL, NULL), FHD_ERR_NULL_POINTER, "args", "act NULL args");

    /* observe */
    fhd_transitions t = {sizeof t, 2, obs, act, rew, obs, zero, zero, NULL, NULL, NULL};
    fhd_transitions u = t;
    u.num_envs = 3;
    expect_rejected(api->observe(gL, &u), FHD_ERR_SIZE_MISMATCH, "num_envs", "observe N");
    u = t;
    u.rewards = nan_rew;
    expect_rejected(api->observe(gL, &u), FHD_ERR_NONFINITE, "rewards[1] is Inf (env 1)",
                    "observe Inf reward");
    u = t;
    u.next_obs = nan_obs;
    expect_rejected(api->observe(gL, &u), FHD_ERR_NONFINITE, "next_obs[1][1]", "observe NaN");
    u = t;
    u.actions = bad_act;
    expect_rejected(api->observe(gL, &u), FHD_ERR_ACTION_RANGE, "[0, 1]", "observe action 2");
    u = t;
    u.actions = neg_act;
    expect_rejected(api->observe(gL, &u), FHD_ERR_ACTION_RANGE, "= -1", "observe action -1");
    u = t;
    u.terminated = two;
    expect_rejected(api->observe(gL, &u), FHD_ERR_INVALID_ARGUMENT, "terminated[1]", "flag 2");
    u = t;
    u.truncated = NULL;
    expect_rejected(api->observe(gL, &u), FHD_ERR_NULL_POINTER, "truncated", "observe NULL");
    u = t;
    u.struct_size = 4;
    expect_rejected(api->observe(gL, &u), FHD_ERR_STRUCT_SIZE, "struct_size", "observe size");

    /* train */
    expect_rejected(api->train(gL, 2000000, NULL), FHD_ERR_INVALID_ARGUMENT, "num_updates",
                    "train huge");
    fhd_train_stats st = FHD_TRAIN_STATS_INIT;
    st.struct_size = 3;
    expect_rejected(api->train(gL, 1, &st), FHD_ERR_STRUCT_SIZE, "stats", "train stats size");

    /* train_batch (B = 16) */
    float bobs[48] = {0}, brew[16] = {0}, bdisc[16], bw[16];
    int32_t bact[16] = {0};
    uint8_t bterm[16] = {0};
    for (int i = 0; i < 16; i++) {
        bdisc[i] = 0.9f;
        bw[i] = 1.0f;
    }
    fhd_batch b = {sizeof b, 16, bobs, bact, brew, bobs, bterm, bdisc, bw, NULL, NULL, NULL, NULL};
    fhd_batch c = b;
    c.batch_size = 8;
    expect_rejected(api->train_batch(gL, &c, NULL), FHD_ERR_SIZE_MISMATCH, "batch_size",
                    "train_batch B");
    c = b;
    bdisc[3] = 1.5f;
    expect_rejected(api->train_batch(gL, &c, NULL), FHD_ERR_INVALID_ARGUMENT, "discounts[3]",
                    "discount > 1");
    bdisc[3] = 0.9f;
    bw[5] = -1.0f;
    expect_rejected(api->train_batch(gL, &c, NULL), FHD_ERR_INVALID_ARGUMENT, "weights[5]",
                    "negative weight");
    bw[5] = 1.0f;
    bact[7] = 9;
    expect_rejected(api->train_batch(gL, &c, NULL), FHD_ERR_ACTION_RANGE, "actions[7][0]",
                    "batch action");
    bact[7] = 0;
    brew[2] = NAN;
    expect_rejected(api->train_batch(gL, &c, NULL), FHD_ERR_NONFINITE, "rewards[2]",
                    "batch reward NaN");
    brew[2] = 0;
    c.next_obs = NULL;
    expect_rejected(api->train_batch(gL, &c, NULL), FHD_ERR_NULL_POINTER, "next_obs", "batch NULL");

    /* step */
    fhd_step_args s = FHD_STEP_ARGS_INIT;
    s.num_envs = 2;
    s.obs = obs;
    s.actions = act;
    s.rewards = rew;
    s.terminated = zero;
    s.truncated = zero;
    fhd_step_args s2 = s;
    s2.num_envs = 1;
    expect_rejected(api->step(gL, &s2), FHD_ERR_SIZE_MISMATCH, "num_envs", "step N");
    s2 = s;
    s2.rewards = nan_rew;
    expect_rejected(api->step(gL, &s2), FHD_ERR_NONFINITE, "rewards[1]", "step reward");
    s2 = s;
    uint8_t done[2] = {0, 1};
    s2.terminated = done;
    s2.final_obs = nan_obs;
    expect_rejected(api->step(gL, &s2), FHD_ERR_NONFINITE, "final_obs", "step final_obs");
    s2 = s;
    s2.truncated = NULL;
    expect_rejected(api->step(gL, &s2), FHD_ERR_NULL_POINTER, "truncated", "step NULL");

    /* tensors and metrics */
    float buf[4];
    expect_rejected(api->tensor_read(gL, "online.torso.9.weight", buf, 4), FHD_ERR_NOT_FOUND,
                    "no tensor", "tensor name");
    expect_rejected(api->tensor_read(gL, "online.torso.0.bias", buf, 4), FHD_ERR_SIZE_MISMATCH,
                    "16 elements", "tensor count");
    float w16[16];
    for (int i = 0; i < 16; i++)
        w16[i] = 0.0f;
    w16[3] = NAN;
    expect_rejected(api->tensor_write(gL, "online.torso.0.bias", w16, 16), FHD_ERR_NONFINITE, "NaN",
                    "tensor write NaN");
    expect_rejected(api->tensor_write(gL, "grad.torso.0.bias", w16, 16), FHD_ERR_INVALID_ARGUMENT,
                    "not writable", "tensor write grad");
    expect_rejected(api->metrics(gL, NULL, 0, NULL), FHD_ERR_NULL_POINTER, "needed",
                    "metrics NULL");
    /* a fresh learner refuses to train and to take rewards before a first step */
    fhd_learner *fresh = make(6);
    CHECK(api->train(fresh, 1, NULL) == FHD_ERR_NOT_READY, "not ready");
    CHECK(strstr(api->last_error(fresh), "batch_size 16"), "%s", api->last_error(fresh));
    CHECK(api->step(fresh, &s) == FHD_ERR_INVALID_ARGUMENT, "rewards before first step");
    api->destroy(fresh);
    free(g_before);
    api->destroy(gL);
}

static void test_act_semantics(void) {
    fhd_learner *L = make(9);
    float obs[2 * 3] = {0.1f, -0.2f, 0.3f, 0.5f, 0.5f, -0.5f};
    int32_t act[2], act2[2];
    float q[4];
    fhd_act_args a = FHD_ACT_ARGS_INIT;
    a.num_obs = 2;
    a.obs = obs;
    a.actions = act;
    a.q_values = q;
    CHECK(api->act(L, &a) == FHD_OK, "greedy act");
    for (int i = 0; i < 2; i++)
        CHECK(act[i] == (q[2 * i + 1] > q[2 * i] ? 1 : 0), "greedy matches q for row %d", i);
    a.actions = act2;
    CHECK(api->act(L, &a) == FHD_OK && memcmp(act, act2, sizeof act) == 0, "greedy stable");
    /* epsilon = 1 at step 0: explore draws uniform actions; both values must appear */
    int counts[2] = {0, 0};
    a.explore = 1;
    a.q_values = NULL;
    for (int k = 0; k < 200; k++) {
        CHECK(api->act(L, &a) == FHD_OK, "explore act");
        counts[act2[0]]++;
    }
    CHECK(counts[0] > 60 && counts[1] > 60, "random actions %d/%d", counts[0], counts[1]);
    api->destroy(L);
}

/* A uint8 learner computes what a float learner computes on obs * (1/255) (obs_scale's default),
 * through act, train_batch and a checkpoint with its (uint8) replay. */
static void test_uint8_obs(void) {
    const char *c8 = "{\"obs_shape\": [1, 2, 3], \"obs_dtype\": \"uint8\", \"actions\": [2, 3], "
                     "\"hidden\": [16], \"batch_size\": 4, \"replay_capacity\": 32, \"seed\": 3, "
                     "\"double_dqn\": true, \"dueling\": true}";
    /* the same with a convolution: rank-4 tensors through the checkpoint's save and load */
    const char *cc = "{\"obs_shape\": [1, 2, 3], \"obs_dtype\": \"uint8\", \"actions\": [2, 3], "
                     "\"conv\": [{\"out\": 3, \"kernel\": 2, \"stride\": 1, \"padding\": 1}], "
                     "\"hidden\": [16], \"batch_size\": 4, \"replay_capacity\": 32, \"seed\": 3, "
                     "\"double_dqn\": true, \"dueling\": true, \"spectral_norm\": \"all\"}";
    const char *cf =
        "{\"obs_dim\": 6, \"actions\": [2, 3], \"hidden\": [16], \"batch_size\": 4, "
        "\"replay_capacity\": 32, \"seed\": 3, \"double_dqn\": true, \"dueling\": true}";
    fhd_learner *L8 = fhd_test_create(api, c8), *LF = fhd_test_create(api, cf);
    uint8_t px[5 * 6]; /* rows 0-3: obs, rows 1-4: next_obs */
    float fx[5 * 6], q8[4 * 5], qf[4 * 5];
    int32_t a8[8], af[8], acts[8] = {0, 1, 1, 2, 0, 0, 1, 1};
    float rew[4] = {1, 0, -1, 0.5f};
    uint8_t term[4] = {0, 0, 1, 0};
    for (int i = 0; i < 30; i++) {
        px[i] = (uint8_t)((i * 37 + 11) % 256);
        fx[i] = (1.0f / 255.0f) * (float)px[i]; /* the library's conversion, exactly */
    }
    for (int round = 0; round < 3; round++) {
        fhd_act_args a = FHD_ACT_ARGS_INIT;
        a.num_obs = 4;
        a.obs_u8 = px;
        a.actions = a8;
        a.q_values = q8;
        CHECK(api->act(L8, &a) == FHD_OK, "u8 act: %s", api->last_error(L8));
        a.obs_u8 = NULL;
        a.obs = fx;
        a.actions = af;
        a.q_values = qf;
        CHECK(api->act(LF, &a) == FHD_OK, "float act: %s", api->last_error(LF));
        float worst = 0;
        for (int i = 0; i < 20; i++)
            worst = fmaxf(worst, fabsf(q8[i] - qf[i]));
        /* bitwise before training; after it the GEMMs read inputs from other buffers (other
         * alignment, other OpenBLAS edge paths): rounding-level differences only */
        CHECK(round == 0 ? worst == 0.0f : worst < 2e-6f,
              "round %d: uint8 and float Q agree (max diff %g)", round, (double)worst);
        fhd_batch b = FHD_BATCH_INIT;
        b.batch_size = 4;
        b.obs_u8 = px;
        b.next_obs_u8 = px + 6;
        b.actions = acts;
        b.rewards = rew;
        b.terminated = term;
        CHECK(api->train_batch(L8, &b, NULL) == FHD_OK, "u8 train_batch: %s", api->last_error(L8));
        b.obs_u8 = b.next_obs_u8 = NULL;
        b.obs = fx;
        b.next_obs = fx + 6;
        CHECK(api->train_batch(LF, &b, NULL) == FHD_OK, "train_batch: %s", api->last_error(LF));
    }
    /* the other dtype is refused, naming both pointers */
    fhd_batch b = FHD_BATCH_INIT;
    b.batch_size = 4;
    b.obs = fx;
    b.next_obs = fx;
    b.actions = acts;
    b.rewards = rew;
    b.terminated = term;
    CHECK(api->train_batch(L8, &b, NULL) == FHD_ERR_INVALID_ARGUMENT &&
              strstr(api->last_error(L8), "obs_u8") && strstr(api->last_error(L8), "float32"),
          "float batch to a uint8 learner: %s", api->last_error(L8));
    b.obs = NULL;
    b.obs_u8 = px;
    b.next_obs = NULL;
    b.next_obs_u8 = px;
    CHECK(api->train_batch(LF, &b, NULL) == FHD_ERR_INVALID_ARGUMENT &&
              strstr(api->last_error(LF), "obs_u8") && strstr(api->last_error(LF), "float32"),
          "uint8 batch to a float learner: %s", api->last_error(LF));
    /* a checkpoint with the uint8 replay resumes exactly */
    fhd_transitions t = FHD_TRANSITIONS_INIT;
    t.num_envs = 1;
    t.actions = acts;
    t.rewards = rew;
    t.terminated = term;
    t.truncated = term + 1;
    for (int k = 0; k < 6; k++) {
        t.obs_u8 = px + 6 * (k % 3);
        t.next_obs_u8 = px + 6 * (k % 3 + 1);
        CHECK(api->observe(L8, &t) == FHD_OK, "u8 observe: %s", api->last_error(L8));
    }
    const char *path = "test_learner_u8.safetensors";
    fhd_learner *LC = fhd_test_create(api, cc);
    fhd_tensor_info ti = FHD_TENSOR_INFO_INIT;
    CHECK(api->tensor_info(LC, 0, &ti) == FHD_OK &&
              strcmp(ti.name, "online.torso.conv0.weight") == 0 && ti.rank == 4 &&
              ti.shape[0] == 3 && ti.shape[1] == 1 && ti.shape[2] == 2 && ti.shape[3] == 2 &&
              ti.count == 12,
          "conv weight tensor %s rank %u (%llu, %llu, %llu, %llu)", ti.name, ti.rank,
          (unsigned long long)ti.shape[0], (unsigned long long)ti.shape[1],
          (unsigned long long)ti.shape[2], (unsigned long long)ti.shape[3]);
    for (int k = 0; k < 6; k++) {
        t.obs_u8 = px + 6 * (k % 3);
        t.next_obs_u8 = px + 6 * (k % 3 + 1);
        CHECK(api->observe(LC, &t) == FHD_OK, "conv observe: %s", api->last_error(LC));
    }
    fhd_learner *learners[2] = {L8, LC};
    const char *configs[2] = {c8, cc};
    for (int w = 0; w < 2; w++) {
        fhd_learner *S = learners[w];
        CHECK(api->train(S, 2, NULL) == FHD_OK, "train before saving: %s", api->last_error(S));
        CHECK(api->checkpoint_save(S, path, FHD_CKPT_INCLUDE_REPLAY) == FHD_OK, "save: %s",
              api->last_error(S));
        fhd_learner *R = fhd_test_create(api, configs[w]);
        CHECK(api->checkpoint_load(R, path, FHD_CKPT_INCLUDE_REPLAY) == FHD_OK, "load: %s",
              api->last_error(R));
        fhd_train_stats s1 = FHD_TRAIN_STATS_INIT, s2 = FHD_TRAIN_STATS_INIT;
        CHECK(api->train(S, 3, &s1) == FHD_OK && api->train(R, 3, &s2) == FHD_OK, "train: %s",
              api->last_error(R));
        CHECK(s1.loss == s2.loss && s1.update_index == s2.update_index && s1.loss > 0.0f,
              "resumed %s learner trains bitwise alike (loss %g, %g)", w ? "conv" : "uint8",
              (double)s1.loss, (double)s2.loss);
        remove(path);
        api->destroy(R);
    }
    api->destroy(LC);
    api->destroy(L8);
    api->destroy(LF);
}

int main(int argc, char **argv) {
    if (argc < 2) {
        printf("usage: test_learner LIBRARY\n");
        return 2;
    }
    api = fhd_test_load(argv[1], NULL);
    test_determinism();
    test_bad_input();
    test_act_semantics();
    test_uint8_obs();
    return fhd_test_finish();
}
