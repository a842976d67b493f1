/* checkpoint.c - safetensors checkpoints: saving (streamed, atomic) and the ABI entry points.
 *
 * The format (version 1) is described in docs/checkpoints.md; checkpoint_state.c lists the
 * tensors, checkpoint_header.c writes and checks the JSON header, checkpoint_load.c validates
 * and applies a file.
 *
 * Saving streams: the header is written first with placeholder checksums of fixed width, then
 * every tensor is copied out of the learner in chunks of at most 4 MiB (ops->read for backend
 * state) while its CRC-64 is computed, then the header is rewritten in place with the real
 * checksums (the same length). A multi-gigabyte replay buffer therefore needs no second copy
 * in memory; the replay storage is written up to its used rows (checkpoint_trim.h). The file
 * is written as "<path>.tmp.<pid>.XXXXXX" in the target's directory,
 * fsynced, renamed over the target and the directory fsynced: a reader sees the old file or
 * the new one, never a mixture; on failure the temporary file is removed and the old file is
 * intact. A state holding NaN or Inf in a float tensor is refused (FHD_ERR_DIVERGED): the
 * loader refuses such files as damaged, so every file written loads. A save or load of `path`
 * first removes the temporaries of writers of `path` that
 * died (checkpoint_io.h). Saving does not change the learner.
 */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <inttypes.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "checkpoint_header.h"
#include "checkpoint_io.h"
#include "checkpoint_state.h"
#include "checkpoint_trim.h"
#include "learner.h"

#ifndef FHD_VERSION_STRING
#error "FHD_VERSION_STRING must be defined by the build"
#endif

static int host_is_little_endian(void) {
    const uint16_t one = 1;
    unsigned char b;
    memcpy(&b, &one, 1);
    return b == 1;
}

/* The metadata map without checksums. */
static json_t *metadata(fhd_learner *L, int include_replay) {
    char *cfg = fhd__config_to_json(&L->cfg);
    char version[16];
    snprintf(version, sizeof version, "%d", FHD_CKPT_FORMAT_VERSION);
    json_t *m = cfg ? json_pack("{s:s, s:s, s:s, s:s, s:s, s:s, s:s}", "format",
                                FHD_CKPT_FORMAT_NAME, "format_version", version, "library_version",
                                FHD_VERSION_STRING, "backend", L->ops->name, "config", cfg,
                                "includes_replay", include_replay ? "true" : "false",
                                "checksum_algorithm", FHD_CKPT_CHECKSUM_ALGORITHM)
                    : NULL;
    free(cfg);
    return m;
}

typedef struct save_ctx {
    fhd_learner *L;
    const char *path;
    fhd__ck_catalog cat;
    fhd__ck_scalars sc;
    fhd__crc64 *crc;
    unsigned char *buf;
    size_t used;
    uint64_t pos; /* file offset of buf[0] */
    fhd__atomic_file f;
} save_ctx;

static int32_t io_fail(save_ctx *c, const char *what) {
    int e = errno;
    return fhd__fail(c->L, FHD_ERR_IO, "checkpoint_save: %s: %s failed: %s", c->path, what,
                     e ? strerror(e) : "unexpected end of file");
}

static int32_t flush(save_ctx *c) {
    if (c->used && fhd__pwrite_all(c->f.fd, c->buf, c->used, c->pos) != 0)
        return io_fail(c, "writing the temporary file");
    c->pos += c->used;
    c->used = 0;
    return FHD_OK;
}

/* Copy every tensor out of the learner into the file, computing the checksums. */
static int32_t stream_tensors(save_ctx *c) {
    for (uint32_t i = 0; i < c->cat.n; i++) {
        fhd__ck_tensor *t = &c->cat.t[i];
        const size_t es = fhd__ck_dtype_size(t->dtype);
        uint64_t h = 0;
        for (uint64_t e = 0; e < t->count;) {
            if (FHD_CKPT_CHUNK_BYTES - c->used < es) {
                int32_t rc = flush(c);
                if (rc != FHD_OK)
                    return rc;
            }
            uint64_t m = (FHD_CKPT_CHUNK_BYTES - c->used) / es;
            if (m > t->count - e)
                m = t->count - e;
            int32_t rc = fhd__ck_read_elems(c->L, &c->sc, t, e, m, c->buf + c->used);
            if (rc != FHD_OK)
                return fhd__fail(c->L, rc,
                                 "checkpoint_save: reading \"%s\" from the %s backend: %s", t->name,
                                 c->L->ops->name, c->L->ops->error(c->L->be));
            /* the loader refuses NaN/Inf in a float tensor as damage: a diverged state is
             * refused here, so that every file this library writes loads again */
            const float *x = (const float *)(c->buf + c->used);
            for (uint64_t k = 0; t->dtype == FHD_CK_F32 && k < m; k++)
                if (!isfinite(x[k]))
                    return fhd__fail(c->L, FHD_ERR_DIVERGED,
                                     "checkpoint_save: %s: the learner's state is not finite: "
                                     "\"%s\" element %" PRIu64 " is %g (training diverged); "
                                     "nothing was written, the previous checkpoint is intact",
                                     c->path, t->name, e + k, (double)x[k]);
            h = fhd__crc64_update(c->crc, h, c->buf + c->used, (size_t)(m * es));
            c->used += (size_t)(m * es);
            e += m;
        }
        t->crc = h;
    }
    return flush(c);
}

static int32_t save(save_ctx *c, uint32_t flags) {
    fhd_learner *L = c->L;
    const int include_replay = (flags & FHD_CKPT_INCLUDE_REPLAY) != 0;
    int32_t rc = fhd__ck_catalog_build(&L->cfg, &L->lo, include_replay, &c->cat);
    if (rc != FHD_OK)
        return fhd__fail(L, rc, "checkpoint_save: out of memory");
    rc = fhd__ck_scalars_get(L, &c->sc);
    fhd__ck_used used;
    if (rc == FHD_OK && include_replay) /* the replay storage: its used rows only */
        rc = fhd__ck_used_of(L, &c->sc, &used);
    if (rc != FHD_OK)
        return fhd__fail(L, rc, "checkpoint_save: %s", L->ops->error(L->be));
    if (include_replay)
        fhd__ck_catalog_trim(&c->cat, &used);
    c->crc = malloc(sizeof(*c->crc));
    c->buf = malloc(FHD_CKPT_CHUNK_BYTES);
    json_t *meta = metadata(L, include_replay);
    size_t n0 = 0, n1 = 0;
    char *h0 = NULL;
    if (c->crc && meta) {
        fhd__crc64_init(c->crc);
        h0 = fhd__ck_header_write(&c->cat, meta, c->crc, 1, &n0);
    }
    if (!c->buf || !h0) {
        json_decref(meta);
        free(h0);
        return fhd__fail(L, FHD_ERR_OUT_OF_MEMORY, "checkpoint_save: out of memory");
    }
    const char *what = "";
    fhd__atomic_remove_stale(c->path);
    if (fhd__atomic_begin(&c->f, c->path, &what) != 0) {
        json_decref(meta);
        free(h0);
        return io_fail(c, what);
    }
    unsigned char len8[8];
    for (int i = 0; i < 8; i++)
        len8[i] = (unsigned char)((uint64_t)n0 >> (8 * i));
    c->pos = 8 + (uint64_t)n0;
    if (fhd__pwrite_all(c->f.fd, len8, 8, 0) != 0 || fhd__pwrite_all(c->f.fd, h0, n0, 8) != 0)
        rc = io_fail(c, "writing the header");
    else
        rc = stream_tensors(c);
    free(h0);
    char *h1 = NULL;
    if (rc == FHD_OK) {
        h1 = fhd__ck_header_write(&c->cat, meta, c->crc, 0, &n1);
        if (!h1)
            rc = fhd__fail(L, FHD_ERR_OUT_OF_MEMORY, "checkpoint_save: out of memory");
        else if (n1 != n0)
            rc = fhd__fail(L, FHD_ERR_INTERNAL,
                           "checkpoint_save: the header changed length "
                           "(%zu -> %zu bytes)",
                           n0, n1);
        else if (fhd__pwrite_all(c->f.fd, h1, n1, 8) != 0)
            rc = io_fail(c, "rewriting the header with the checksums");
    }
    free(h1);
    json_decref(meta);
    if (rc != FHD_OK) {
        fhd__atomic_abort(&c->f);
        return rc;
    }
    if (fhd__atomic_commit(&c->f, c->path, &what) != 0)
        return io_fail(c, what);
    return FHD_OK;
}

int32_t fhd__checkpoint_save(fhd_learner *L, const char *path, uint32_t flags) {
    if (!path)
        return fhd__fail(L, FHD_ERR_NULL_POINTER, "checkpoint_save: `path` is NULL");
    if (!*path)
        return fhd__fail(L, FHD_ERR_INVALID_ARGUMENT, "checkpoint_save: `path` is empty");
    if (flags & ~FHD_CKPT_INCLUDE_REPLAY)
        return fhd__fail(L, FHD_ERR_INVALID_ARGUMENT,
                         "checkpoint_save: flags is 0x%x; allowed: 0 or FHD_CKPT_INCLUDE_REPLAY "
                         "(0x1)",
                         flags);
    if (!host_is_little_endian())
        return fhd__fail(L, FHD_ERR_NOT_IMPLEMENTED,
                         "checkpoint_save: checkpoints need a little-endian host");
    save_ctx c;
    memset(&c, 0, sizeof c);
    c.L = L;
    c.path = path;
    c.f.fd = -1;
    int32_t rc = save(&c, flags);
    fhd__ck_catalog_free(&c.cat);
    free(c.crc);
    free(c.buf);
    return rc;
}

int32_t fhd__checkpoint_load(fhd_learner *L, const char *path, uint32_t flags) {
    if (!path)
        return fhd__fail(L, FHD_ERR_NULL_POINTER, "checkpoint_load: `path` is NULL");
    if (!*path)
        return fhd__fail(L, FHD_ERR_INVALID_ARGUMENT, "checkpoint_load: `path` is empty");
    if (flags & ~FHD_CKPT_INCLUDE_REPLAY)
        return fhd__fail(L, FHD_ERR_INVALID_ARGUMENT,
                         "checkpoint_load: flags is 0x%x; allowed: 0 or FHD_CKPT_INCLUDE_REPLAY "
                         "(0x1)",
                         flags);
    if (!host_is_little_endian())
        return fhd__fail(L, FHD_ERR_NOT_IMPLEMENTED,
                         "checkpoint_load: checkpoints need a little-endian host");
    fhd__atomic_remove_stale(path); /* temporaries of savers of `path` that died */
    return fhd__ck_load(L, path, flags);
}
