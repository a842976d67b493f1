/* checkpoint_trim.c - the used rows of a checkpoint's replay storage (checkpoint_trim.h). */
#include "checkpoint_trim.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"

static const char *const group_name[3] = {"", "transition slots", "frame rows"};

void fhd__ck_used_rows(const fhd__config *cfg, uint64_t replay_pos, uint64_t replay_size,
                       const uint64_t *fc, fhd__ck_used *out) {
    const uint64_t N = cfg->replay_capacity;
    memset(out, 0, sizeof(*out));
    if (fc) { /* frame id g lives in row g mod M, transition t in slot t mod N */
        const uint64_t M = fhd__config_frame_capacity(cfg);
        out->rows[FHD_CK_ROWS_FRAMES] = fc[0] < M ? fc[0] : M;
        out->rows[FHD_CK_ROWS_SLOTS] = fc[1] < N ? fc[1] : N;
    } else { /* a row ring fills slots [0, size) from slot 0 until it wraps */
        out->rows[FHD_CK_ROWS_SLOTS] =
            replay_size < N && replay_pos == replay_size ? replay_size : N;
    }
}

int32_t fhd__ck_used_of(fhd_learner *L, const fhd__ck_scalars *sc, fhd__ck_used *out) {
    uint64_t fc[3];
    const int frames = L->cfg.num_obs_shape > 0;
    if (frames) {
        int32_t rc = L->ops->read(L->be, FHD_STATE_FRAME_COUNTERS, 0, 3, fc);
        if (rc != FHD_OK)
            return rc;
    }
    fhd__ck_used_rows(&L->cfg, sc->replay_pos, sc->replay_size, frames ? fc : NULL, out);
    return FHD_OK;
}

uint64_t fhd__ck_full_count(const fhd__ck_tensor *t) {
    uint64_t n = t->rows != FHD_CK_ROWS_ALL ? t->full_rows : t->shape[0];
    for (uint32_t d = 1; d < t->rank; d++)
        n *= t->shape[d];
    return t->rank ? n : 1;
}

int fhd__ck_tensor_set_rows(fhd__ck_tensor *t, uint64_t rows) {
    if (t->rows == FHD_CK_ROWS_ALL || t->rank == 0 || rows > t->full_rows)
        return -1;
    t->shape[0] = rows;
    t->count = rows;
    for (uint32_t d = 1; d < t->rank; d++)
        t->count *= t->shape[d];
    t->bytes = t->count * fhd__ck_dtype_size(t->dtype);
    return 0;
}

void fhd__ck_catalog_trim(fhd__ck_catalog *c, const fhd__ck_used *u) {
    uint64_t off = 0;
    for (uint32_t i = 0; i < c->n; i++) {
        fhd__ck_tensor *t = &c->t[i];
        if (t->rows != FHD_CK_ROWS_ALL)
            fhd__ck_tensor_set_rows(t, u->rows[t->rows]);
        t->begin = off;
        off += t->bytes;
        t->end = off;
    }
    c->data_bytes = off;
}

int32_t fhd__ck_trim_check(const fhd__ck_catalog *c, const fhd__config *cfg,
                           const fhd__ck_scalars *sc, char *msg, size_t cap) {
    const int frames = cfg->num_obs_shape > 0;
    const fhd__ck_tensor *fct = frames ? fhd__ck_catalog_find(c, "replay.frame_counters") : NULL;
    if (frames && (!fct || !fct->data || fct->count != 3)) {
        snprintf(msg, cap, "replay.frame_counters: not read");
        return FHD_ERR_INTERNAL;
    }
    uint64_t fc[3] = {0, 0, 0};
    if (fct)
        memcpy(fc, fct->data, sizeof fc);
    fhd__ck_used u;
    fhd__ck_used_rows(cfg, sc->replay_pos, sc->replay_size, frames ? fc : NULL, &u);
    for (uint32_t i = 0; i < c->n; i++) {
        const fhd__ck_tensor *t = &c->t[i];
        if (t->rows == FHD_CK_ROWS_ALL || t->shape[0] == t->full_rows ||
            t->shape[0] == u.rows[t->rows])
            continue;
        if (frames)
            snprintf(msg, cap,
                     "tensor \"%s\" holds %" PRIu64 " of %" PRIu64 " %s, but its counters "
                     "(replay.frame_counters: %" PRIu64 " frames, %" PRIu64 " transitions "
                     "added) give %" PRIu64 " used: a shortened replay tensor must hold "
                     "exactly the used rows or all of them (the file is damaged)",
                     t->name, t->shape[0], t->full_rows, group_name[t->rows], fc[0], fc[1],
                     u.rows[t->rows]);
        else
            snprintf(msg, cap,
                     "tensor \"%s\" holds %" PRIu64 " of %" PRIu64 " %s, but replay.pos %" PRIu64
                     " / replay.size %" PRIu64 " give %" PRIu64 " used: a shortened replay "
                     "tensor must hold exactly the used rows or all of them (the file is "
                     "damaged)",
                     t->name, t->shape[0], t->full_rows, group_name[t->rows], sc->replay_pos,
                     sc->replay_size, u.rows[t->rows]);
        return FHD_ERR_CHECKPOINT_CORRUPT;
    }
    return FHD_OK;
}

int fhd__ck_fill_byte(const fhd__ck_tensor *t) {
    /* a frame row no transition uses has reference FHD_FRAME_NONE (all ones) */
    return t->source == FHD_CK_SRC_BACKEND && t->kind == FHD_STATE_FRAME_REFS ? 0xff : 0;
}

int fhd__ck_tensor_expand(fhd__ck_tensor *t) {
    const uint64_t full = fhd__ck_full_count(t);
    if (t->count == full)
        return 0;
    const size_t es = fhd__ck_dtype_size(t->dtype);
    unsigned char *p = realloc(t->data, (size_t)(full * es));
    if (!p)
        return -1;
    memset(p + t->count * es, fhd__ck_fill_byte(t), (size_t)((full - t->count) * es));
    t->data = p;
    fhd__ck_tensor_set_rows(t, t->full_rows);
    return 0;
}

int32_t fhd__ck_fill_range(fhd_learner *L, const fhd__ck_tensor *t, uint64_t e0, uint64_t e1,
                           unsigned char *buf) {
    const size_t es = fhd__ck_dtype_size(t->dtype);
    const uint64_t per = FHD_CKPT_CHUNK_BYTES / es;
    if (e0 < e1)
        memset(buf, fhd__ck_fill_byte(t), FHD_CKPT_CHUNK_BYTES);
    for (uint64_t e = e0; e < e1; e += per) {
        const uint64_t m = e1 - e < per ? e1 - e : per;
        int32_t rc = L->ops->write(L->be, t->kind, t->offset + e, m, buf);
        if (rc != FHD_OK)
            return rc;
    }
    return FHD_OK;
}

uint64_t fhd__ck_rest_end(const fhd__ck_tensor *t, const fhd__ck_used *mine) {
    const uint64_t full = fhd__ck_full_count(t);
    if (t->rows == FHD_CK_ROWS_ALL || t->full_rows == 0)
        return t->count;
    const uint64_t end = mine->rows[t->rows] * (full / t->full_rows);
    return end > full ? full : end < t->count ? t->count : end;
}
