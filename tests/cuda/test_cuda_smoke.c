/* test_cuda_smoke.c - a short run through every path of the CUDA backend, small enough for
 * compute-sanitizer (memcheck, racecheck, synccheck: tests/cuda/run_sanitizer.sh): observe with
 * ring wrap-around, train (graph), train_batch (direct launches), act with and without Q values,
 * priority write (tree rebuild), scalars, invariants; for uniform and prioritized replay, with
 * and without spectral norm, plain and branching/CQL heads. */
#include "cuda_test.h"

static void run(const char *name, const char *extra, uint32_t D, const uint32_t *K) {
    char json[1024];
    snprintf(json, sizeof json,
             "{\"backend\": \"cuda\", \"obs_dim\": 10, \"hidden\": [24, 40], \"batch_size\": 48, "
             "\"replay_capacity\": 300, \"num_envs\": 3, \"learning_starts\": 0, \"seed\": 5, "
             "\"target_update_interval\": 3, %s}",
             extra);
    fhd_learner *L = ct_create_cuda(json);
    fhd_learner *Ls[1] = {L};
    const uint32_t S = L->lo.S, B = L->cfg.batch_size, KT = L->lo.KT;
    ct_feed(Ls, 1, 3, S, D, K, 150, 9);
    fhd_train_stats st = FHD_TRAIN_STATS_INIT;
    int32_t rc = fhd__learner_train(L, 7, &st);
    ct_check(rc == FHD_OK, "%s: train(7) (%s)", name, rc == FHD_OK ? "" : L->err);
    /* train_batch */
    float *obs = (float *)calloc((size_t)B * S, 4), *next = (float *)calloc((size_t)B * S, 4);
    float *rew = (float *)calloc(B, 4), *td = (float *)calloc((size_t)B * D, 4), *y = (float *)calloc(B, 4);
    int32_t *act = (int32_t *)calloc((size_t)B * D, 4);
    uint8_t *term = (uint8_t *)calloc(B, 1);
    uint64_t s = 3;
    for (uint32_t i = 0; i < B * S; i++) {
        obs[i] = ct_normal(&s);
        next[i] = ct_normal(&s);
    }
    for (uint32_t i = 0; i < B; i++)
        for (uint32_t d = 0; d < D; d++)
            act[i * D + d] = (int32_t)(ct_rng(&s) % K[d]);
    fhd_batch bt = FHD_BATCH_INIT;
    bt.batch_size = B;
    bt.obs = obs;
    bt.actions = act;
    bt.rewards = rew;
    bt.next_obs = next;
    bt.terminated = term;
    bt.td_errors = td;
    bt.targets = y;
    rc = fhd__learner_train_batch(L, &bt, &st);
    ct_check(rc == FHD_OK && isfinite(st.loss), "%s: train_batch (loss %g)", name, st.loss);
    rc = fhd__learner_train(L, 5, &st);
    ct_check(rc == FHD_OK, "%s: train after train_batch", name);
    /* act, 5 rows and 700 rows (more than one chunk of 256... when num_envs is small) */
    float *q = (float *)calloc((size_t)700 * KT, 4), *o = (float *)calloc((size_t)700 * S, 4);
    int32_t *a = (int32_t *)calloc((size_t)700 * D, 4);
    for (uint32_t i = 0; i < 700 * S; i++)
        o[i] = ct_normal(&s);
    fhd_act_args aa = FHD_ACT_ARGS_INIT;
    aa.num_obs = 5;
    aa.obs = o;
    aa.actions = a;
    rc = fhd__learner_act(L, &aa);
    aa.num_obs = 700;
    aa.q_values = q;
    rc = rc == FHD_OK ? fhd__learner_act(L, &aa) : rc;
    int in_range = 1;
    for (uint32_t i = 0; i < 700; i++)
        for (uint32_t d = 0; d < D; d++)
            in_range = in_range && a[i * D + d] >= 0 && (uint32_t)a[i * D + d] < K[d];
    ct_check(rc == FHD_OK && in_range, "%s: act 5 and 700 rows", name);
    /* priority write */
    if (L->cfg.replay == FHD_REPLAY_PRIORITIZED) {
        const uint32_t N = L->cfg.replay_capacity;
        uint64_t *p = (uint64_t *)malloc(8 * (size_t)N);
        ct_read(L, FHD_STATE_REPLAY_PRIORITY, 0, N, p);
        for (uint32_t i = 0; i < N; i += 7)
            p[i] = 1 + (p[i] >> 1);
        rc = L->ops->write(L->be, FHD_STATE_REPLAY_PRIORITY, 0, N, p);
        ct_check(rc == FHD_OK, "%s: priority write", name);
        free(p);
        rc = fhd__learner_train(L, 3, &st);
        ct_check(rc == FHD_OK, "%s: train after the priority write", name);
    }
    char msg[256] = {0};
    rc = L->ops->check_invariants(L->be, msg, sizeof msg);
    ct_check(rc == FHD_OK, "%s: invariants (%s)", name, msg);
    fhd__update_stats us;
    float probe;
    ct_read(L, FHD_STATE_PARAMS, 0, 1, &probe);
    L->ops->latest_stats(L->be, &us);
    ct_check(us.update_index == 13 + (L->cfg.replay == FHD_REPLAY_PRIORITIZED ? 3 : 0) &&
                 isfinite(us.loss),
             "%s: statistics of update %llu, loss %g", name, (unsigned long long)us.update_index,
             us.loss);
    free(obs);
    free(next);
    free(rew);
    free(td);
    free(y);
    free(act);
    free(term);
    free(q);
    free(o);
    free(a);
    fhd__learner_destroy(L);
}

/* Two learners of one configuration fed the same transitions end 300 updates (graph replays)
 * with bit-identical parameters, Adam moments, spectral-norm vectors and priorities: the backend
 * has no float atomics and no reduction whose order depends on scheduling. The first learner
 * runs each round as one train(100), the second as train() calls of 1, 2, 3, 7 ... updates, so
 * the two take different captures of the update (cuda_ext.h: the second mostly samples each
 * batch in its own update, the first mostly ahead, in the update before): the batches, and so
 * everything else, must be the same. New transitions arrive between the rounds. */
static void reproducible(const char *name, const char *net, const char *extra, uint32_t D,
                         const uint32_t *K) {
    char json[1024];
    snprintf(json, sizeof json,
             "{\"backend\": \"cuda\", %s, \"replay_capacity\": 2000, \"num_envs\": 4, "
             "\"learning_starts\": 0, \"seed\": 9, \"target_update_interval\": 1, \"tau\": 0.01, "
             "%s}",
             net, extra);
    fhd_learner *Ls[2] = {ct_create_cuda(json), ct_create_cuda(json)};
    const uint64_t P = Ls[0]->lo.num_params, N = Ls[0]->cfg.replay_capacity;
    const uint64_t SN = Ls[0]->lo.sn_size;
    ct_feed(Ls, 2, 4, Ls[0]->lo.S, D, K, 600, 21);
    int same_p = 1, same_m = 1, same_q = 1, same_b = 1, same_sn = 1, ok = 1;
    /* under compute-sanitizer (FHD_SMOKE_SHORT set) one round of 10 updates */
    const int short_run = getenv("FHD_SMOKE_SHORT") != NULL;
    const uint32_t per_round = short_run ? 10 : 100;
    for (int round = 0; round < (short_run ? 1 : 3); round++) {
        fhd_train_stats st[2] = {FHD_TRAIN_STATS_INIT, FHD_TRAIN_STATS_INIT};
        if (round > 0)
            ct_feed(Ls, 2, 4, Ls[0]->lo.S, D, K, 50, 21 + round);
        ok = ok && fhd__learner_train(Ls[0], per_round, &st[0]) == FHD_OK;
        static const uint32_t chunks[] = {1, 2, 3, 7, 1, 1, 13, 2};
        for (uint32_t done = 0, c = 0; ok && done < per_round; c++) {
            uint32_t n = chunks[c % (sizeof chunks / sizeof chunks[0])];
            n = n < per_round - done ? n : per_round - done;
            ok = fhd__learner_train(Ls[1], n, &st[1]) == FHD_OK;
            done += n;
        }
        {
            const uint32_t B = Ls[0]->cfg.batch_size;
            uint32_t *i0 = (uint32_t *)malloc(4 * B), *i1 = (uint32_t *)malloc(4 * B);
            float *w0 = (float *)malloc(4 * B), *w1 = (float *)malloc(4 * B);
            ct_read(Ls[0], FHD_STATE_LAST_INDICES, 0, B, i0);
            ct_read(Ls[1], FHD_STATE_LAST_INDICES, 0, B, i1);
            ct_read(Ls[0], FHD_STATE_LAST_WEIGHTS, 0, B, w0);
            ct_read(Ls[1], FHD_STATE_LAST_WEIGHTS, 0, B, w1);
            same_b = same_b && memcmp(i0, i1, 4 * B) == 0 && memcmp(w0, w1, 4 * B) == 0;
            free(i0);
            free(i1);
            free(w0);
            free(w1);
        }
        float *p0 = ct_read_floats(Ls[0], FHD_STATE_PARAMS, 2 * P);
        float *p1 = ct_read_floats(Ls[1], FHD_STATE_PARAMS, 2 * P);
        float *m0 = ct_read_floats(Ls[0], FHD_STATE_ADAM_V, P);
        float *m1 = ct_read_floats(Ls[1], FHD_STATE_ADAM_V, P);
        same_p = same_p && memcmp(p0, p1, 8 * P) == 0;
        same_m = same_m && memcmp(m0, m1, 4 * P) == 0;
        if (SN) {
            float *s0 = ct_read_floats(Ls[0], FHD_STATE_SN, 2 * SN);
            float *s1 = ct_read_floats(Ls[1], FHD_STATE_SN, 2 * SN);
            same_sn = same_sn && memcmp(s0, s1, 8 * SN) == 0;
            free(s0);
            free(s1);
        }
        if (Ls[0]->cfg.replay == FHD_REPLAY_PRIORITIZED) {
            uint64_t *q0 = (uint64_t *)malloc(8 * N), *q1 = (uint64_t *)malloc(8 * N);
            ct_read(Ls[0], FHD_STATE_REPLAY_PRIORITY, 0, N, q0);
            ct_read(Ls[1], FHD_STATE_REPLAY_PRIORITY, 0, N, q1);
            same_q = same_q && memcmp(q0, q1, 8 * N) == 0;
            free(q0);
            free(q1);
        }
        free(p0);
        free(p1);
        free(m0);
        free(m1);
    }
    ct_check(ok && same_p && same_m && same_q && same_b && same_sn,
             "%s: two learners, %u updates in calls of 100 and of 1..13: parameters %s, Adam v "
             "%s, spectral-norm vectors %s, priorities %s, last batch's indices and weights %s",
             name, short_run ? per_round : 3 * per_round,
             same_p ? "identical" : "DIFFER", same_m ? "identical" : "DIFFER",
             SN ? (same_sn ? "identical" : "DIFFER") : "(none)",
             same_q ? "identical" : "DIFFER", same_b ? "identical" : "DIFFER");
    fhd__learner_destroy(Ls[0]);
    fhd__learner_destroy(Ls[1]);
}

int main(void) {
    ct_require_gpu();
    const uint32_t K1[1] = {4}, K3[3] = {3, 2, 5}, K6[1] = {6};
    run("per-sn-double", "\"actions\": [4], \"replay\": \"prioritized\", \"spectral_norm\": \"all\"",
        1, K1);
    run("uniform-plain", "\"actions\": [4], \"replay\": \"uniform\", \"dueling\": false, "
        "\"double_dqn\": false", 1, K1);
    run("branching-cql-nstep", "\"actions\": [3, 2, 5], \"replay\": \"prioritized\", "
        "\"cql_alpha\": 0.2, \"n_step\": 3, \"spectral_norm\": \"last\", \"tau\": 0.5, "
        "\"matmul_precision\": \"tf32\"", 3, K3);
    const char *small = "\"obs_dim\": 12, \"hidden\": [64, 96], \"batch_size\": 200";
    reproducible("reproducible per-sn-double", small, "\"actions\": [6], \"replay\": "
                 "\"prioritized\", \"spectral_norm\": \"all\", \"max_grad_norm\": 0.5", 1, K6);
    reproducible("reproducible branching-cql-tf32", small, "\"actions\": [3, 2, 5], \"replay\": "
                 "\"prioritized\", \"cql_alpha\": 0.2, \"matmul_precision\": \"tf32\"", 3, K3);
    /* B1's shape: its backward GEMMs run as two halves (the batch sampled ahead must wait for
     * both halves of layer 0's dW); uniform replay samples ahead too */
    const char *b1 = "\"obs_dim\": 64, \"hidden\": [256, 256], \"batch_size\": 256";
    reproducible("reproducible b1-per", b1, "\"actions\": [6], \"replay\": \"prioritized\", "
                 "\"double_dqn\": true", 1, K6);
    reproducible("reproducible b1-uniform", b1, "\"actions\": [6], \"replay\": \"uniform\"", 1,
                 K6);
    /* and B1-sn's shape: the spectral-norm passes (last-block finishes, split GEMMs beside
     * them) have no order that depends on scheduling either */
    reproducible("reproducible b1-sn", b1, "\"actions\": [6], \"replay\": \"prioritized\", "
                 "\"double_dqn\": true, \"spectral_norm\": \"all\"", 1, K6);
    /* B3's shape: on sm_90 with 132 SMs its dW GEMMs of the head and of layer 1 run split-K
     * configurations of cuda_gemm.cpp's table, reduced in a second kernel in a fixed order.
     * Not under racecheck (FHD_SMOKE_NO_LARGE): it instruments every shared-memory access of
     * cuBLASLt's B3-sized kernels and takes minutes */
    const uint32_t K4[4] = {5, 5, 5, 5};
    const char *b3 = "\"obs_dim\": 64, \"hidden\": [512, 512], \"batch_size\": 1024";
    const char *no_large = getenv("FHD_SMOKE_NO_LARGE");
    if (!no_large || !*no_large)
        reproducible("reproducible b3", b3, "\"actions\": [5, 5, 5, 5], \"dueling\": true, "
                     "\"replay\": \"prioritized\", \"double_dqn\": true, \"spectral_norm\": "
                     "\"all\", \"cql_alpha\": 0.1", 4, K4);
    return ct_finish();
}
