/* checkpoint_io.c - CRC-64/XZ, complete reads/writes, atomic file replacement, and the removal
 * of temporary files left by writers that died. */
#define _GNU_SOURCE /* mkostemp */
#include "checkpoint_io.h"

#include <errno.h>
#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

/* ---- CRC-64/XZ, slicing-by-8 ------------------------------------------------------------- */

#define CRC64_POLY_REFLECTED UINT64_C(0xC96C5795D7870F42)

void fhd__crc64_init(fhd__crc64 *c) {
    for (uint32_t i = 0; i < 256; i++) {
        uint64_t r = i;
        for (int k = 0; k < 8; k++)
            r = (r & 1) ? (r >> 1) ^ CRC64_POLY_REFLECTED : r >> 1;
        c->table[0][i] = r;
    }
    for (uint32_t i = 0; i < 256; i++)
        for (int k = 1; k < 8; k++)
            c->table[k][i] = (c->table[k - 1][i] >> 8) ^ c->table[0][c->table[k - 1][i] & 0xff];
}

uint64_t fhd__crc64_update(const fhd__crc64 *c, uint64_t crc, const void *data, size_t n) {
    const unsigned char *p = (const unsigned char *)data;
    uint64_t r = ~crc;
    while (n >= 8) {
        /* little-endian load, independent of the host's byte order */
        uint64_t w = (uint64_t)p[0] | (uint64_t)p[1] << 8 | (uint64_t)p[2] << 16 |
                     (uint64_t)p[3] << 24 | (uint64_t)p[4] << 32 | (uint64_t)p[5] << 40 |
                     (uint64_t)p[6] << 48 | (uint64_t)p[7] << 56;
        r ^= w;
        r = c->table[7][r & 0xff] ^ c->table[6][(r >> 8) & 0xff] ^ c->table[5][(r >> 16) & 0xff] ^
            c->table[4][(r >> 24) & 0xff] ^ c->table[3][(r >> 32) & 0xff] ^
            c->table[2][(r >> 40) & 0xff] ^ c->table[1][(r >> 48) & 0xff] ^ c->table[0][r >> 56];
        p += 8;
        n -= 8;
    }
    while (n--)
        r = c->table[0][(r ^ *p++) & 0xff] ^ (r >> 8);
    return ~r;
}

/* ---- complete transfers ------------------------------------------------------------------- */

int fhd__pwrite_all(int fd, const void *buf, size_t n, uint64_t offset) {
    const char *p = (const char *)buf;
    while (n > 0) {
        ssize_t w = pwrite(fd, p, n, (off_t)offset);
        if (w < 0) {
            if (errno == EINTR)
                continue;
            return -1;
        }
        if (w == 0) {
            errno = EIO;
            return -1;
        }
        p += w;
        n -= (size_t)w;
        offset += (uint64_t)w;
    }
    return 0;
}

int fhd__pread_all(int fd, void *buf, size_t n, uint64_t offset) {
    char *p = (char *)buf;
    while (n > 0) {
        ssize_t r = pread(fd, p, n, (off_t)offset);
        if (r < 0) {
            if (errno == EINTR)
                continue;
            return -1;
        }
        if (r == 0) {
            errno = 0; /* the file ended early */
            return -1;
        }
        p += r;
        n -= (size_t)r;
        offset += (uint64_t)r;
    }
    return 0;
}

/* ---- atomic replacement ------------------------------------------------------------------- */

static char *dir_of(const char *path) {
    const char *slash = strrchr(path, '/');
    if (!slash)
        return strdup(".");
    if (slash == path)
        return strdup("/");
    size_t n = (size_t)(slash - path);
    char *d = malloc(n + 1);
    if (d) {
        memcpy(d, path, n);
        d[n] = '\0';
    }
    return d;
}

/* The process's umask without changing it (umask(2) sets it, a race with other threads):
 * Linux 4.7+ reports it in /proc/self/status; elsewhere the common 022 is assumed. */
static mode_t current_umask(void) {
    FILE *f = fopen("/proc/self/status", "re");
    char line[256];
    unsigned long m = 022;
    while (f && fgets(line, sizeof line, f))
        if (sscanf(line, "Umask: %lo", &m) == 1)
            break;
    if (f)
        fclose(f);
    return (mode_t)(m & 0777);
}

int fhd__atomic_begin(fhd__atomic_file *f, const char *path, const char **what) {
    f->fd = -1;
    f->tmp_path = NULL;
    f->dir_path = dir_of(path);
    size_t n = strlen(path);
    const size_t cap = n + sizeof ".tmp." + 24 + sizeof ".XXXXXX";
    f->tmp_path = malloc(cap);
    if (!f->dir_path || !f->tmp_path) {
        free(f->dir_path);
        free(f->tmp_path);
        f->dir_path = f->tmp_path = NULL;
        *what = "allocating the temporary file name";
        errno = ENOMEM;
        return -1;
    }
    /* "<path>.tmp.<pid>.XXXXXX", locked (flock) while it is written: a later save or load of
     * `path` removes it if this process dies (fhd__atomic_remove_stale). A cleaner may open
     * and remove the file between mkostemp and flock; then it is gone (no link) and is made
     * again. */
    for (int attempt = 0;; attempt++) {
        snprintf(f->tmp_path, cap, "%s.tmp.%ld.XXXXXX", path, (long)getpid());
        f->fd = mkostemp(f->tmp_path, O_CLOEXEC);
        if (f->fd < 0) {
            int e = errno;
            free(f->dir_path);
            free(f->tmp_path);
            f->dir_path = f->tmp_path = NULL;
            *what = "creating the temporary file";
            errno = e;
            return -1;
        }
        struct stat self;
        if (flock(f->fd, LOCK_EX) != 0 || fstat(f->fd, &self) != 0 || self.st_nlink > 0 ||
            attempt == 3)
            break; /* no flock on this file system: the pid in the name still protects it */
        close(f->fd);
        f->fd = -1;
    }
    /* mkstemp gives 0600. The permission bits of the file being replaced (never its
     * setuid/setgid/sticky bits), else those of a new file: 0666 less the umask. */
    struct stat st;
    mode_t mode = 0666 & ~current_umask();
    if (stat(path, &st) == 0 && S_ISREG(st.st_mode))
        mode = st.st_mode & 0777;
    if (fchmod(f->fd, mode) != 0) {
        int e = errno;
        fhd__atomic_abort(f);
        *what = "setting the temporary file's mode";
        errno = e;
        return -1;
    }
    return 0;
}

/* "<digits>.<6 characters of mkstemp>" after the prefix; the pid, or 0 when the rest does not
 * have that form. */
static long temp_pid(const char *rest) {
    long pid = 0;
    const char *p = rest;
    for (; *p >= '0' && *p <= '9' && p - rest < 10; p++)
        pid = pid * 10 + (*p - '0');
    if (p == rest || *p != '.' || strlen(p + 1) != 6)
        return 0;
    for (const char *q = p + 1; *q; q++)
        if (!((*q >= '0' && *q <= '9') || (*q >= 'a' && *q <= 'z') || (*q >= 'A' && *q <= 'Z')))
            return 0;
    return pid;
}

int fhd__atomic_remove_stale(const char *path) {
    char *dir = dir_of(path);
    const char *slash = strrchr(path, '/');
    const char *base = slash ? slash + 1 : path;
    const size_t bn = strlen(base);
    DIR *d = dir && *base ? opendir(dir) : NULL;
    int removed = 0;
    const long self = (long)getpid();
    for (struct dirent *e; d && (e = readdir(d)) != NULL;) {
        if (strncmp(e->d_name, base, bn) != 0 || strncmp(e->d_name + bn, ".tmp.", 5) != 0)
            continue;
        const long pid = temp_pid(e->d_name + bn + 5);
        /* this process's own (another thread may be saving), or a writer that is alive */
        if (pid <= 0 || pid == self || kill((pid_t)pid, 0) == 0 || errno != ESRCH)
            continue;
        /* the pid may belong to another pid namespace: a live writer holds the lock */
        int fd = openat(dirfd(d), e->d_name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
        struct stat a, b;
        if (fd < 0)
            continue;
        if (fstat(fd, &a) == 0 && S_ISREG(a.st_mode) && flock(fd, LOCK_EX | LOCK_NB) == 0 &&
            fstatat(dirfd(d), e->d_name, &b, AT_SYMLINK_NOFOLLOW) == 0 && a.st_dev == b.st_dev &&
            a.st_ino == b.st_ino && unlinkat(dirfd(d), e->d_name, 0) == 0)
            removed++;
        close(fd);
    }
    if (d)
        closedir(d);
    free(dir);
    return removed;
}

void fhd__atomic_abort(fhd__atomic_file *f) {
    int e = errno;
    if (f->fd >= 0)
        close(f->fd);
    if (f->tmp_path)
        unlink(f->tmp_path);
    free(f->tmp_path);
    free(f->dir_path);
    f->fd = -1;
    f->tmp_path = f->dir_path = NULL;
    errno = e;
}

int fhd__atomic_commit(fhd__atomic_file *f, const char *path, const char **what) {
    if (fsync(f->fd) != 0) {
        *what = "fsync of the temporary file";
        fhd__atomic_abort(f);
        return -1;
    }
    int rc = close(f->fd);
    f->fd = -1;
    if (rc != 0) {
        *what = "closing the temporary file";
        fhd__atomic_abort(f);
        return -1;
    }
    if (rename(f->tmp_path, path) != 0) {
        *what = "renaming the temporary file over the target";
        fhd__atomic_abort(f);
        return -1;
    }
    free(f->tmp_path);
    f->tmp_path = NULL; /* renamed: nothing left to remove */
    int dfd = open(f->dir_path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    rc = 0;
    if (dfd < 0) {
        *what = "opening the directory to fsync it (the new checkpoint is in place)";
        rc = -1;
    } else {
        /* some file systems cannot fsync a directory (EINVAL): nothing more can be done */
        if (fsync(dfd) != 0 && errno != EINVAL && errno != EROFS) {
            *what = "fsync of the directory (the new checkpoint is in place)";
            rc = -1;
        }
        int e = errno;
        close(dfd);
        errno = e;
    }
    free(f->dir_path);
    f->dir_path = NULL;
    return rc;
}
