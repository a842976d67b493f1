/* test_ckpt_atomic.c - saving replaces the checkpoint atomically.
 *
 *   1. SIGKILL: 30 rounds. Each round starts a saver process (this program with --saver) that
 *      loads the checkpoint left by the previous round, then forever: observes one transition
 *      and saves (with a replay of ~8 MiB, so a save takes a while), reporting each finished
 *      save through a pipe. The parent kills it with SIGKILL at a random time and then loads
 *      the checkpoint: it must load, and hold exactly the last reported save or the one that
 *      was being committed (env_steps last or last + 1). Stale temporary files of killed saves
 *      are counted: they never affect the checkpoint, and that load removes them.
 *   2. A save that fails while writing (RLIMIT_FSIZE) or at the rename (the target is a
 *      directory) returns FHD_ERR_IO, removes its temporary file and leaves the old checkpoint.
 *   3. The file mode of an existing checkpoint is kept; a new one is 0644 under umask 022
 *      (test_ckpt_files covers the special bits and other umasks).
 * Usage: test_ckpt_atomic <libfoxhunt_dqn.so> <scratch dir>
 */
#include "ckpt_common.h"

#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>

static const char *cfg =
    "{\"obs_dim\": 64, \"actions\": [4], \"hidden\": [16], \"replay\": \"prioritized\", "
    "\"replay_capacity\": 16384, \"n_step\": 1, \"num_envs\": 1, \"seed\": 11, "
    "\"batch_size\": 8}";

static const fhd_api_v1 *api;
static char dir[512];

static uint64_t env_steps_of(fhd_learner *L) {
    char buf[8192];
    size_t need = 0;
    api->metrics(L, buf, sizeof buf, &need);
    json_t *m = json_loads(buf, 0, NULL);
    uint64_t v = (uint64_t)json_integer_value(json_object_get(m, "env_steps"));
    json_decref(m);
    return v;
}

/* ---- the saver process -------------------------------------------------------------------- */

static int saver(const char *lib, const char *path, int fd) {
    api = fhd_test_load(lib, NULL);
    fhd_learner *L = fhd_test_create(api, cfg);
    if (access(path, F_OK) == 0 &&
        api->checkpoint_load(L, path, FHD_CKPT_INCLUDE_REPLAY) != FHD_OK) {
        fprintf(stderr, "saver: load failed: %s\n", api->last_error(L));
        return 3;
    }
    uint64_t steps = env_steps_of(L);
    if (write(fd, &steps, 8) != 8)
        return 4;
    float obs[64], next[64], r = 1.0f;
    int32_t a = 1;
    uint8_t f = 0;
    for (uint64_t k = 0;; k++) {
        for (int i = 0; i < 64; i++) {
            obs[i] = (float)((k * 31 + (uint64_t)i) % 97) / 97.0f;
            next[i] = obs[i] * 0.5f;
        }
        fhd_transitions t = FHD_TRANSITIONS_INIT;
        t.num_envs = 1;
        t.obs = obs;
        t.actions = &a;
        t.rewards = &r;
        t.next_obs = next;
        t.terminated = &f;
        t.truncated = &f;
        if (api->observe(L, &t) != FHD_OK ||
            api->checkpoint_save(L, path, FHD_CKPT_INCLUDE_REPLAY) != FHD_OK) {
            fprintf(stderr, "saver: %s\n", api->last_error(L));
            return 5;
        }
        steps = env_steps_of(L);
        if (write(fd, &steps, 8) != 8)
            return 4;
    }
}

/* ---- the parent --------------------------------------------------------------------------- */

static int count_temps(const char *name, int remove) {
    DIR *d = opendir(dir);
    int n = 0;
    size_t ln = strlen(name);
    for (struct dirent *e; d && (e = readdir(d));) {
        if (strncmp(e->d_name, name, ln) == 0 && strncmp(e->d_name + ln, ".tmp.", 5) == 0) {
            n++;
            if (remove) {
                char p[1200];
                snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
                unlink(p);
            }
        }
    }
    if (d)
        closedir(d);
    return n;
}

/* Read one 8-byte report, waiting up to timeout_ms. Returns 1, 0 on timeout/EOF. */
static int read_report(int fd, uint64_t *v, int timeout_ms) {
    struct pollfd p = {fd, POLLIN, 0};
    if (poll(&p, 1, timeout_ms) <= 0)
        return 0;
    return read(fd, v, 8) == 8;
}

static void test_sigkill(const char *self, const char *lib) {
    char path[600];
    snprintf(path, sizeof path, "%s/atomic.safetensors", dir);
    unlink(path);
    count_temps("atomic.safetensors", 1);
    fhd_learner *P = fhd_test_create(api, cfg);
    srand(12345);
    enum { ROUNDS = 30 };
    double save_s = 0.1, t0 = ck_now();
    int loaded_ok = 0, newer = 0, stale_temps = 0, saves_total = 0;
    for (int round = 0; round < ROUNDS; round++) {
        int fds[2];
        CHECK(pipe(fds) == 0, "pipe");
        pid_t pid = fork();
        if (pid == 0) {
            close(fds[0]);
            char fdtext[16];
            snprintf(fdtext, sizeof fdtext, "%d", fds[1]);
            execl(self, self, "--saver", lib, path, fdtext, (char *)NULL);
            _exit(127);
        }
        close(fds[1]);
        uint64_t last = 0, v;
        CHECK(read_report(fds[0], &last, 60000), "round %d: the saver did not start", round);
        if (round == 0) { /* calibrate: time three saves */
            double a = ck_now();
            int got = 0;
            for (int k = 0; k < 3 && read_report(fds[0], &v, 60000); k++, got++)
                last = v;
            if (got)
                save_s = (ck_now() - a) / got;
            saves_total += got;
        }
        /* kill at a random point of the next ~2.5 saves */
        double wait = save_s * 2.5 * ((double)rand() / RAND_MAX);
        struct timespec ts = {(time_t)wait, (long)((wait - (double)(time_t)wait) * 1e9)};
        nanosleep(&ts, NULL);
        kill(pid, SIGKILL);
        int status = 0;
        waitpid(pid, &status, 0);
        CHECK(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL,
              "round %d: the saver exited on its own (status %d)", round, status);
        while (read_report(fds[0], &v, 0)) {
            last = v;
            saves_total++;
        }
        close(fds[0]);
        stale_temps += count_temps("atomic.safetensors", 0);
        int32_t rc = api->checkpoint_load(P, path, FHD_CKPT_INCLUDE_REPLAY);
        /* the load removes the killed saver's temporary (issue 34) */
        CHECK(count_temps("atomic.safetensors", 0) == 0,
              "round %d: a temporary file survived the load after the kill", round);
        uint64_t got = rc == FHD_OK ? env_steps_of(P) : 0;
        loaded_ok += rc == FHD_OK;
        newer += rc == FHD_OK && got == last + 1;
        CHECK(rc == FHD_OK && (got == last || got == last + 1),
              "round %d: after SIGKILL the checkpoint %s (env_steps %llu, last reported %llu): %s",
              round, rc == FHD_OK ? "holds the wrong save" : "does not load",
              (unsigned long long)got, (unsigned long long)last, api->last_error(P));
    }
    api->destroy(P);
    printf("SIGKILL: %d rounds, %d saves completed, one save %.0f ms (%d MiB file); checkpoint "
           "intact and loadable after %d/%d kills (%d times the save being committed had "
           "landed); %d stale temporary files from killed saves, each removed by the next load; "
           "%.2f s\n",
           ROUNDS, saves_total, save_s * 1e3, 8, loaded_ok, ROUNDS, newer, stale_temps,
           ck_now() - t0);
    CHECK(stale_temps > 0, "no kill landed inside a save (timing calibration?)");
}

/* ---- failures while saving ------------------------------------------------------------------ */

static void test_failures(void) {
    char path[600], sub[600];
    snprintf(path, sizeof path, "%s/fail.safetensors", dir);
    fhd_learner *L = fhd_test_create(api, cfg);
    CHECK(api->checkpoint_save(L, path, FHD_CKPT_INCLUDE_REPLAY) == FHD_OK, "save: %s",
          api->last_error(L));
    size_t n0 = 0, n1 = 0;
    unsigned char *before = fhd_test_read_file(path, &n0);
    /* change the learner so that a successful save would produce different bytes */
    float o[64] = {0}, r = 2.0f;
    int32_t a = 2;
    uint8_t f = 0;
    fhd_transitions t = FHD_TRANSITIONS_INIT;
    t.num_envs = 1;
    t.obs = o;
    t.actions = &a;
    t.rewards = &r;
    t.next_obs = o;
    t.terminated = &f;
    t.truncated = &f;
    CHECK(api->observe(L, &t) == FHD_OK, "observe");

    /* the file system refuses to grow the temporary file past half the old file (the new
     * one, one transition more, is longer) */
    CHECK(n0 > 4096, "the first checkpoint is %zu bytes", n0);
    signal(SIGXFSZ, SIG_IGN);
    struct rlimit old, lim;
    getrlimit(RLIMIT_FSIZE, &old);
    lim = old;
    lim.rlim_cur = (rlim_t)(n0 / 2);
    setrlimit(RLIMIT_FSIZE, &lim);
    int32_t rc = api->checkpoint_save(L, path, FHD_CKPT_INCLUDE_REPLAY);
    setrlimit(RLIMIT_FSIZE, &old);
    CHECK(rc == FHD_ERR_IO && strstr(api->last_error(L), "File too large"),
          "save past RLIMIT_FSIZE: %s: %s", api->status_name(rc), api->last_error(L));
    CHECK(count_temps("fail.safetensors", 0) == 0, "the temporary file was left behind");
    unsigned char *after = fhd_test_read_file(path, &n1);
    CHECK(after && n0 == n1 && memcmp(before, after, n0) == 0, "the old checkpoint changed");
    free(after);
    fhd_learner *Q = fhd_test_create(api, cfg);
    CHECK(api->checkpoint_load(Q, path, FHD_CKPT_INCLUDE_REPLAY) == FHD_OK, "old checkpoint: %s",
          api->last_error(Q));
    api->destroy(Q);

    /* the rename fails: the target is a directory */
    snprintf(sub, sizeof sub, "%s/isdir.safetensors", dir);
    mkdir(sub, 0755);
    rc = api->checkpoint_save(L, sub, 0);
    CHECK(rc == FHD_ERR_IO && strstr(api->last_error(L), "renaming"),
          "save over a directory: %s: %s", api->status_name(rc), api->last_error(L));
    CHECK(count_temps("isdir.safetensors", 0) == 0, "the temporary file was left behind");
    struct stat st;
    CHECK(stat(sub, &st) == 0 && S_ISDIR(st.st_mode), "the directory was replaced");
    rmdir(sub);

    /* modes: kept for an existing file, 0644 for a new one */
    chmod(path, 0640);
    CHECK(api->checkpoint_save(L, path, 0) == FHD_OK, "save");
    CHECK(stat(path, &st) == 0 && (st.st_mode & 0777) == 0640,
          "mode %o after replacing a 0640 "
          "file",
          (unsigned)(st.st_mode & 0777));
    unlink(path);
    const mode_t mask = umask(022);
    CHECK(api->checkpoint_save(L, path, 0) == FHD_OK, "save");
    umask(mask);
    CHECK(stat(path, &st) == 0 && (st.st_mode & 0777) == 0644, "mode %o of a new file",
          (unsigned)(st.st_mode & 0777));
    free(before);
    api->destroy(L);
}

int main(int argc, char **argv) {
    if (argc == 5 && strcmp(argv[1], "--saver") == 0)
        return saver(argv[2], argv[3], atoi(argv[4]));
    const int rc = ckpt_start(argc, argv, &api, dir, sizeof dir);
    if (rc >= 0)
        return rc;
    char self[1024];
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    if (n <= 0) {
        printf("cannot find this program's path\n");
        return 1;
    }
    self[n] = '\0';
    test_failures();
    test_sigkill(self, argv[1]);
    return fhd_test_finish();
}
