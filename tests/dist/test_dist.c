/* test_dist.c - data-parallel training over MPI (config distributed, docs/design.md section
 * 10), one process per rank under mpirun (run_mpi.sh starts it).
 * usage: test_dist LIBRARY MODE
 *   equiv     W ranks at batch b, each holding the same replay, equal one learner at batch W b
 *             (every tensor, to float summation order); one learner at batch b does not
 *   lockstep  1,000 updates on different data per rank: the library's checksum metric agrees
 *             every checksum_interval updates, and the test's own checksum of every tensor,
 *             gathered with MPI, is equal on all ranks; then checkpoints: rank 0's file of the
 *             shared state restores that state on every rank, and each rank's own file with
 *             its replay shard resumes exactly (100 more updates equal to the original's)
 *   mismatch  rank 1 has another seed (then another hidden size): init fails on every rank
 *             with a message naming the key
 *   kill      rank 1 kills itself after 50 updates; the others train on (run_mpi.sh checks
 *             that mpirun ends the job within its timeout)
 *   refusals  (no mpirun) the config's errors, backend "cuda" refused where the build has no
 *             NCCL (else refused only for what the machine lacks), and no MPI module
 *             ($FHD_MPI_MODULE pointing nowhere): FHD_ERR_BACKEND_UNAVAILABLE
 * Only lockstep calls MPI itself (after which the library finds MPI initialised); the other
 * modes read the rank from Open MPI's environment and leave MPI to the library. */
#define _POSIX_C_SOURCE 200809L /* setenv, mkdtemp */
#include <jansson.h>
#include <math.h>
#include <mpi.h>
#include <signal.h>
#include <stdlib.h>
#include <unistd.h>
#include <stdint.h>

#include "fhd_test.h"

static const fhd_api_v1 *api;
static int rank, world;

static int env_int(const char *name) {
    const char *v = getenv(name);
    return v ? atoi(v) : -1;
}

/* Every tensor of the learner (online, target, Adam moments, ...), concatenated; *n floats.
 * no_grad: without grad.* (the last update's gradient, which a checkpoint does not hold). */
static float *tensors(fhd_learner *L, int no_grad, uint64_t *n) {
    float *out = NULL;
    *n = 0;
    for (uint32_t i = 0;; i++) {
        fhd_tensor_info ti = FHD_TENSOR_INFO_INIT;
        if (api->tensor_info(L, i, &ti) != FHD_OK)
            break;
        if (no_grad && strncmp(ti.name, "grad.", 5) == 0)
            continue;
        out = realloc(out, sizeof(float) * (*n + ti.count));
        CHECK(api->tensor_read(L, ti.name, out + *n, ti.count) == FHD_OK, "%s: %s", ti.name,
              api->last_error(L));
        *n += ti.count;
    }
    return out;
}
static float *all_tensors(fhd_learner *L, uint64_t *n) {
    return tensors(L, 0, n);
}

static fhd_learner *create(const char *cfg, fhd_error *err, int32_t *rc) {
    fhd_learner *L = NULL;
    *rc = api->init(cfg, strlen(cfg), &L, err);
    return L;
}

/* Transition t of a deterministic stream: 4-d observations, 3 actions. */
static void transition(uint32_t t, float *obs, int32_t *a, float *r, float *next, uint8_t *term) {
    uint32_t s = t * 2654435761u + 12345u;
    for (int i = 0; i < 4; i++) {
        s = s * 1664525u + 1013904223u;
        obs[i] = (float)(s >> 8) / 16777216.0f - 0.5f;
        s = s * 1664525u + 1013904223u;
        next[i] = (float)(s >> 8) / 16777216.0f - 0.5f;
    }
    *a = (int32_t)(s >> 28) % 3;
    *r = obs[0] - obs[1];
    *term = (s >> 20) % 10 == 0;
}

static const char *equiv_cfg =
    "{\"obs_dim\": 4, \"actions\": [3], \"hidden\": [32, 32], \"batch_size\": %u, "
    "\"replay\": \"uniform\", \"replay_capacity\": 512, \"n_step\": 1, \"num_envs\": 1, "
    "\"learning_starts\": 0, \"lr\": 0.001, \"seed\": 5, \"target_update_interval\": 10%s}";

static fhd_learner *equiv_learner(uint32_t B, int dist) {
    char cfg[1024], d[128] = "";
    if (dist)
        snprintf(d, sizeof d, ", \"distributed\": {\"world_size\": %d}", world);
    snprintf(cfg, sizeof cfg, equiv_cfg, B, d);
    fhd_error err = FHD_ERROR_INIT;
    int32_t rc;
    fhd_learner *L = create(cfg, &err, &rc);
    if (rc != FHD_OK) {
        printf("FAIL rank %d: init: %s %s\n", rank, err.path, err.message);
        exit(1);
    }
    for (uint32_t t = 0; t < 300; t++) {
        float obs[4], next[4], r;
        int32_t a;
        uint8_t term, trunc = 0;
        transition(t, obs, &a, &r, next, &term);
        fhd_transitions tr = FHD_TRANSITIONS_INIT;
        tr.num_envs = 1;
        tr.obs = obs;
        tr.actions = &a;
        tr.rewards = &r;
        tr.next_obs = next;
        tr.terminated = &term;
        tr.truncated = &trunc;
        CHECK(api->observe(L, &tr) == FHD_OK, "observe: %s", api->last_error(L));
    }
    return L;
}

static double max_diff(const float *a, const float *b, uint64_t n) {
    double m = 0;
    for (uint64_t i = 0; i < n; i++)
        m = fmax(m, fabs((double)a[i] - (double)b[i]));
    return m;
}

static void mode_equiv(void) {
    const uint32_t b = 8, U = 30;
    fhd_learner *D = equiv_learner(b, 1), *R = equiv_learner(b * (uint32_t)world, 0),
                *Rb = equiv_learner(b, 0);
    fhd_train_stats sd = FHD_TRAIN_STATS_INIT, sr = FHD_TRAIN_STATS_INIT, sb = FHD_TRAIN_STATS_INIT;
    CHECK(api->train(D, U, &sd) == FHD_OK, "train distributed: %s", api->last_error(D));
    CHECK(api->train(R, U, &sr) == FHD_OK, "train W b: %s", api->last_error(R));
    CHECK(api->train(Rb, U, &sb) == FHD_OK, "train b: %s", api->last_error(Rb));
    uint64_t nd, nr, nb;
    float *pd = all_tensors(D, &nd), *pr = all_tensors(R, &nr), *pb = all_tensors(Rb, &nb);
    CHECK(nd == nr && nd == nb && nd > 0, "tensor sizes %llu %llu %llu", (unsigned long long)nd,
          (unsigned long long)nr, (unsigned long long)nb);
    const double dr = max_diff(pd, pr, nd), db = max_diff(pd, pb, nd), tol = 1e-6;
    printf("rank %d of %d: after %u updates max |W ranks at b - 1 rank at W b| = %.3g, "
           "|W ranks at b - 1 rank at b| = %.3g; loss %.7g vs %.7g\n",
           rank, world, U, dr, db, (double)sd.loss, (double)sr.loss);
    CHECK(dr <= tol, "rank %d: W ranks at batch b differ from one rank at batch W b by %g", rank,
          dr);
    CHECK(db > 100 * tol, "rank %d: one rank at batch b is as close (%g): the test cannot tell",
          rank, db);
    /* the loss of the stats is the mean over the ranks, i.e. over the global batch */
    CHECK(fabsf(sd.loss - sr.loss) <= 1e-5f * fmaxf(1.0f, fabsf(sr.loss)), "loss %g vs %g",
          (double)sd.loss, (double)sr.loss);
    free(pd);
    free(pr);
    free(pb);
    api->destroy(D);
    api->destroy(R);
    api->destroy(Rb);
}

/* A toy environment whose stream depends on the rank: 4-d observations, 3 actions. */
typedef struct {
    float x[4];
    uint32_t s;
    int t;
} toy;
static float toy_rand(toy *e) {
    e->s = e->s * 1664525u + 1013904223u;
    return (float)(e->s >> 8) / 16777216.0f - 0.5f;
}
static void toy_reset(toy *e) {
    for (int i = 0; i < 4; i++)
        e->x[i] = toy_rand(e);
    e->t = 0;
}

/* step() with 2 envs until `updates` updates; check_every > 0: the metrics then. stop_at > 0:
 * rank 1 kills itself at that update. */
static void run_toy(fhd_learner *L, uint64_t updates, uint64_t check_every, uint64_t stop_at) {
    toy env[2] = {{{0}, 1000u + 17u * (uint32_t)rank, 0}, {{0}, 7u + 31u * (uint32_t)rank, 0}};
    float obs[8], fin[8], rew[2];
    uint8_t term[2], trunc[2];
    int32_t act[2];
    for (int e = 0; e < 2; e++) {
        toy_reset(&env[e]);
        memcpy(obs + 4 * e, env[e].x, sizeof env[e].x);
    }
    fhd_train_stats st = FHD_TRAIN_STATS_INIT;
    fhd_step_args a = FHD_STEP_ARGS_INIT;
    a.num_envs = 2;
    a.obs = obs;
    a.actions = act;
    a.stats = &st;
    uint64_t done = 0, checked = 0;
    CHECK(api->step(L, &a) == FHD_OK, "step: %s", api->last_error(L));
    while (done < updates) {
        for (int e = 0; e < 2; e++) {
            toy *v = &env[e];
            v->x[0] += act[e] == 0 ? -0.1f : act[e] == 1 ? 0.0f : 0.1f;
            for (int i = 1; i < 4; i++)
                v->x[i] = 0.8f * v->x[i] + 0.2f * toy_rand(v);
            rew[e] = 1.0f - fabsf(v->x[0]) + 0.1f * v->x[1];
            term[e] = fabsf(v->x[0]) > 1.0f;
            trunc[e] = !term[e] && ++v->t >= 50;
            memcpy(fin + 4 * e, v->x, sizeof v->x);
            if (term[e] || trunc[e])
                toy_reset(v);
            memcpy(obs + 4 * e, v->x, sizeof v->x);
        }
        a.rewards = rew;
        a.terminated = term;
        a.truncated = trunc;
        a.final_obs = fin;
        if (api->step(L, &a) != FHD_OK) {
            CHECK(0, "rank %d: step after %llu updates: %s", rank, (unsigned long long)done,
                  api->last_error(L));
            return;
        }
        done = st.update_index;
        if (stop_at && rank == 1 && done >= stop_at) {
            printf("rank 1 kills itself after %llu updates\n", (unsigned long long)done);
            fflush(stdout);
            raise(SIGKILL);
        }
        if (check_every && done >= checked + check_every) {
            char buf[16384];
            size_t need = 0;
            CHECK(api->metrics(L, buf, sizeof buf, &need) == FHD_OK, "metrics");
            json_t *m = json_loads(buf, 0, NULL), *d = json_object_get(m, "distributed");
            checked = (uint64_t)json_integer_value(json_object_get(d, "checksum_update"));
            CHECK(json_is_true(json_object_get(d, "ranks_agree")) && checked == done &&
                      checked % check_every == 0,
                  "rank %d update %llu: metrics %s", rank, (unsigned long long)done,
                  json_dumps(d, 0));
            json_decref(m);
        }
    }
}

static const char *toy_cfg =
    "{\"obs_dim\": 4, \"actions\": [3], \"hidden\": [32, 32], \"batch_size\": 32, "
    "\"replay\": \"prioritized\", \"replay_capacity\": 4096, \"n_step\": 3, \"num_envs\": 2, "
    "\"learning_starts\": 64, \"train_freq\": 1, \"gradient_steps\": 1, \"lr\": 0.001, "
    "\"spectral_norm\": \"last\", \"seed\": %d, \"target_update_interval\": 100, "
    "\"epsilon_decay_steps\": 500, \"distributed\": {\"world_size\": %d, "
    "\"checksum_interval\": 100}}";

static uint64_t state_hash(fhd_learner *L, int no_grad) {
    uint64_t n, h = 0xcbf29ce484222325ull;
    float *p = tensors(L, no_grad, &n);
    const unsigned char *c = (const unsigned char *)p;
    for (uint64_t i = 0; i < 4 * n; i++)
        h = (h ^ c[i]) * 0x100000001b3ull;
    free(p);
    return h;
}

/* Rank 0 saves the shared state, every rank its own state with its replay shard; learners
 * restored from them match (docs/design.md section 10, Checkpoints). */
static void checkpoints(fhd_learner *L, const char *cfg) {
    char dir[256] = "/tmp/fhd_dist_XXXXXX", path[300], shared[300];
    if (rank == 0 && !mkdtemp(dir))
        dir[0] = 0;
    MPI_Bcast(dir, sizeof dir, MPI_CHAR, 0, MPI_COMM_WORLD);
    CHECK(dir[0], "mkdtemp");
    snprintf(shared, sizeof shared, "%s/shared.fhd", dir);
    snprintf(path, sizeof path, "%s/rank%d.fhd", dir, rank);
    if (rank == 0)
        CHECK(api->checkpoint_save(L, shared, 0) == FHD_OK, "save: %s", api->last_error(L));
    CHECK(api->checkpoint_save(L, path, FHD_CKPT_INCLUDE_REPLAY) == FHD_OK, "save: %s",
          api->last_error(L));
    MPI_Barrier(MPI_COMM_WORLD);
    const uint64_t h = state_hash(L, 1), h_full = state_hash(L, 0);
    fhd_error err = FHD_ERROR_INIT;
    int32_t rc;
    fhd_learner *S = create(cfg, &err, &rc), *R = create(cfg, &err, &rc);
    CHECK(S && R, "init: %s", err.message);
    if (!S || !R)
        MPI_Abort(MPI_COMM_WORLD, 1);
    CHECK(api->checkpoint_load(S, shared, 0) == FHD_OK, "load shared: %s", api->last_error(S));
    CHECK(state_hash(S, 1) == h, "rank %d: rank 0's checkpoint is not this rank's state", rank);
    CHECK(api->checkpoint_load(R, path, FHD_CKPT_INCLUDE_REPLAY) == FHD_OK, "load own: %s",
          api->last_error(R));
    fhd_train_stats st = FHD_TRAIN_STATS_INIT;
    CHECK(api->train(L, 100, &st) == FHD_OK, "train on: %s", api->last_error(L));
    CHECK(api->train(R, 100, &st) == FHD_OK, "train resumed: %s", api->last_error(R));
    const uint64_t hl = state_hash(L, 0), hr = state_hash(R, 0);
    uint64_t all[64];
    MPI_Allgather(&hr, 1, MPI_UINT64_T, all, 1, MPI_UINT64_T, MPI_COMM_WORLD);
    CHECK(hl == hr && hl != h_full, "rank %d: the resumed learner's 100 updates differ", rank);
    for (int r = 0; r < world; r++)
        CHECK(all[r] == all[0], "resumed rank %d differs from resumed rank 0", r);
    api->destroy(S);
    api->destroy(R);
    MPI_Barrier(MPI_COMM_WORLD);
    remove(path);
    if (rank == 0) {
        remove(shared);
        rmdir(dir);
    }
}

static void mode_lockstep(void) {
    MPI_Init(NULL, NULL);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &world);
    char cfg[1024];
    snprintf(cfg, sizeof cfg, toy_cfg, 3, world);
    fhd_error err = FHD_ERROR_INIT;
    int32_t rc;
    fhd_learner *L = create(cfg, &err, &rc);
    CHECK(rc == FHD_OK, "init: %s", err.message);
    if (rc != FHD_OK)
        MPI_Abort(MPI_COMM_WORLD, 1);
    run_toy(L, 1000, 100, 0);
    /* the test's own check: every tensor's bytes, gathered over the ranks */
    uint64_t n, h = state_hash(L, 0), all[64];
    float *p = all_tensors(L, &n);
    MPI_Allgather(&h, 1, MPI_UINT64_T, all, 1, MPI_UINT64_T, MPI_COMM_WORLD);
    for (int r = 0; r < world; r++)
        CHECK(all[r] == all[0], "rank %d's tensors differ from rank 0's after 1000 updates", r);
    /* the data differed: the ranks' TD errors (rank-local) are not all equal */
    char buf[16384];
    size_t need;
    api->metrics(L, buf, sizeof buf, &need);
    json_t *m = json_loads(buf, 0, NULL);
    double td = json_real_value(json_object_get(m, "td_abs_mean")), tds[64];
    json_decref(m);
    MPI_Allgather(&td, 1, MPI_DOUBLE, tds, 1, MPI_DOUBLE, MPI_COMM_WORLD);
    CHECK(world == 1 || tds[1] != tds[0], "the ranks' TD errors are equal (%g): same data?", td);
    printf("rank %d: 1000 updates, %llu floats of state equal on %d ranks (td_abs_mean %g)\n",
           rank, (unsigned long long)n, world, td);
    free(p);
    checkpoints(L, cfg);
    api->destroy(L);
    MPI_Finalize();
}

static void mode_mismatch(void) {
    const char *variants[2][2] = {{"\"seed\": 3", "\"seed\": 4"},
                                  {"\"hidden\": [32, 32]", "\"hidden\": [32, 16]"}};
    const char *keys[2] = {"$.seed", "$.hidden"};
    for (int v = 0; v < 2; v++) {
        char cfg[1024];
        snprintf(cfg, sizeof cfg,
                 "{\"obs_dim\": 4, \"actions\": [3], %s, %s, \"distributed\": {\"world_size\": "
                 "%d}}",
                 v == 0 ? "\"hidden\": [32, 32]" : variants[1][rank == 1],
                 v == 0 ? variants[0][rank == 1] : "\"seed\": 3", world);
        fhd_error err = FHD_ERROR_INIT;
        int32_t rc;
        fhd_learner *L = create(cfg, &err, &rc);
        printf("rank %d: %s -> %s %s: %s\n", rank, keys[v], api->status_name(rc), err.path,
               err.message);
        CHECK(rc == FHD_ERR_CONFIG_INCONSISTENT && strcmp(err.path, keys[v]) == 0 &&
                  strstr(err.message, "rank 1") != NULL,
              "rank %d: a differing %s gives %s at %s", rank, keys[v], api->status_name(rc),
              err.path);
        api->destroy(L);
    }
    /* and a world_size that is not mpirun's */
    char cfg[256];
    snprintf(cfg, sizeof cfg,
             "{\"obs_dim\": 4, \"actions\": [3], \"distributed\": {\"world_size\": %d}}",
             world + 1);
    fhd_error err = FHD_ERROR_INIT;
    int32_t rc;
    fhd_learner *L = create(cfg, &err, &rc);
    CHECK(rc == FHD_ERR_CONFIG_INCONSISTENT &&
              strcmp(err.path, "$.distributed.world_size") == 0,
          "rank %d: world_size %d under %d ranks gives %s: %s", rank, world + 1, world,
          api->status_name(rc), err.message);
    api->destroy(L);
}

static void mode_kill(void) {
    char cfg[1024];
    snprintf(cfg, sizeof cfg, toy_cfg, 3, world);
    fhd_error err = FHD_ERROR_INIT;
    int32_t rc;
    fhd_learner *L = create(cfg, &err, &rc);
    CHECK(rc == FHD_OK, "init: %s", err.message);
    if (L)
        run_toy(L, 1000000, 0, 50);
    printf("rank %d: training went on without rank 1\n", rank);
    exit(1);
}

static void expect(const char *cfg, int32_t code, const char *path, const char *needle) {
    fhd_error err = FHD_ERROR_INIT;
    int32_t rc;
    fhd_learner *L = create(cfg, &err, &rc);
    printf("%s -> %s %s: %s\n", cfg, api->status_name(rc), err.path, err.message);
    CHECK(rc == code && strcmp(err.path, path) == 0 && strstr(err.message, needle),
          "%s gives %s at %s: %s", cfg, api->status_name(rc), err.path, err.message);
    api->destroy(L);
}

static void mode_refusals(void) {
    expect("{\"obs_dim\": 4, \"actions\": [3], \"distributed\": {\"rank\": 0, \"world_size\": 2}}",
           FHD_ERR_CONFIG_UNKNOWN_KEY, "$.distributed.rank", "comes from MPI");
    expect("{\"obs_dim\": 4, \"actions\": [3], \"distributed\": {\"world_size\": 0}}",
           FHD_ERR_CONFIG_RANGE, "$.distributed.world_size", "out of range");
    expect("{\"obs_dim\": 4, \"actions\": [3], \"distributed\": 2}", FHD_ERR_CONFIG_TYPE,
           "$.distributed", "object");
#if FHD_CUDA_NCCL
    { /* NCCL built: refused only by what this machine lacks (a device, libnccl.so.2), or, with
       * both, by the singleton's world of 1 */
        const char *cfg = "{\"obs_dim\": 4, \"actions\": [3], \"backend\": \"cuda\", "
                          "\"distributed\": {\"world_size\": 2}}";
        fhd_error err = FHD_ERROR_INIT;
        int32_t rc;
        fhd_learner *L = create(cfg, &err, &rc);
        printf("%s -> %s %s: %s\n", cfg, api->status_name(rc), err.path, err.message);
        CHECK((rc == FHD_ERR_BACKEND_UNAVAILABLE && strcmp(err.path, "$.backend") == 0) ||
                  (rc == FHD_ERR_BACKEND_UNAVAILABLE && strcmp(err.path, "$.distributed") == 0 &&
                   strstr(err.message, "NCCL")) ||
                  (rc == FHD_ERR_CONFIG_INCONSISTENT &&
                   strcmp(err.path, "$.distributed.world_size") == 0),
              "backend cuda with distributed: %s at %s: %s", api->status_name(rc), err.path,
              err.message);
        api->destroy(L);
    }
#else
    expect("{\"obs_dim\": 4, \"actions\": [3], \"backend\": \"cuda\", \"distributed\": "
           "{\"world_size\": 2}}",
           FHD_ERR_BACKEND_UNAVAILABLE, "$.distributed", "no NCCL part");
#endif
    setenv("FHD_MPI_MODULE", "/nonexistent/libfoxhunt_dqn_mpi.so", 1);
    expect("{\"obs_dim\": 4, \"actions\": [3], \"distributed\": {\"world_size\": 1}}",
           FHD_ERR_BACKEND_UNAVAILABLE, "$.distributed", "needs the MPI module");
}

int main(int argc, char **argv) {
    if (argc < 3) {
        printf("usage: test_dist LIBRARY equiv|lockstep|mismatch|kill|refusals\n");
        return 2;
    }
    setvbuf(stdout, NULL, _IOLBF, 0);
    api = fhd_test_load(argv[1], NULL);
    if (strcmp(argv[2], "refusals") == 0) {
        mode_refusals();
        return fhd_test_finish();
    }
    rank = env_int("OMPI_COMM_WORLD_RANK");
    world = env_int("OMPI_COMM_WORLD_SIZE");
    if (rank < 0 || world < 1) {
        printf("test_dist runs under Open MPI's mpirun (run_mpi.sh)\n");
        return 2;
    }
    if (strcmp(argv[2], "equiv") == 0)
        mode_equiv();
    else if (strcmp(argv[2], "lockstep") == 0)
        mode_lockstep();
    else if (strcmp(argv[2], "mismatch") == 0)
        mode_mismatch();
    else if (strcmp(argv[2], "kill") == 0)
        mode_kill();
    else
        return 2;
    return fhd_test_finish();
}
