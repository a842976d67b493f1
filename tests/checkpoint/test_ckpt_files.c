/* test_ckpt_files.c - the files a save leaves behind (issue 34, findings 4 and 5).
 *
 *   1. Stale temporaries: a forked child saves in a loop; the parent stops it (SIGSTOP) while
 *      its temporary "<path>.tmp.<pid>.XXXXXX" exists. A save of the same path by the parent
 *      must leave that live writer's file alone; after SIGKILL, the parent's next save must
 *      remove it, and a load removes a second dead writer's file the same way. Files of another
 *      pattern (another path's temporaries, the old "<path>.tmp.XXXXXX") and a dead pid's file
 *      that is still locked by a live process are never removed.
 *   2. Modes: replacing a file of mode 06777 or 01640 keeps the permission bits only (0777,
 *      0640); a new file gets 0666 less the umask (umask 027 -> 0640, 0 -> 0666, 022 -> 0644).
 * Usage: test_ckpt_files <libfoxhunt_dqn.so> <scratch dir>
 */
#include "ckpt_common.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/wait.h>

static const char *cfg =
    "{\"obs_dim\": 64, \"actions\": [4], \"hidden\": [16], \"replay\": \"prioritized\", "
    "\"replay_capacity\": 16384, \"n_step\": 1, \"num_envs\": 1, \"seed\": 5, "
    "\"batch_size\": 8}";

static const fhd_api_v1 *api;
static char dir[512];

/* Name (in dir) of a temporary of `base` whose name holds pid `pid`, or "" when none. */
static int find_temp(const char *base, long pid, char *out, size_t cap) {
    char pre[600];
    snprintf(pre, sizeof pre, "%s.tmp.%ld.", base, pid);
    DIR *d = opendir(dir);
    int found = 0;
    for (struct dirent *e; d && (e = readdir(d));)
        if (strncmp(e->d_name, pre, strlen(pre)) == 0 && strlen(e->d_name) == strlen(pre) + 6) {
            snprintf(out, cap, "%s", e->d_name);
            found = 1;
        }
    if (d)
        closedir(d);
    return found;
}

static int exists(const char *name) {
    char p[1200];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    return access(p, F_OK) == 0;
}

static void touch(const char *name) {
    char p[1200];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    FILE *f = fopen(p, "w");
    if (f) {
        fputs("partial", f);
        fclose(f);
    }
}

/* A pid that is certainly dead: a child that exited and was reaped. */
static long dead_pid(void) {
    pid_t p = fork();
    if (p == 0)
        _exit(0);
    waitpid(p, NULL, 0);
    return (long)p;
}

/* Start a child that saves L to path forever; stop it while its temporary exists. Returns the
 * child's pid, with its temporary's name in tmp. */
static pid_t stopped_saver(fhd_learner *L, const char *path, const char *base, char *tmp,
                           size_t cap) {
    pid_t pid = fork();
    if (pid == 0) {
        for (;;)
            if (api->checkpoint_save(L, path, FHD_CKPT_INCLUDE_REPLAY) != FHD_OK)
                _exit(3);
    }
    for (int tries = 0; tries < 20000; tries++) {
        if (find_temp(base, pid, tmp, cap)) {
            kill(pid, SIGSTOP);
            int st = 0;
            waitpid(pid, &st, WUNTRACED);
            if (find_temp(base, pid, tmp, cap))
                return pid; /* stopped inside a save */
            kill(pid, SIGCONT);
        }
        struct timespec ts = {0, 200000};
        nanosleep(&ts, NULL);
    }
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
    return -1;
}

static void test_stale(void) {
    const char *base = "stale.safetensors";
    char path[700], tmp[700], tmp2[700];
    snprintf(path, sizeof path, "%s/%s", dir, base);
    fhd_learner *L = fhd_test_create(api, cfg);
    CHECK(api->checkpoint_save(L, path, FHD_CKPT_INCLUDE_REPLAY) == FHD_OK, "first save: %s",
          api->last_error(L));

    pid_t child = stopped_saver(L, path, base, tmp, sizeof tmp);
    CHECK(child > 0, "the saver child was never caught inside a save");
    if (child <= 0) {
        api->destroy(L);
        return;
    }
    /* a live (stopped) writer: its temporary stays through a save and a load of the path */
    CHECK(api->checkpoint_save(L, path, 0) == FHD_OK, "save beside a live writer: %s",
          api->last_error(L));
    CHECK(exists(tmp), "a save removed the live writer's temporary %s", tmp);
    CHECK(api->checkpoint_load(L, path, 0) == FHD_OK, "load: %s", api->last_error(L));
    CHECK(exists(tmp), "a load removed the live writer's temporary %s", tmp);

    /* killed inside a save: the next save removes its temporary */
    kill(child, SIGKILL);
    int st = 0;
    waitpid(child, &st, 0);
    CHECK(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL, "the saver ended by itself (%d)", st);
    CHECK(exists(tmp), "the killed saver's temporary %s is already gone", tmp);
    /* decoys: never removed */
    const long dead = dead_pid();
    char other[700], old[700], bad[700], locked[700];
    snprintf(other, sizeof other, "other.safetensors.tmp.%ld.abcDEF", dead);
    snprintf(old, sizeof old, "%s.tmp.Ab12Cd", base);                 /* no pid: an older writer */
    snprintf(bad, sizeof bad, "%s.tmp.%ld.abc", base, dead);          /* not mkstemp's suffix */
    snprintf(locked, sizeof locked, "%s.tmp.%ld.LoCk3d", base, dead); /* dead pid, but locked */
    touch(other);
    touch(old);
    touch(bad);
    touch(locked);
    char lp[1200];
    snprintf(lp, sizeof lp, "%s/%s", dir, locked);
    int lfd = open(lp, O_RDONLY);
    CHECK(lfd >= 0 && flock(lfd, LOCK_EX) == 0, "cannot lock %s", locked);

    double t0 = ck_now();
    CHECK(api->checkpoint_save(L, path, 0) == FHD_OK, "save after the kill: %s",
          api->last_error(L));
    double dt = ck_now() - t0;
    CHECK(!exists(tmp), "the killed saver's temporary %s survived the next save", tmp);
    CHECK(exists(other) && exists(old) && exists(bad), "a file of another pattern was removed");
    CHECK(exists(locked),
          "a locked temporary (a live writer in another pid namespace) was removed");

    /* a second dead writer's temporary (unlocked) is removed by a load */
    snprintf(tmp2, sizeof tmp2, "%s.tmp.%ld.ZZzz99", base, dead);
    touch(tmp2);
    CHECK(api->checkpoint_load(L, path, 0) == FHD_OK, "load: %s", api->last_error(L));
    CHECK(!exists(tmp2), "a load left the dead writer's temporary %s", tmp2);
    CHECK(exists(locked), "a load removed a locked temporary");
    close(lfd); /* the lock holder is gone now: the next save removes it */
    CHECK(api->checkpoint_save(L, path, 0) == FHD_OK, "save: %s", api->last_error(L));
    CHECK(!exists(locked), "an unlocked dead writer's temporary survived");
    printf("stale temporaries: killed saver (pid %ld) left %s; removed by the next save "
           "(%.1f ms); live, locked and foreign files kept\n",
           (long)child, tmp, dt * 1e3);
    const char *decoys[3] = {other, old, bad};
    for (int i = 0; i < 3; i++) {
        char p[1200];
        snprintf(p, sizeof p, "%s/%s", dir, decoys[i]);
        unlink(p);
    }
    api->destroy(L);
}

static unsigned mode_of(const char *path) {
    struct stat st;
    return stat(path, &st) == 0 ? (unsigned)(st.st_mode & 07777) : 0xffffu;
}

static void test_modes(void) {
    char path[700];
    snprintf(path, sizeof path, "%s/modes.safetensors", dir);
    fhd_learner *L = fhd_test_create(api, "{\"obs_dim\": 3, \"actions\": [2], \"seed\": 1}");
    const mode_t saved = umask(022);
    static const struct {
        unsigned before, after;
    } replace[4] = {{06777, 0777}, {01640, 0640}, {04600, 0600}, {0640, 0640}};
    for (int i = 0; i < 4; i++) {
        unlink(path);
        CHECK(api->checkpoint_save(L, path, 0) == FHD_OK, "save: %s", api->last_error(L));
        chmod(path, replace[i].before);
        CHECK(mode_of(path) == replace[i].before, "chmod %o did not take (%o)", replace[i].before,
              mode_of(path));
        CHECK(api->checkpoint_save(L, path, 0) == FHD_OK, "save: %s", api->last_error(L));
        CHECK(mode_of(path) == replace[i].after, "replacing a file of mode %o gave %o; expected %o",
              replace[i].before, mode_of(path), replace[i].after);
    }
    static const struct {
        mode_t mask;
        unsigned mode;
    } fresh[3] = {{027, 0640}, {0, 0666}, {022, 0644}};
    for (int i = 0; i < 3; i++) {
        unlink(path);
        umask(fresh[i].mask);
        CHECK(api->checkpoint_save(L, path, 0) == FHD_OK, "save: %s", api->last_error(L));
        CHECK(mode_of(path) == fresh[i].mode,
              "a new file under umask %03o has mode %o; expected %o", (unsigned)fresh[i].mask,
              mode_of(path), fresh[i].mode);
    }
    umask(saved);
    unlink(path);
    api->destroy(L);
}

int main(int argc, char **argv) {
    const int rc = ckpt_start(argc, argv, &api, dir, sizeof dir);
    if (rc >= 0)
        return rc;
    test_modes();
    test_stale();
    return fhd_test_finish();
}
