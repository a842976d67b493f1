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
 * corruption abort) is counted and printed as known; any other crash fails the test. Before the
 * sweeps, one create/train/metrics/save/load/destroy round makes the one-time allocations of
 * OpenBLAS, jansson and the C library, and the live count is back to that baseline at the end.
 * FHD_FAULTS_ONLY=NAME runs only the sweeps whose name starts with NAME.
 *
 * This file holds the sweeps and main; the injection harness is in faults_inject.c, the
 * operations swept in faults_ops.c, what they share in faults.h.
 *
 * Skipped (77) under AddressSanitizer/ThreadSanitizer: their runtimes own malloc.
 * usage: test_faults LIBRARY SCRATCH_DIR */
#define _GNU_SOURCE
#include <sys/stat.h>
#include <unistd.h>

#include "faults.h"

int fhd_t_pass, fhd_t_fail; /* fhd_test.h's counters, shared by the files of test_faults */

/* the library's API, the scratch directory, op_metrics' flag (see faults.h) */
const fhd_api_v1 *api;
char dir[512];
int metrics_incomplete;

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
