/* test_faults.c - allocation failure at every allocation site, through the public ABI.
 *
 * The interposed allocator (alloc_shim.c) fails the k-th allocation of one call, for
 * k = 1, 2, ... until the call makes fewer than k allocations and succeeds. Calls swept: init,
 * act, observe, step, train, train_batch, metrics, checkpoint_save (with and without the
 * replay) and checkpoint_load (both flags). Each injection runs in a child process forked from
 * the same starting state, so that one abort cannot hide the others. For every injected
 * failure the child checks:
 *   - a status of the table with a message (FHD_ERR_OUT_OF_MEMORY is expected; another
 *     documented status is counted and printed per status: jansson reports some allocation
 *     failures of its parser as syntax errors, see SECURITY.md);
 *   - nothing leaks: live allocations and open file descriptors are back to their values
 *     before the call (init: *out is NULL, and a second init + destroy frees everything);
 *   - the learner is unchanged (every named tensor, the counters of metrics), a save left the
 *     previous checkpoint byte for byte and no temporary file;
 *   - a call that succeeds despite the failure (absorbed) has the complete result, and every
 *     16th failure is followed by the same call without failures, which must give the result
 *     of a twin learner that never saw a failure.
 * A child killed after an allocation failure injected inside jansson (akheron/jansson#362: its
 * lexer then reads and writes past the token, ending in its assertion, a SIGSEGV or a heap
 * corruption abort) is counted and printed as known; any other crash fails the test. Before the sweeps, one
 * create/train/metrics/save/load/destroy round makes the one-time allocations of OpenBLAS,
 * jansson and the C library, and the live count is back to that baseline at the end.
 * FHD_FAULTS_ONLY=NAME runs only the sweeps whose name starts with NAME.
 *
 * Skipped (77) under AddressSanitizer/ThreadSanitizer: their runtimes own malloc.
 * usage: test_faults LIBRARY SCRATCH_DIR */
#define _GNU_SOURCE
#include <dirent.h>
#include <dlfcn.h>
#include <execinfo.h>
#include <math.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "alloc_shim.h"
#include "fhd_test.h"
#include "fhd_proc.h"
#include "rel_common.h"

static const fhd_api_v1 *api;
static char dir[512];
static int metrics_incomplete; /* set by op_metrics: a success with a key missing */

typedef int32_t (*op_fn)(fhd_learner *L, void *ctx);

static fhd_learner *create(void) {
    return fhd_test_create(api, REL_CONFIG);
}

/* A learner with history: `steps` observe calls, `updates` updates. */
static fhd_learner *learner_at(int steps, uint32_t updates) {
    fhd_learner *L = create();
    for (int s = 0; s < steps; s++)
        if (rel_observe(api, L, s) != FHD_OK) {
            CHECK(0, "observe %d: %s", s, api->last_error(L));
            break;
        }
    if (updates)
        CHECK(api->train(L, updates, NULL) == FHD_OK, "train: %s", api->last_error(L));
    return L;
}

typedef struct sweep_result {
    uint64_t sites;        /* allocations of the successful call */
    uint64_t failures;     /* injected failures reported as FHD_ERR_OUT_OF_MEMORY */
    uint64_t misreported;  /* injected failures reported cleanly, but with another status */
    uint64_t absorbed;     /* injected failures after which the call still did its whole work */
    uint64_t known_aborts; /* aborts inside jansson's lexer (akheron/jansson#362) */
    uint64_t check_failures;
    uint64_t by_status[32]; /* misreported failures by -status */
} sweep_result;

/* Child exit codes of one injection. */
enum {
    K_OOM = 0,         /* failure injected; FHD_ERR_OUT_OF_MEMORY, clean */
    K_CHECK = 1,       /* a check failed (printed) */
    K_ABSORBED = 3,    /* failure injected; the call succeeded with the right result */
    K_DONE = 10,       /* no failure left to inject; the call succeeded with the right result */
    K_CHECK_DONE = 11, /* no failure left to inject, but a check failed (printed) */
    K_OTHER_BASE = 64  /* + (-status): failure injected; another documented status, clean */
};

/* 1 if code address `pc` lies in libjansson. */
static int in_jansson(const void *pc) {
    Dl_info info;
    return pc && dladdr(pc, &info) && info.dli_fname && strstr(info.dli_fname, "libjansson");
}

/* A child's crash handler (SIGSEGV, SIGBUS, SIGABRT): says whether the injected allocation
 * failure was jansson's own and the crash is jansson's (akheron/jansson#362: its lexer then
 * reads and writes past the token, which ends in its assertion or a SIGSEGV with a frame in
 * libjansson, or in glibc's heap-corruption abort at a later free), then dies of the same
 * signal. */
static void crash_handler(int sig) {
    void *frames[32];
    int in_frames = 0;
    const int n = backtrace(frames, 32);
    for (int i = 0; i < n && !in_frames; i++)
        in_frames = in_jansson(frames[i]);
    if ((in_frames || sig == SIGABRT) && in_jansson(alloc_shim_failed_caller())) {
        static const char msg[] = "crash inside libjansson after its allocation failed\n";
        if (write(2, msg, sizeof msg - 1) < 0) {
            /* nothing more to say */
        }
    }
    signal(sig, SIG_DFL);
    raise(sig);
}

static void crash_handler_install(void) {
    void *frame;
    backtrace(&frame, 1); /* loads libgcc's unwinder now, not inside the handler */
    signal(SIGSEGV, crash_handler);
    signal(SIGBUS, crash_handler);
    signal(SIGABRT, crash_handler);
}

static void child_exit(int code) {
    fflush(stdout);
    if (fhd_t_fail)
        code = code == K_DONE ? K_CHECK_DONE : K_CHECK;
    _exit(code);
}

/* Run `body(k)` in a child process; classify the outcome into r. Returns 1 when the sweep is
 * complete (no failure was injected). Failures inside the child are printed there. */
static int run_injection(const char *name, uint64_t k, void (*body)(uint64_t k, void *arg),
                         void *arg, sweep_result *r) {
    int fds[2];
    if (pipe(fds) != 0) {
        CHECK(0, "pipe");
        return 1;
    }
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        close(fds[0]);
        dup2(fds[1], 2);
        fhd_t_pass = fhd_t_fail = 0;
        body(k, arg);
        child_exit(K_CHECK); /* body always exits */
    }
    close(fds[1]);
    char err[4096];
    size_t n = 0;
    ssize_t got;
    while ((got = read(fds[0], err + n, sizeof err - 1 - n)) > 0)
        n += (size_t)got;
    err[n] = '\0';
    close(fds[0]);
    int status = 0;
    waitpid(pid, &status, 0);
    if (WIFSIGNALED(status)) {
        const int sig = WTERMSIG(status);
        const int known =
            (sig == SIGABRT && strstr(err, "Assertion") && strstr(err, "lex_") != NULL) ||
            ((sig == SIGSEGV || sig == SIGBUS || sig == SIGABRT) &&
             strstr(err, "crash inside libjansson after its allocation failed"));
        if (known) {
            r->known_aborts++;
            if (r->known_aborts == 1)
                printf("  %s: failing allocation %llu dies inside jansson's lexer "
                       "(akheron/jansson#362): %s",
                       name, (unsigned long long)k, err);
            return 0;
        }
        CHECK(0, "%s: failing allocation %llu killed the process (signal %d): %s", name,
              (unsigned long long)k, WTERMSIG(status), err);
        return 0;
    }
    const int code = WEXITSTATUS(status);
    if (code > K_OTHER_BASE && code < K_OTHER_BASE + 32) {
        r->misreported++;
        r->by_status[code - K_OTHER_BASE]++;
        fhd_t_pass++;
        return 0;
    }
    switch (code) {
    case K_OOM:
        r->failures++;
        fhd_t_pass++;
        return 0;
    case K_ABSORBED:
        r->absorbed++;
        fhd_t_pass++;
        return 0;
    case K_DONE:
        r->sites = k - 1;
        fhd_t_pass++;
        return 1;
    default:
        CHECK(0, "%s: failing allocation %llu: checks failed in the child (exit %d) %s", name,
              (unsigned long long)k, WEXITSTATUS(status), err);
        /* stop at the end of the call, at an unexpected exit, or after 20 failed children */
        return WEXITSTATUS(status) != K_CHECK || ++r->check_failures >= 20;
    }
}

static void print_result(const char *name, const sweep_result *r) {
    printf("%-26s %5llu allocation sites: %llu x OUT_OF_MEMORY, %llu x another status, "
           "%llu absorbed, %llu aborts in jansson\n",
           name, (unsigned long long)r->sites, (unsigned long long)r->failures,
           (unsigned long long)r->misreported, (unsigned long long)r->absorbed,
           (unsigned long long)r->known_aborts);
    for (int i = 1; i < 32; i++)
        if (r->by_status[i])
            printf("%-26s %5s %llu x %s\n", "", "", (unsigned long long)r->by_status[i],
                   api->status_name(-i));
}

typedef struct op_sweep {
    const char *name;
    fhd_learner *L;
    op_fn op;
    void *ctx;
    const char *file; /* a file the op may replace: unchanged after a failure (or NULL) */
    uint64_t want;    /* fingerprint after the op on the twin */
    uint64_t before;  /* fingerprint of L before the op (every child starts from it) */
    uint32_t seen;    /* statuses already described (bit -status) */
} op_sweep;

static int count_fds(void) {
    DIR *d = opendir("/proc/self/fd");
    int n = 0;
    while (d && readdir(d))
        n++;
    if (d)
        closedir(d);
    return n;
}

static void op_body(uint64_t k, void *arg) {
    op_sweep *w = arg;
    size_t old_len = 0;
    unsigned char *old = w->file ? fhd_test_read_file(w->file, &old_len) : NULL;
    const int fds0 = count_fds();
    const int64_t live0 = alloc_shim_live();
    alloc_shim_arm(k);
    int32_t rc = w->op(w->L, w->ctx);
    alloc_shim_disarm();
    const int injected = alloc_shim_failed();
    const int64_t live1 = alloc_shim_live();
    const int fds1 = count_fds();
    char msg[1024];
    snprintf(msg, sizeof msg, "%s", api->last_error(w->L));
    CHECK(!metrics_incomplete,
          "%s: allocation %llu failed and the call returned FHD_OK with "
          "incomplete output",
          w->name, (unsigned long long)k);
    CHECK(fds1 == fds0, "%s: allocation %llu %s: %d file descriptors leaked", w->name,
          (unsigned long long)k, injected ? "failed" : "not reached", fds1 - fds0);
    if (rc == FHD_OK) {
        CHECK(rel_fingerprint(api, w->L) == w->want,
              "%s: the state after the call (allocation %llu %s) differs from the twin's", w->name,
              (unsigned long long)k, injected ? "failed" : "not reached");
        child_exit(injected ? K_ABSORBED : K_DONE);
    }
    CHECK(injected, "%s failed with no injected failure: %s", w->name, msg);
    CHECK(rc < 0 && rc >= FHD_STATUS_MIN_, "%s: status %d", w->name, rc);
    CHECK(strlen(msg) > 0, "%s: no message", w->name);
    CHECK(live1 == live0, "%s: allocation %llu failed: %lld allocations leaked", w->name,
          (unsigned long long)k, (long long)(live1 - live0));
    CHECK(rel_fingerprint(api, w->L) == w->before,
          "%s: allocation %llu failed (%s): the "
          "learner changed",
          w->name, (unsigned long long)k, msg);
    if (w->file) {
        size_t now_len = 0;
        unsigned char *now = fhd_test_read_file(w->file, &now_len);
        CHECK(now && old && now_len == old_len && memcmp(now, old, old_len) == 0,
              "%s: allocation %llu failed: the previous checkpoint changed", w->name,
              (unsigned long long)k);
        CHECK(fhd_test_count_tmp_files(dir) == 0, "%s: a temporary file was left behind", w->name);
        free(now);
    }
    free(old);
    if (rc != FHD_ERR_OUT_OF_MEMORY && !(w->seen & (1u << (-rc & 31))))
        printf("  %s: failing allocation %llu reported %s: %s\n", w->name, (unsigned long long)k,
               api->status_name(rc), msg);
    /* the learner is unchanged, hence as usable as before; every 16th failure proves it:
     * the same call again gives the twin's result */
    if (k % 16 == 1) {
        int32_t rc2 = w->op(w->L, w->ctx);
        CHECK(rc2 == FHD_OK && rel_fingerprint(api, w->L) == w->want,
              "%s: the call repeated after the failure of allocation %llu: %s", w->name,
              (unsigned long long)k, rc2 == FHD_OK ? "a different result" : api->last_error(w->L));
    }
    child_exit(rc == FHD_ERR_OUT_OF_MEMORY ? K_OOM : K_OTHER_BASE - rc);
}

/* FHD_FAULTS_ONLY=NAME restricts the run to the sweeps whose name starts with NAME. */
static int selected(const char *name) {
    const char *only = getenv("FHD_FAULTS_ONLY");
    return !only || strncmp(name, only, strlen(only)) == 0;
}

/* Sweep op over L (twin: the same op, no failures, gives the expected final state). */
static sweep_result sweep(const char *name, fhd_learner *L, fhd_learner *twin, op_fn op, void *ctx,
                          void *twin_ctx, const char *file) {
    sweep_result r;
    memset(&r, 0, sizeof r);
    if (!selected(name))
        return r;
    CHECK(op(twin, twin_ctx) == FHD_OK, "%s without failures: %s", name, api->last_error(twin));
    op_sweep w = {name, L, op, ctx, file, rel_fingerprint(api, twin), rel_fingerprint(api, L), 0};
    for (uint64_t k = 1; k < 1000000; k++) {
        if (run_injection(name, k, op_body, &w, &r))
            break;
        for (int i = 1; i < 32; i++)
            if (r.by_status[i])
                w.seen |= 1u << i;
    }
    print_result(name, &r);
    return r;
}

/* ---- the operations --------------------------------------------------------------------- */

static int32_t op_act(fhd_learner *L, void *ctx) {
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

static int32_t op_observe(fhd_learner *L, void *ctx) {
    return rel_observe(api, L, *(int *)ctx);
}

static int32_t op_train(fhd_learner *L, void *ctx) {
    (void)ctx;
    fhd_train_stats st = FHD_TRAIN_STATS_INIT;
    return api->train(L, 3, &st);
}

static int32_t op_train_batch(fhd_learner *L, void *ctx) {
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

static int32_t op_step(fhd_learner *L, void *ctx) {
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

typedef struct metrics_ctx {
    char buf[4096];
} metrics_ctx;

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
static int32_t op_metrics(fhd_learner *L, void *ctx) {
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

typedef struct ckpt_ctx {
    const char *path;
    uint32_t flags;
} ckpt_ctx;

static int32_t op_save(fhd_learner *L, void *ctx) {
    ckpt_ctx *c = ctx;
    return api->checkpoint_save(L, c->path, c->flags);
}

static int32_t op_load(fhd_learner *L, void *ctx) {
    ckpt_ctx *c = ctx;
    return api->checkpoint_load(L, c->path, c->flags);
}

/* ---- the sweeps ------------------------------------------------------------------------- */

static void init_body(uint64_t k, void *arg) {
    const uint32_t *seen = arg;
    const int64_t live0 = alloc_shim_live();
    fhd_learner *L = (fhd_learner *)&k;
    fhd_error err = FHD_ERROR_INIT;
    alloc_shim_arm(k);
    int32_t rc = api->init(REL_CONFIG, strlen(REL_CONFIG), &L, &err);
    alloc_shim_disarm();
    const int injected = alloc_shim_failed();
    if (rc == FHD_OK) {
        CHECK(L != NULL, "init succeeded without a learner");
        CHECK(rel_observe(api, L, 0) == FHD_OK && op_act(L, NULL) == FHD_OK,
              "the new learner works: %s", api->last_error(L));
        api->destroy(L);
        CHECK(alloc_shim_live() == live0,
              "init + destroy (allocation %llu %s) leaked %lld "
              "allocations",
              (unsigned long long)k, injected ? "failed" : "not reached",
              (long long)(alloc_shim_live() - live0));
        child_exit(injected ? K_ABSORBED : K_DONE);
    }
    CHECK(injected, "init failed with no injected failure: %s", err.message);
    CHECK(L == NULL, "init failed but *out is not NULL");
    CHECK(err.code == rc && strlen(err.message) > 0, "init: err.code %d, message \"%s\"", err.code,
          err.message);
    CHECK(alloc_shim_live() == live0,
          "init: allocation %llu failed (%s): %lld allocations "
          "leaked",
          (unsigned long long)k, err.message, (long long)(alloc_shim_live() - live0));
    if (rc != FHD_ERR_OUT_OF_MEMORY && !(*seen & (1u << (-rc & 31))))
        printf("  init: failing allocation %llu reported %s: %s\n", (unsigned long long)k,
               api->status_name(rc), err.message);
    /* nothing is left in a bad state: init again works, and destroy frees everything */
    CHECK(api->init(REL_CONFIG, strlen(REL_CONFIG), &L, &err) == FHD_OK, "init again: %s",
          err.message);
    api->destroy(L);
    CHECK(alloc_shim_live() == live0, "init again + destroy leaked %lld allocations",
          (long long)(alloc_shim_live() - live0));
    child_exit(rc == FHD_ERR_OUT_OF_MEMORY ? K_OOM : K_OTHER_BASE - rc);
}

static void sweep_init(int64_t base) {
    sweep_result r;
    memset(&r, 0, sizeof r);
    if (!selected("init"))
        return;
    uint32_t seen = 0;
    for (uint64_t k = 1; k < 1000000; k++) {
        if (run_injection("init", k, init_body, &seen, &r))
            break;
        for (int i = 1; i < 32; i++)
            if (r.by_status[i])
                seen |= 1u << i;
    }
    CHECK(alloc_shim_live() == base, "live allocations %lld after the init sweep; %lld before",
          (long long)alloc_shim_live(), (long long)base);
    print_result("init", &r);
    CHECK(r.sites > 10, "init makes %llu allocations; too few for the sweep to mean anything",
          (unsigned long long)r.sites);
}

static void sweep_all(int64_t base) {
    int step_index = 40;
    /* act, observe, step, train, train_batch: the hot path (each call may allocate nothing) */
    struct {
        const char *name;
        op_fn op;
        void *ctx;
    } hot[] = {{"act", op_act, NULL},
               {"observe", op_observe, &step_index},
               {"step", op_step, NULL},
               {"train", op_train, NULL},
               {"train_batch", op_train_batch, NULL}};
    for (size_t i = 0; i < sizeof hot / sizeof hot[0]; i++) {
        fhd_learner *L = learner_at(40, 4), *T = learner_at(40, 4);
        CHECK(rel_fingerprint(api, L) == rel_fingerprint(api, T), "twins differ");
        sweep(hot[i].name, L, T, hot[i].op, hot[i].ctx, hot[i].ctx, NULL);
        api->destroy(L);
        api->destroy(T);
    }
    metrics_ctx mc;
    fhd_learner *L = learner_at(40, 4), *T = learner_at(40, 4);
    metrics_ctx mt;
    sweep_result r = sweep("metrics", L, T, op_metrics, &mc, &mt, NULL);
    CHECK(r.sites > 5 || !selected("metrics"), "metrics allocates (jansson): %llu sites seen",
          (unsigned long long)r.sites);
    api->destroy(L);
    api->destroy(T);

    /* checkpoints: the target path holds an older checkpoint, which a failure must keep */
    char path[600], src[600];
    snprintf(path, sizeof path, "%s/faults.safetensors", dir);
    snprintf(src, sizeof src, "%s/faults_src.safetensors", dir);
    fhd_learner *old = learner_at(10, 1);
    int32_t rc = api->checkpoint_save(old, path, FHD_CKPT_INCLUDE_REPLAY);
    api->destroy(old);
    if (rc == FHD_ERR_NOT_IMPLEMENTED) {
        printf("SKIP checkpoint save/load sweeps: checkpoints are not implemented in this build\n");
        return;
    }
    CHECK(rc == FHD_OK, "save: %s", api->status_name(rc));
    for (uint32_t flags = 0; flags <= FHD_CKPT_INCLUDE_REPLAY; flags++) {
        ckpt_ctx c = {path, flags};
        L = learner_at(40, 4);
        T = learner_at(40, 4);
        /* the twin writes elsewhere: its file is compared with the final one below */
        char tpath[640];
        snprintf(tpath, sizeof tpath, "%s/faults_twin.safetensors", dir);
        ckpt_ctx tc = {tpath, flags};
        sweep(flags ? "checkpoint_save (replay)" : "checkpoint_save", L, T, op_save, &c, &tc, path);
        size_t a_len = 0, b_len = 0;
        unsigned char *a = fhd_test_read_file(path, &a_len), *b = fhd_test_read_file(tpath, &b_len);
        CHECK(!selected("checkpoint_save") ||
                  (a && b && a_len == b_len && memcmp(a, b, a_len) == 0),
              "the checkpoint saved after the failures differs from the twin's");
        free(a);
        free(b);
        api->destroy(L);
        api->destroy(T);
    }
    /* load: state A from a file into learners in state B */
    fhd_learner *A = learner_at(30, 2);
    CHECK(api->checkpoint_save(A, src, FHD_CKPT_INCLUDE_REPLAY) == FHD_OK, "save A: %s",
          api->last_error(A));
    api->destroy(A);
    for (uint32_t flags = 0; flags <= FHD_CKPT_INCLUDE_REPLAY; flags++) {
        ckpt_ctx c = {src, flags};
        L = learner_at(40, 4);
        T = learner_at(40, 4);
        sweep(flags ? "checkpoint_load (replay)" : "checkpoint_load", L, T, op_load, &c, &c, NULL);
        CHECK(rel_observe(api, L, 3) == FHD_OK && api->train(L, 2, NULL) == FHD_OK,
              "the learner trains after the load sweep: %s", api->last_error(L));
        api->destroy(L);
        api->destroy(T);
    }
    CHECK(alloc_shim_live() == base, "live allocations %lld after all sweeps; %lld before",
          (long long)alloc_shim_live(), (long long)base);
}

int main(int argc, char **argv) {
    if (argc < 3) {
        printf("usage: test_faults LIBRARY SCRATCH_DIR\n");
        return 2;
    }
    if (!alloc_shim_available()) {
        printf("SKIP: the interposed allocator cannot run under a sanitizer that owns malloc\n");
        return 77;
    }
    setenv("OPENBLAS_NUM_THREADS", "1", 1); /* no allocations from other threads */
    crash_handler_install();
    /* thousands of saves: on /dev/shm their fsyncs cost nothing */
    const char *where = access("/dev/shm", W_OK) == 0 ? "/dev/shm" : argv[2];
    snprintf(dir, sizeof dir, "%s/fhd_faults.XXXXXX", where);
    mkdir(argv[2], 0755);
    if (!mkdtemp(dir)) {
        printf("FAIL cannot create a directory under %s\n", argv[2]);
        return 1;
    }
    /* stdout's buffer is allocated by the first output: before any count is taken */
    printf("allocation failure at every allocation site of %s\n", argv[1]);
    fflush(stdout);
    api = fhd_test_load(argv[1], NULL);

    /* warm-up: one-time allocations of the libraries happen here, not in the sweeps */
    char warm[600];
    snprintf(warm, sizeof warm, "%s/warm.safetensors", dir);
    fhd_learner *W = learner_at(40, 4);
    metrics_ctx mc;
    CHECK(op_metrics(W, &mc) == FHD_OK, "warm-up metrics");
    CHECK(op_act(W, NULL) == FHD_OK && op_step(W, NULL) == FHD_OK, "warm-up act/step");
    if (api->checkpoint_save(W, warm, FHD_CKPT_INCLUDE_REPLAY) == FHD_OK)
        CHECK(api->checkpoint_load(W, warm, FHD_CKPT_INCLUDE_REPLAY) == FHD_OK, "warm-up load");
    api->destroy(W);
    unlink(warm);

    const int64_t base = alloc_shim_live();
    const uint64_t total0 = alloc_shim_total();
    sweep_init(base);
    sweep_all(base);
    printf("%llu allocations made in all; live allocations back to the baseline: %s\n",
           (unsigned long long)(alloc_shim_total() - total0),
           alloc_shim_live() == base ? "yes" : "no");
    char cmd[700];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    CHECK(system(cmd) == 0, "cleanup");
    return fhd_test_finish();
}
