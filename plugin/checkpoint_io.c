/* checkpoint_io.c - CRC-64/XZ, complete reads/writes, atomic file replacement. */
#define _GNU_SOURCE /* mkostemp */
#include "checkpoint_io.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
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

int fhd__atomic_begin(fhd__atomic_file *f, const char *path, const char **what) {
    f->fd = -1;
    f->tmp_path = NULL;
    f->dir_path = dir_of(path);
    size_t n = strlen(path);
    f->tmp_path = malloc(n + sizeof ".tmp.XXXXXX");
    if (!f->dir_path || !f->tmp_path) {
        free(f->dir_path);
        free(f->tmp_path);
        f->dir_path = f->tmp_path = NULL;
        *what = "allocating the temporary file name";
        errno = ENOMEM;
        return -1;
    }
    memcpy(f->tmp_path, path, n);
    memcpy(f->tmp_path + n, ".tmp.XXXXXX", sizeof ".tmp.XXXXXX");
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
    /* mkstemp gives 0600; keep the mode of the file being replaced, else 0644 */
    struct stat st;
    mode_t mode = 0644;
    if (stat(path, &st) == 0 && S_ISREG(st.st_mode))
        mode = st.st_mode & 07777;
    if (fchmod(f->fd, mode) != 0) {
        int e = errno;
        fhd__atomic_abort(f);
        *what = "setting the temporary file's mode";
        errno = e;
        return -1;
    }
    return 0;
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
