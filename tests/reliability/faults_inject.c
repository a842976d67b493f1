/* faults_inject.c - the injection harness of test_faults: runs one injection (the k-th
 * allocation of a call fails) in a child process forked from the same starting state and
 * classifies how the child ended; op_body is the child of a sweep over one operation (status,
 * leaks, file descriptors, unchanged learner and checkpoint, the twin's result after a
 * success); sweep drives k = 1, 2, ... until the call succeeds without a failure. */
#define _GNU_SOURCE
#include <dirent.h>
#include <dlfcn.h>
#include <execinfo.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include "faults.h"

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

void crash_handler_install(void) {
    void *frame;
    backtrace(&frame, 1); /* loads libgcc's unwinder now, not inside the handler */
    signal(SIGSEGV, crash_handler);
    signal(SIGBUS, crash_handler);
    signal(SIGABRT, crash_handler);
}

void child_exit(int code) {
    fflush(stdout);
    if (fhd_t_fail)
        code = code == K_DONE ? K_CHECK_DONE : K_CHECK;
    _exit(code);
}

/* Run `body(k)` in a child process; classify the outcome into r. Returns 1 when the sweep is
 * complete (no failure was injected). Failures inside the child are printed there. */
int run_injection(const char *name, uint64_t k, void (*body)(uint64_t k, void *arg), void *arg,
                  sweep_result *r) {
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

void print_result(const char *name, const sweep_result *r) {
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
int selected(const char *name) {
    const char *only = getenv("FHD_FAULTS_ONLY");
    return !only || strncmp(name, only, strlen(only)) == 0;
}

/* Sweep op over L (twin: the same op, no failures, gives the expected final state). */
sweep_result sweep(const char *name, fhd_learner *L, fhd_learner *twin, op_fn op, void *ctx,
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
