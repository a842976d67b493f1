/* checkpoint_apply.c - a validated checkpoint written into the learner (step 6 of
 * checkpoint_load.c): the replay (or an empty one), the networks and optimiser, the counters.
 * Nothing here reads the file. */
#define _DEFAULT_SOURCE /* MAP_ANONYMOUS */
#define _POSIX_C_SOURCE 200809L
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "checkpoint_load.h"
#include "priority.h"

#define failf fhd__ck_load_fail

static int32_t backend_fail(load_ctx *c, int32_t rc, const char *what) {
    return failf(c, rc, "%s: %s backend: %s", what, c->L->ops->name, c->L->ops->error(c->L->be));
}

/* Empty the learner's replay, n-step staging and step() state: the state of a new learner.
 * `updates` is kept as the backend's update counter. */
static int32_t reset_replay(load_ctx *c, uint64_t updates, uint64_t skipped) {
    fhd_learner *L = c->L;
    fhd__ck_catalog mine;
    if (fhd__ck_catalog_build(&L->cfg, &L->lo, 1, &mine) != FHD_OK)
        return failf(c, FHD_ERR_OUT_OF_MEMORY, "out of memory");
    /* the storage beyond the learner's used rows is zero already (checkpoint_trim.h) */
    fhd__ck_catalog_trim(&mine, &c->mine);
    /* zeros in chunks from a read-only anonymous mapping: every page is the kernel's zero
     * page, so emptying a replay costs no resident memory (malloc + memset would) */
    void *map = mmap(NULL, FHD_CKPT_CHUNK_BYTES, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    const unsigned char *zero = map == MAP_FAILED ? NULL : (const unsigned char *)map;
    int32_t rc = zero ? FHD_OK : FHD_ERR_OUT_OF_MEMORY;
    for (uint32_t i = 0; i < mine.n && rc == FHD_OK; i++) {
        const fhd__ck_tensor *t = &mine.t[i];
        if (!t->replay_group || t->source == FHD_CK_SRC_SCALAR)
            continue;
        if (t->source == FHD_CK_SRC_FRONT) {
            memset(fhd__ck_field_ptr(L, &c->sc, t->field), 0, (size_t)t->bytes);
            continue;
        }
        const uint64_t per = FHD_CKPT_CHUNK_BYTES / fhd__ck_dtype_size(t->dtype);
        for (uint64_t e = 0; e < t->count && rc == FHD_OK; e += per) {
            uint64_t m = t->count - e < per ? t->count - e : per;
            rc = L->ops->write(L->be, t->kind, e, m, zero);
        }
    }
    fhd__ck_catalog_free(&mine);
    if (zero)
        munmap(map, FHD_CKPT_CHUNK_BYTES);
    if (rc == FHD_ERR_OUT_OF_MEMORY)
        return failf(c, rc, "out of memory");
    L->have_prev = 0;
    fhd__frames_forget(L);
    fhd__backend_scalars bs = {updates, 0, 0, fhd__prio_quantize(1.0), skipped};
    if (rc == FHD_OK)
        rc = L->ops->set_scalars(L->be, &bs);
    return rc == FHD_OK ? FHD_OK : backend_fail(c, rc, "emptying the replay");
}

int32_t fhd__ck_apply_prepare(load_ctx *c) {
    /* the priorities in one write (each write rebuilds the sum tree) */
    for (uint32_t i = 0; c->load_replay && i < c->cat.n; i++) {
        fhd__ck_tensor *t = &c->cat.t[i];
        if (t->source == FHD_CK_SRC_BACKEND && t->kind == FHD_STATE_REPLAY_PRIORITY &&
            fhd__ck_tensor_expand(t) != 0)
            return failf(c, FHD_ERR_OUT_OF_MEMORY,
                         "out of memory for tensor \"%s\"; the learner is unchanged", t->name);
    }
    /* the learner's own used rows: its storage beyond them holds the fill value already */
    fhd__ck_scalars now;
    int32_t rc = fhd__ck_scalars_get(c->L, &now);
    if (rc == FHD_OK)
        rc = fhd__ck_used_of(c->L, &now, &c->mine);
    if (rc != FHD_OK)
        return backend_fail(c, rc, "reading the replay's counters");
    c->fill = malloc(FHD_CKPT_CHUNK_BYTES);
    if (!c->fill)
        return failf(c, FHD_ERR_OUT_OF_MEMORY, "out of memory; the learner is unchanged");
    return FHD_OK;
}

int32_t fhd__ck_apply(load_ctx *c) {
    fhd_learner *L = c->L;
    const fhd__ck_scalars *s = &c->sc;
    int32_t rc;
    if (c->load_replay) {
        /* the staged replay; the priorities first: their write may need memory (the CUDA
         * backend rebuilds the tree on the host), and failing there changes nothing yet. The
         * other writes fail only on a device error. */
        for (uint32_t k = 0; k < 2 * c->cat.n; k++) {
            const fhd__ck_tensor *t = &c->cat.t[k % c->cat.n];
            const int prio =
                t->source == FHD_CK_SRC_BACKEND && t->kind == FHD_STATE_REPLAY_PRIORITY;
            if (!t->replay_group || (k < c->cat.n) != prio)
                continue;
            if (t->source == FHD_CK_SRC_BACKEND) {
                rc = L->ops->write(L->be, t->kind, t->offset, t->count, t->data);
                if (rc == FHD_OK && t->rows != FHD_CK_ROWS_ALL) /* the unused rows */
                    rc = fhd__ck_fill_range(L, t, t->count, fhd__ck_rest_end(t, &c->mine),
                                            c->fill);
                if (rc != FHD_OK)
                    return backend_fail(c, rc,
                                        "writing the replay (the learner's state is now "
                                        "undefined)");
            } else if (t->source == FHD_CK_SRC_FRONT) {
                memcpy(fhd__ck_field_ptr(L, &c->sc, t->field), t->data, (size_t)t->bytes);
            }
        }
        L->have_prev = s->have_prev;
        fhd__frames_forget(L); /* the loaded last_frame ids are not known to be prev_obs's */
    } else {
        rc = reset_replay(c, s->updates, s->skipped);
        if (rc != FHD_OK)
            return rc;
    }
    for (uint32_t i = 0; i < c->cat.n; i++) {
        const fhd__ck_tensor *t = &c->cat.t[i];
        if (t->replay_group)
            continue;
        if (t->source == FHD_CK_SRC_BACKEND) {
            rc = L->ops->write(L->be, t->kind, t->offset, t->count, t->data);
            if (rc != FHD_OK)
                return backend_fail(c, rc,
                                    "applying the checkpoint (the learner's state is now "
                                    "undefined)");
        } else if (t->source == FHD_CK_SRC_FRONT) {
            memcpy(fhd__ck_field_ptr(L, &c->sc, t->field), t->data, (size_t)t->bytes);
        }
    }
    if (c->load_replay) {
        fhd__backend_scalars bs = {s->updates, s->replay_pos, s->replay_size, s->max_priority_q,
                                   s->skipped};
        rc = L->ops->set_scalars(L->be, &bs);
        /* set_scalars with an empty replay forgets the frames too (backend.h), but a frame
         * replay with no live transition may still hold frames the staging refers to (saved
         * before the first n-step transition was stored): their references and counters
         * again */
        for (uint32_t i = 0; rc == FHD_OK && s->replay_size == 0 && i < c->cat.n; i++) {
            const fhd__ck_tensor *t = &c->cat.t[i];
            if (t->source == FHD_CK_SRC_BACKEND &&
                (t->kind == FHD_STATE_FRAME_REFS || t->kind == FHD_STATE_FRAME_COUNTERS)) {
                rc = L->ops->write(L->be, t->kind, t->offset, t->count, t->data);
                if (rc == FHD_OK && t->rows != FHD_CK_ROWS_ALL)
                    rc = fhd__ck_fill_range(L, t, t->count, fhd__ck_full_count(t), c->fill);
            }
        }
        if (rc != FHD_OK)
            return backend_fail(c, rc, "applying the checkpoint's counters");
    }
    L->act_calls = s->explore_counter;
    L->env_steps = s->env_steps;
    L->episodes = s->episodes;
    L->recent_count = s->recent_count;
    L->recent_pos = s->recent_pos;
    L->last_episode_return = s->last_return;
    return FHD_OK;
}

