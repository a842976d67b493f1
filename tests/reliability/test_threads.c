/* test_threads.c - separate learners are independent: two learners driven in two threads at
 * once end bit for bit where each ends alone.
 *
 * Each worker creates its learner (different configs and seeds), runs the agent loop through
 * step() (exploration, n-step returns, training on schedule), a train_batch, act with
 * Q-values, metrics, a checkpoint save and a load of it, and returns its whole state: every
 * named tensor (tensor_info/tensor_read) and the counters of metrics. The reference is each
 * worker run alone; then both run concurrently, three times. [thread-safe] functions
 * (manifest, status_name, init) are called from both threads throughout.
 *
 * Built and run under ThreadSanitizer by tests/reliability/run_tsan.sh (OPENBLAS_NUM_THREADS=1
 * keeps OpenBLAS's own, uninstrumented, thread pool out of the picture).
 * usage: test_threads LIBRARY SCRATCH_DIR */
#define _GNU_SOURCE
#include <pthread.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fhd_test.h"
#include "rel_common.h"

static const fhd_api_v1 *api;
static char scratch[512];

typedef struct worker {
    const char *config;
    int id;
    int steps;
    /* out */
    unsigned char *state;
    size_t state_len;
    char error[512];
} worker;

static const char *configs[2] = {
    "{\"obs_dim\": 3, \"actions\": [2, 3], \"hidden\": [32, 16], \"dueling\": true, "
    "\"spectral_norm\": \"all\", \"batch_size\": 16, \"replay_capacity\": 256, "
    "\"learning_starts\": 32, \"train_freq\": 2, \"gradient_steps\": 2, \"num_envs\": 2, "
    "\"n_step\": 3, \"replay\": \"prioritized\", \"target_update_interval\": 20, "
    "\"epsilon_decay_steps\": 200, \"cql_alpha\": 0.1, \"seed\": 101}",
    "{\"obs_dim\": 3, \"actions\": [2, 3], \"hidden\": [24], \"dueling\": false, "
    "\"double_dqn\": false, \"batch_size\": 16, \"replay_capacity\": 128, "
    "\"learning_starts\": 16, \"train_freq\": 1, \"num_envs\": 2, \"n_step\": 1, "
    "\"replay\": \"uniform\", \"tau\": 0.05, \"target_update_interval\": 1, "
    "\"optimizer\": \"adamw\", \"weight_decay\": 0.01, \"loss\": \"mse\", \"seed\": 202}"};

static void append(worker *w, const void *p, size_t n) {
    w->state = realloc(w->state, w->state_len + n);
    memcpy(w->state + w->state_len, p, n);
    w->state_len += n;
}

static int fail(worker *w, const char *what, fhd_learner *L) {
    snprintf(w->error, sizeof w->error, "worker %d: %s: %s", w->id, what,
             L ? api->last_error(L) : "");
    return 1;
}

static int run(worker *w) {
    fhd_learner *L = NULL;
    fhd_error err = FHD_ERROR_INIT;
    if (api->init(w->config, strlen(w->config), &L, &err) != FHD_OK) {
        snprintf(w->error, sizeof w->error, "worker %d: init: %s", w->id, err.message);
        return 1;
    }
    float obs[REL_E * REL_S], fin[REL_E * REL_S], rew[REL_E];
    int32_t act[REL_E * REL_D];
    uint8_t term[REL_E], trunc[REL_E];
    uint32_t rng = 12345u + (uint32_t)w->id;
    for (int i = 0; i < REL_E * REL_S; i++) {
        rng = rng * 1664525u + 1013904223u;
        obs[i] = (float)(rng >> 8) / 16777216.0f - 0.5f;
    }
    fhd_step_args s = FHD_STEP_ARGS_INIT;
    s.num_envs = REL_E;
    s.obs = obs;
    s.actions = act;
    fhd_train_stats st = FHD_TRAIN_STATS_INIT;
    s.stats = &st;
    if (api->step(L, &s) != FHD_OK)
        return fail(w, "first step", L);
    s.rewards = rew;
    s.terminated = term;
    s.truncated = trunc;
    s.final_obs = fin;
    for (int t = 0; t < w->steps; t++) {
        for (int e = 0; e < REL_E; e++) {
            float *x = obs + e * REL_S;
            x[0] += act[e * REL_D] ? 0.1f : -0.1f;
            x[1] = 0.9f * x[1] + 0.05f * (float)(act[e * REL_D + 1] - 1);
            x[2] = x[0] * x[1];
            rew[e] = 1.0f - (x[0] < 0 ? -x[0] : x[0]);
            term[e] = x[0] > 0.8f || x[0] < -0.8f;
            trunc[e] = !term[e] && (t + e) % 25 == 24;
            memcpy(fin + e * REL_S, x, sizeof(float) * REL_S);
            if (term[e] || trunc[e])
                for (int j = 0; j < REL_S; j++) {
                    rng = rng * 1664525u + 1013904223u;
                    x[j] = (float)(rng >> 8) / 16777216.0f - 0.5f;
                }
        }
        if (api->step(L, &s) != FHD_OK)
            return fail(w, "step", L);
        /* [thread-safe] functions, concurrently with the other worker */
        if (!api->manifest() || strcmp(api->status_name(FHD_ERR_IO), "FHD_ERR_IO") != 0)
            return fail(w, "thread-safe functions", NULL);
    }
    /* one host batch, act with Q-values */
    float bobs[16 * REL_S], bnext[16 * REL_S], brew[16], td[16 * REL_D], y[16];
    int32_t bact[16 * REL_D];
    uint8_t bterm[16];
    for (int i = 0; i < 16; i++) {
        for (int j = 0; j < REL_S; j++) {
            bobs[i * REL_S + j] = 0.01f * (float)(i * 3 + j) - 0.2f;
            bnext[i * REL_S + j] = 0.02f * (float)(i - j);
        }
        bact[i * REL_D] = i % 2;
        bact[i * REL_D + 1] = i % 3;
        brew[i] = (float)(i % 4) - 1.5f;
        bterm[i] = i % 7 == 0;
    }
    fhd_batch b = {sizeof b, 16, bobs, bact, brew, bnext, bterm, NULL, NULL, td, y, NULL, NULL};
    if (api->train_batch(L, &b, NULL) != FHD_OK)
        return fail(w, "train_batch", L);
    append(w, td, sizeof td);
    append(w, y, sizeof y);
    float q[16 * 5];
    int32_t qa[16 * REL_D];
    fhd_act_args a = FHD_ACT_ARGS_INIT;
    a.num_obs = 16;
    a.obs = bobs;
    a.actions = qa;
    a.q_values = q;
    if (api->act(L, &a) != FHD_OK)
        return fail(w, "act", L);
    append(w, q, sizeof q);
    append(w, qa, sizeof qa);
    /* a checkpoint round trip of its own file */
    char path[700];
    snprintf(path, sizeof path, "%s/worker%d.safetensors", scratch, w->id);
    int32_t rc = api->checkpoint_save(L, path, FHD_CKPT_INCLUDE_REPLAY);
    if (rc != FHD_OK && rc != FHD_ERR_NOT_IMPLEMENTED)
        return fail(w, "checkpoint_save", L);
    if (rc == FHD_OK) {
        if (api->checkpoint_load(L, path, FHD_CKPT_INCLUDE_REPLAY) != FHD_OK)
            return fail(w, "checkpoint_load", L);
        unlink(path);
    }
    /* the whole state */
    fhd_tensor_info ti = FHD_TENSOR_INFO_INIT;
    for (uint32_t i = 0; api->tensor_info(L, i, &ti) == FHD_OK; i++) {
        float *buf = malloc(sizeof(float) * ti.count);
        if (api->tensor_read(L, ti.name, buf, ti.count) != FHD_OK)
            return fail(w, "tensor_read", L);
        append(w, ti.name, strlen(ti.name));
        append(w, buf, sizeof(float) * ti.count);
        free(buf);
    }
    char m[4096];
    if (rel_metrics_stable(api, L, m, sizeof m) != 0)
        return fail(w, "metrics", L);
    append(w, m, strlen(m));
    api->destroy(L);
    return 0;
}

static void *thread_main(void *arg) {
    worker *w = arg;
    run(w);
    return NULL;
}

int main(int argc, char **argv) {
    if (argc < 3) {
        printf("usage: test_threads LIBRARY SCRATCH_DIR\n");
        return 2;
    }
    api = fhd_test_load(argv[1], NULL);
    mkdir(argv[2], 0755);
    snprintf(scratch, sizeof scratch, "%s/threads.XXXXXX", argv[2]);
    if (!mkdtemp(scratch)) {
        printf("FAIL cannot create a directory under %s\n", argv[2]);
        return 1;
    }
    const int steps = argc > 3 ? atoi(argv[3]) : 2000;
    worker alone[2];
    for (int i = 0; i < 2; i++) {
        alone[i] = (worker){configs[i], i, steps, NULL, 0, {0}};
        CHECK(run(&alone[i]) == 0, "%s", alone[i].error);
        printf("worker %d alone: %zu bytes of state\n", i, alone[i].state_len);
    }
    CHECK(alone[0].state_len > 10000 && alone[1].state_len > 5000, "state sizes %zu %zu",
          alone[0].state_len, alone[1].state_len);
    for (int round = 0; round < 3; round++) {
        worker w[2];
        pthread_t t[2];
        for (int i = 0; i < 2; i++) {
            w[i] = (worker){configs[i], i, steps, NULL, 0, {0}};
            CHECK(pthread_create(&t[i], NULL, thread_main, &w[i]) == 0, "pthread_create");
        }
        for (int i = 0; i < 2; i++)
            pthread_join(t[i], NULL);
        for (int i = 0; i < 2; i++) {
            CHECK(w[i].error[0] == '\0', "round %d: %s", round, w[i].error);
            CHECK(w[i].state_len == alone[i].state_len &&
                      memcmp(w[i].state, alone[i].state, w[i].state_len) == 0,
                  "round %d: worker %d in a thread beside the other differs from worker %d "
                  "alone",
                  round, i, i);
            free(w[i].state);
        }
        printf("round %d: both workers concurrently, bit for bit as alone\n", round);
    }
    free(alone[0].state);
    free(alone[1].state);
    rmdir(scratch);
    return fhd_test_finish();
}
