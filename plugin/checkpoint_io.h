/* checkpoint_io.h - the byte-level pieces of checkpoint files: CRC-64 checksums, complete
 * reads and writes, and the atomic replacement of a file (temporary file in the same
 * directory, fsync, rename, directory fsync).
 *
 * Checksums are CRC-64/XZ (the CRC of xz and of Go's hash/crc64 ECMA table): polynomial
 * 0x42F0E1EBA9EA3693 reflected, initial value and final xor all ones; check value of
 * "123456789" is 0x995DC9BBDF1939FA. Every single-bit error and every burst of up to 64
 * bits is detected. The tables live in the caller's context (no global state, no work in
 * constructors), slicing-by-8: a few GB/s.
 */
#ifndef FHD_CHECKPOINT_IO_H
#define FHD_CHECKPOINT_IO_H

#include <stddef.h>
#include <stdint.h>

typedef struct fhd__crc64 {
    uint64_t table[8][256];
} fhd__crc64;

void fhd__crc64_init(fhd__crc64 *c);
/* CRC of data following a prefix whose CRC is `crc` (0 for the empty prefix):
 * crc(a || b) = fhd__crc64_update(c, fhd__crc64_update(c, 0, a), b). */
uint64_t fhd__crc64_update(const fhd__crc64 *c, uint64_t crc, const void *data, size_t n);

/* Write / read exactly n bytes at `offset` (EINTR and short transfers are retried).
 * Return 0, or -1 with errno set (errno 0 and read: the file ended early). */
int fhd__pwrite_all(int fd, const void *buf, size_t n, uint64_t offset);
int fhd__pread_all(int fd, void *buf, size_t n, uint64_t offset);

/* Atomic replacement of `path`. begin() creates "<path>.tmp.<pid>.XXXXXX" (mkstemp) in the
 * same directory and holds an exclusive flock on it; its mode is the permission bits (0777) of
 * the existing `path`, or 0666 less the umask for a new file. commit() fsyncs it, renames it
 * over `path` and fsyncs the directory; abort() closes and removes it. On failure begin/commit
 * return -1 with errno set and a short description of the failed step in *what; commit
 * removes the temporary file itself when it fails. */
typedef struct fhd__atomic_file {
    int fd;
    char *tmp_path; /* malloc'd */
    char *dir_path; /* malloc'd */
} fhd__atomic_file;

int fhd__atomic_begin(fhd__atomic_file *f, const char *path, const char **what);
int fhd__atomic_commit(fhd__atomic_file *f, const char *path, const char **what);
void fhd__atomic_abort(fhd__atomic_file *f);

/* Remove the temporaries of `path` whose writer died (SIGKILL, power loss of a process): names
 * "<path>.tmp.<pid>.XXXXXX" whose pid is not a live process of this pid namespace, that are
 * regular files and whose flock is free. Never this process's own, never a locked one (a live
 * writer, in any pid namespace); other names (another path's, an older library's
 * "<path>.tmp.XXXXXX") are left alone. Best effort: errors are ignored. Returns the number of
 * files removed. */
int fhd__atomic_remove_stale(const char *path);

#endif
