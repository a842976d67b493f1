/* test_disk.c - checkpoint_save when the disk is full or the directory cannot be written.
 *
 * Each case saves over a path that already holds a good checkpoint (where the case allows
 * one) and checks: FHD_ERR_IO with a message naming the path and the failed step; the old
 * checkpoint byte for byte intact and still loadable; no temporary file left behind; the
 * learner unchanged and able to save once the cause is gone.
 *
 *   file size limit  setrlimit(RLIMIT_FSIZE) below the checkpoint's size (write fails with
 *                    EFBIG; works as root and in any container);
 *   full file system a 16 KiB tmpfs mounted in a private mount namespace of a child process
 *                    (ENOSPC); skipped with a message where mounting is not permitted;
 *   unwritable dirs  /sys (sysfs refuses new files even to root), /proc/self, a missing
 *                    directory, a path whose parent is a regular file, a path naming a
 *                    directory, a path longer than PATH_MAX; and, when not root, a 0555
 *                    directory. (/dev/full is not used: the save writes a temporary file beside
 *                    the target and renames it, so as root it would replace the device node.)
 * usage: test_disk LIBRARY SCRATCH_DIR */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <sched.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "fhd_test.h"
#include "fhd_proc.h"
#include "rel_common.h"

static const fhd_api_v1 *api;

static fhd_learner *learner_at(int steps, uint32_t updates) {
    fhd_learner *L = fhd_test_create(api, REL_CONFIG);
    for (int s = 0; s < steps; s++)
        CHECK(rel_observe(api, L, s) == FHD_OK, "observe: %s", api->last_error(L));
    if (updates)
        CHECK(api->train(L, updates, NULL) == FHD_OK, "train: %s", api->last_error(L));
    return L;
}

/* A failed save over `path` (in `dir`, holding `old` or nothing) with the learner L. */
static void expect_failed_save(fhd_learner *L, const char *what, const char *dir, const char *path,
                               const unsigned char *old, size_t old_len, const char *needle) {
    const uint64_t before = rel_fingerprint(api, L);
    int32_t rc = api->checkpoint_save(L, path, FHD_CKPT_INCLUDE_REPLAY);
    const char *msg = api->last_error(L);
    CHECK(rc == FHD_ERR_IO, "%s: got %s (%s)", what, api->status_name(rc), msg);
    CHECK(strstr(msg, needle) != NULL, "%s: the message \"%s\" lacks \"%s\"", what, msg, needle);
    printf("%-30s %s: %s\n", what, api->status_name(rc), msg);
    CHECK(rel_fingerprint(api, L) == before, "%s: the learner changed", what);
    if (old) {
        size_t now_len = 0;
        unsigned char *now = fhd_test_read_file(path, &now_len);
        CHECK(now && now_len == old_len && memcmp(now, old, old_len) == 0,
              "%s: the old checkpoint changed", what);
        free(now);
        fhd_learner *R = fhd_test_create(api, REL_CONFIG);
        CHECK(api->checkpoint_load(R, path, 0) == FHD_OK, "%s: the old checkpoint still loads: %s",
              what, api->last_error(R));
        api->destroy(R);
    }
    if (dir)
        CHECK(fhd_test_count_tmp_files(dir) == 0, "%s: a temporary file is left in %s", what, dir);
}

/* RLIMIT_FSIZE below the size of the new checkpoint: write() fails with EFBIG. */
static void test_file_size_limit(const char *dir) {
    char path[600];
    snprintf(path, sizeof path, "%s/limit.safetensors", dir);
    fhd_learner *old = learner_at(10, 1), *L = learner_at(40, 4);
    CHECK(api->checkpoint_save(old, path, 0) == FHD_OK, "save the old checkpoint: %s",
          api->last_error(old));
    size_t old_len = 0;
    unsigned char *old_bytes = fhd_test_read_file(path, &old_len);
    struct rlimit saved, small;
    getrlimit(RLIMIT_FSIZE, &saved);
    small = saved;
    small.rlim_cur = 4096;
    signal(SIGXFSZ, SIG_IGN);
    CHECK(setrlimit(RLIMIT_FSIZE, &small) == 0, "setrlimit: %s", strerror(errno));
    fflush(stdout); /* stdout may be a file: nothing of it is written while the limit holds */
    const uint64_t before = rel_fingerprint(api, L);
    int32_t rc = api->checkpoint_save(L, path, FHD_CKPT_INCLUDE_REPLAY);
    char msg[1024];
    snprintf(msg, sizeof msg, "%s", api->last_error(L));
    setrlimit(RLIMIT_FSIZE, &saved);
    signal(SIGXFSZ, SIG_DFL);
    CHECK(rc == FHD_ERR_IO, "file size limit: got %s (%s)", api->status_name(rc), msg);
    CHECK(strstr(msg, path) && strstr(msg, "File too large"), "message: %s", msg);
    printf("%-30s %s: %s\n", "file size limit (EFBIG)", api->status_name(rc), msg);
    CHECK(rel_fingerprint(api, L) == before, "file size limit: the learner changed");
    size_t now_len = 0;
    unsigned char *now = fhd_test_read_file(path, &now_len);
    CHECK(now && now_len == old_len && memcmp(now, old_bytes, old_len) == 0,
          "file size limit: the old checkpoint changed");
    CHECK(fhd_test_count_tmp_files(dir) == 0, "file size limit: a temporary file is left");
    free(now);
    /* the cause gone, the same learner saves */
    CHECK(api->checkpoint_save(L, path, FHD_CKPT_INCLUDE_REPLAY) == FHD_OK,
          "save after the limit is lifted: %s", api->last_error(L));
    fhd_learner *R = learner_at(0, 0);
    CHECK(api->checkpoint_load(R, path, FHD_CKPT_INCLUDE_REPLAY) == FHD_OK,
          "the new checkpoint loads: %s", api->last_error(R));
    api->destroy(R);
    free(old_bytes);
    api->destroy(old);
    api->destroy(L);
}

static size_t pages(size_t bytes) {
    return (bytes + 4095) / 4096;
}

/* A real ENOSPC: a tmpfs that holds the old checkpoint but not the old and the new one
 * together, mounted in a private mount namespace of a child process. */
static void test_full_tmpfs(const char *scratch) {
    /* the sizes of the two checkpoints */
    char probe[600];
    snprintf(probe, sizeof probe, "%s/size_probe.safetensors", scratch);
    fhd_learner *a = learner_at(10, 1), *b = learner_at(40, 4);
    size_t old_size = 0, new_size = 0;
    api->checkpoint_save(a, probe, 0);
    free(fhd_test_read_file(probe, &old_size));
    api->checkpoint_save(b, probe, FHD_CKPT_INCLUDE_REPLAY);
    free(fhd_test_read_file(probe, &new_size));
    unlink(probe);
    api->destroy(a);
    api->destroy(b);
    char opts[64];
    snprintf(opts, sizeof opts, "size=%zuk,mode=0755", 4 * (pages(old_size) + pages(new_size) - 1));
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        fhd_t_pass = fhd_t_fail = 0;
        char mnt[600];
        snprintf(mnt, sizeof mnt, "%s/tmpfs.XXXXXX", scratch);
        if (!mkdtemp(mnt))
            _exit(3);
        if (unshare(CLONE_NEWNS) != 0 || mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) != 0 ||
            mount("fhd-test", mnt, "tmpfs", MS_NOSUID | MS_NODEV, opts) != 0) {
            printf("SKIP full file system: cannot mount a tmpfs here (%s)\n", strerror(errno));
            fflush(stdout);
            rmdir(mnt);
            _exit(77);
        }
        char path[700];
        snprintf(path, sizeof path, "%s/full.safetensors", mnt);
        fhd_learner *old = learner_at(10, 1), *L = learner_at(40, 4);
        /* the old checkpoint (no replay) fits; the new one (with replay) not beside it */
        CHECK(api->checkpoint_save(old, path, 0) == FHD_OK, "save the old checkpoint: %s",
              api->last_error(old));
        size_t old_len = 0;
        unsigned char *old_bytes = fhd_test_read_file(path, &old_len);
        expect_failed_save(L, "full file system (ENOSPC)", mnt, path, old_bytes, old_len,
                           "No space left on device");
        unlink(path);
        CHECK(api->checkpoint_save(L, path, FHD_CKPT_INCLUDE_REPLAY) == FHD_OK,
              "save once there is room: %s", api->last_error(L));
        free(old_bytes);
        api->destroy(old);
        api->destroy(L);
        umount(mnt);
        rmdir(mnt);
        fflush(stdout);
        _exit(fhd_t_fail ? 1 : 0);
    }
    int status = 0;
    waitpid(pid, &status, 0);
    if (WIFEXITED(status) && WEXITSTATUS(status) == 77)
        return;
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0, "full file system: child status %d",
          status);
}

static void test_unwritable(const char *scratch) {
    fhd_learner *L = learner_at(20, 2);
    expect_failed_save(L, "/sys (sysfs)", NULL, "/sys/fhd_test.safetensors", NULL, 0,
                       "/sys/fhd_test.safetensors");
    expect_failed_save(L, "/proc/self", NULL, "/proc/self/fhd_test.safetensors", NULL, 0,
                       "creating the temporary file");
    char path[700];
    snprintf(path, sizeof path, "%s/no/such/dir/x.safetensors", scratch);
    expect_failed_save(L, "missing directory", NULL, path, NULL, 0, "No such file or directory");
    char file[600];
    snprintf(file, sizeof file, "%s/plain_file", scratch);
    FILE *f = fopen(file, "w");
    fputs("not a directory", f);
    fclose(f);
    snprintf(path, sizeof path, "%s/x.safetensors", file);
    expect_failed_save(L, "parent is a file", NULL, path, NULL, 0, "Not a directory");
    char sub[600];
    snprintf(sub, sizeof sub, "%s/a_directory", scratch);
    mkdir(sub, 0755);
    expect_failed_save(L, "target is a directory", scratch, sub, NULL, 0, "renaming");
    struct stat st;
    CHECK(stat(sub, &st) == 0 && S_ISDIR(st.st_mode), "the directory is still there");
    char *long_path = malloc(5000);
    snprintf(long_path, 5000, "%s/", scratch);
    size_t n = strlen(long_path);
    memset(long_path + n, 'a', 4500 - n);
    long_path[4500] = '\0';
    expect_failed_save(L, "path longer than PATH_MAX", NULL, long_path, NULL, 0,
                       "checkpoint_save: ");
    free(long_path);
    if (geteuid() != 0) {
        char ro[600];
        snprintf(ro, sizeof ro, "%s/read_only", scratch);
        mkdir(ro, 0755);
        snprintf(path, sizeof path, "%s/x.safetensors", ro);
        fhd_learner *old = learner_at(5, 0);
        CHECK(api->checkpoint_save(old, path, 0) == FHD_OK, "save: %s", api->last_error(old));
        api->destroy(old);
        size_t old_len = 0;
        unsigned char *old_bytes = fhd_test_read_file(path, &old_len);
        chmod(ro, 0555);
        expect_failed_save(L, "read-only directory", ro, path, old_bytes, old_len,
                           "Permission denied");
        chmod(ro, 0755);
        free(old_bytes);
    } else {
        printf("%-30s running as root: a 0555 directory does not stop root; /sys and /proc "
               "stand in for it\n",
               "read-only directory");
    }
    api->destroy(L);
}

int main(int argc, char **argv) {
    if (argc < 3) {
        printf("usage: test_disk LIBRARY SCRATCH_DIR\n");
        return 2;
    }
    api = fhd_test_load(argv[1], NULL);
    char scratch[512];
    mkdir(argv[2], 0755);
    snprintf(scratch, sizeof scratch, "%s/disk.XXXXXX", argv[2]);
    if (!mkdtemp(scratch)) {
        printf("FAIL cannot create a directory under %s\n", argv[2]);
        return 1;
    }
    fhd_learner *probe = learner_at(0, 0);
    char p[600];
    snprintf(p, sizeof p, "%s/probe.safetensors", scratch);
    int32_t rc = api->checkpoint_save(probe, p, 0);
    api->destroy(probe);
    if (rc == FHD_ERR_NOT_IMPLEMENTED) {
        printf("SKIP: checkpoints are not implemented in this build\n");
        return 77;
    }
    CHECK(rc == FHD_OK, "a save to a writable directory works: %s", api->status_name(rc));
    unlink(p);
    test_file_size_limit(scratch);
    test_full_tmpfs(scratch);
    test_unwritable(scratch);
    char cmd[700];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", scratch);
    CHECK(system(cmd) == 0, "cleanup");
    return fhd_test_finish();
}
