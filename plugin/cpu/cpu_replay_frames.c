/* cpu_replay_frames.c - the frame-once replay of image observations (configs with
 * obs_shape; docs/design.md section 8).
 *
 * Frames: an observation is k = frame_stack frames stacked along C (k = 1: the whole
 * observation is one frame); each frame is stored once, as frame id g (0, 1, ...) in row
 * g mod M of a ring of M = fhd__config_frame_capacity(cfg) rows of S / k values. The front
 * adds an env's observation when it enters the env's stream and its next observation when the
 * env steps: a next observation that becomes the env's following obs reuses its ids, a next
 * observation that is the obs's stack shifted by one frame stores one new frame, a stack
 * padded with copies of one frame (an episode's start) stores it once, and an episode's true
 * final observation is one more set of frames that only its flushed transitions use.
 * Transitions: number t lives in slot t mod N as (k obs ids, k next ids, action, R, disc).
 * Validity is one watermark: f_ref[row] is the number of the last transition that uses the
 * frame in `row` (as obs or next). When the ring overwrites a frame, every transition numbered
 * up to its f_ref dies (lo moves past it; their priorities become 0), so the live transitions
 * are always the contiguous range [lo, T), and none of them refers to an overwritten frame:
 * not at the ring's edges, not across an n-step window (the obs frame is older than the
 * window), not at an episode's end (the final frame is referenced by the flush). The kill is a
 * superset by at most the transitions emitted while the oldest frame was still referenced
 * (about num_envs x n_step), all of them at the old end. A transition whose frames left the
 * ring before it was stored (an env kept invalid while the others filled the ring) is dropped.
 * Bytes: M frames of S / k values + 16 k bytes of ids per slot, M = N + max(N / 32,
 * 2 k num_envs (n_step + 1) + 1).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cpu_internal.h"

void fhd__cpu_frames_alloc(fhd__backend *b, int *ok) {
    const uint64_t N = b->capacity;
    b->frames = 1;
    b->fk = b->cfg.frame_stack ? b->cfg.frame_stack : 1;
    b->fbytes = b->ob / b->fk;
    b->M = fhd__config_frame_capacity(&b->cfg);
    /* zero, f_ref FHD_FRAME_NONE: what a checkpoint leaves out of the rows never written */
    b->f_rows = *ok ? calloc((size_t)b->M, (size_t)b->fbytes) : NULL;
    b->f_ref = *ok ? malloc(sizeof(uint64_t) * b->M) : NULL;
    b->t_obs = *ok ? calloc(N * b->fk, sizeof(uint64_t)) : NULL;
    b->t_next = *ok ? calloc(N * b->fk, sizeof(uint64_t)) : NULL;
    if (!b->f_rows || !b->f_ref || !b->t_obs || !b->t_next) {
        *ok = 0;
        return;
    }
    for (uint64_t i = 0; i < b->M; i++)
        b->f_ref[i] = FHD_FRAME_NONE;
}

void fhd__cpu_frames_free(fhd__backend *b) {
    free(b->f_rows);
    free(b->f_ref);
    free(b->t_obs);
    free(b->t_next);
}

/* Transitions numbered below x die (lo <= x <= T). */
static void kill_below(fhd__backend *b, uint64_t x) {
    for (; b->fc[2] < x; b->fc[2]++)
        if (b->cfg.replay == FHD_REPLAY_PRIORITIZED)
            fhd__sumtree_set(&b->tree, (uint32_t)(b->fc[2] % b->capacity), 0);
    b->size = b->fc[1] - b->fc[2];
}

static int alive(const fhd__backend *b, uint64_t id) {
    return id < b->fc[0] && id + b->M >= b->fc[0]; /* ids [fc0 - M, fc0) are stored */
}

static const unsigned char *frame(const fhd__backend *b, uint64_t id) {
    return b->f_rows + (id % b->M) * b->fbytes;
}

/* Store one frame (fb bytes); its id. The frame it overwrites dies, and with it every
 * transition up to the last one that used it. */
static uint64_t add_one(fhd__backend *b, const unsigned char *src) {
    const uint64_t g = b->fc[0], r = g % b->M;
    if (b->f_ref[r] != FHD_FRAME_NONE && b->f_ref[r] + 1 > b->fc[2])
        kill_below(b, b->f_ref[r] + 1);
    memcpy(b->f_rows + r * b->fbytes, src, (size_t)b->fbytes);
    b->f_ref[r] = FHD_FRAME_NONE;
    b->fc[0] = g + 1;
    return g;
}

int32_t fhd__cpu_frame_add(fhd__backend *b, const void *row, const uint64_t *hint, uint64_t *ids) {
    const uint32_t k = b->fk;
    const size_t fb = (size_t)b->fbytes;
    const unsigned char *r = (const unsigned char *)row;
    uint32_t j0 = 0; /* frames [0, j0) come from the hint */
    int usable = hint != NULL;
    for (uint32_t j = 0; usable && j < k; j++)
        usable = hint[j] != FHD_FRAME_NONE && alive(b, hint[j]);
    if (usable) {
        int same = 1, shifted = k > 1;
        for (uint32_t j = 0; j < k && same; j++)
            same = memcmp(frame(b, hint[j]), r + j * fb, fb) == 0;
        if (same) { /* the same observation: an env's next_obs that is its next obs */
            memcpy(ids, hint, sizeof(uint64_t) * k);
            return FHD_OK;
        }
        for (uint32_t j = 0; j + 1 < k && shifted; j++)
            shifted = memcmp(frame(b, hint[j + 1]), r + j * fb, fb) == 0;
        if (shifted) { /* the hint's stack moved on by one frame */
            memcpy(ids, hint + 1, sizeof(uint64_t) * (k - 1));
            j0 = k - 1;
        }
    }
    for (uint32_t j = j0; j < k; j++) /* new frames; equal neighbours once */
        ids[j] = j > 0 && memcmp(r + j * fb, r + (j - 1) * fb, fb) == 0 ? ids[j - 1]
                                                                        : add_one(b, r + j * fb);
    return FHD_OK;
}

int32_t fhd__cpu_replay_add_ids(fhd__backend *b, uint32_t n, const uint64_t *obs_ids,
                                const int32_t *actions, const float *returns,
                                const uint64_t *next_ids, const float *disc) {
    const uint32_t D = b->lo.D, k = b->fk;
    const uint64_t N = b->capacity;
    for (uint32_t i = 0; i < n; i++) {
        const uint64_t *oi = obs_ids + (size_t)i * k, *ni = next_ids + (size_t)i * k;
        int ok = 1;
        for (uint32_t j = 0; j < k; j++)
            ok &= alive(b, oi[j]) && alive(b, ni[j]);
        if (!ok) { /* its frames already left the ring: nothing left to store */
            b->dropped++;
            continue;
        }
        const uint64_t t = b->fc[1], s = t % N;
        if (t >= N && b->fc[2] < t - N + 1)
            kill_below(b, t - N + 1); /* the slot's previous transition */
        memcpy(b->t_obs + s * k, oi, sizeof(uint64_t) * k);
        memcpy(b->t_next + s * k, ni, sizeof(uint64_t) * k);
        for (uint32_t j = 0; j < k; j++) {
            b->f_ref[oi[j] % b->M] = t;
            b->f_ref[ni[j] % b->M] = t;
        }
        memcpy(b->r_act + s * D, actions + (size_t)i * D, sizeof(int32_t) * D);
        b->r_ret[s] = returns[i];
        b->r_disc[s] = disc[i];
        if (b->cfg.replay == FHD_REPLAY_PRIORITIZED)
            fhd__sumtree_set(&b->tree, (uint32_t)s, b->max_q);
        b->fc[1] = t + 1;
        b->pos = b->fc[1] % N;
        b->size = b->fc[1] - b->fc[2];
    }
    return FHD_OK;
}

uint64_t fhd__cpu_frames_slot(const fhd__backend *b, uint64_t r) {
    return (b->fc[2] + r) % b->capacity;
}

void fhd__cpu_frames_obs(const fhd__backend *b, uint64_t s, int next, unsigned char *dst) {
    const uint64_t *ids = (next ? b->t_next : b->t_obs) + s * b->fk;
    for (uint32_t j = 0; j < b->fk; j++)
        memcpy(dst + j * b->fbytes, frame(b, ids[j]), (size_t)b->fbytes);
}

void *fhd__cpu_frames_state(fhd__backend *b, int kind, uint64_t *n) {
    const int u8 = b->cfg.obs_dtype == FHD_OBS_UINT8;
    switch (kind) {
    case FHD_STATE_FRAMES:
    case FHD_STATE_FRAMES_U8:
        if (u8 != (kind == FHD_STATE_FRAMES_U8))
            return NULL;
        *n = b->M * (b->lo.S / b->fk);
        return b->f_rows;
    case FHD_STATE_FRAME_REFS:
        *n = b->M;
        return b->f_ref;
    case FHD_STATE_REPLAY_OBS_ID:
        *n = b->capacity * b->fk;
        return b->t_obs;
    case FHD_STATE_REPLAY_NEXT_ID:
        *n = b->capacity * b->fk;
        return b->t_next;
    case FHD_STATE_FRAME_COUNTERS:
        *n = 3;
        return b->fc;
    default:
        return NULL;
    }
}

void fhd__cpu_frames_sync(fhd__backend *b) {
    b->pos = b->fc[1] % b->capacity;
    b->size = b->fc[1] - b->fc[2];
}

int32_t fhd__cpu_frames_check(fhd__backend *b, char *msg, size_t cap) {
    const uint64_t N = b->capacity, T = b->fc[1], lo = b->fc[2];
    if (lo > T || T - lo > N || b->pos != T % N || b->size != T - lo) {
        snprintf(msg, cap, "frame replay: T %llu lo %llu pos %llu size %llu capacity %llu",
                 (unsigned long long)T, (unsigned long long)lo, (unsigned long long)b->pos,
                 (unsigned long long)b->size, (unsigned long long)N);
        return FHD_ERR_INTERNAL;
    }
    for (uint64_t t = lo; t < T; t++) {
        const uint64_t s = t % N;
        for (uint32_t j = 0; j < b->fk; j++) {
            const uint64_t o = b->t_obs[s * b->fk + j], x = b->t_next[s * b->fk + j];
            if (!alive(b, o) || !alive(b, x)) {
                snprintf(msg, cap,
                         "frame replay: live transition %llu (slot %llu) uses frames %llu, "
                         "%llu; frames added %llu, ring %llu",
                         (unsigned long long)t, (unsigned long long)s, (unsigned long long)o,
                         (unsigned long long)x, (unsigned long long)b->fc[0],
                         (unsigned long long)b->M);
                return FHD_ERR_INTERNAL;
            }
        }
    }
    if (b->cfg.replay != FHD_REPLAY_PRIORITIZED)
        return FHD_OK;
    for (uint64_t s = 0; s < N; s++) {
        const uint64_t t = T - 1 - ((T - 1 - s) % N + N) % N; /* last number in slot s */
        const int live = T > 0 && s < (T < N ? T : N) && t >= lo && t < T;
        const uint64_t q = fhd__sumtree_get(&b->tree, (uint32_t)s);
        if (live != (q != 0)) {
            snprintf(msg, cap, "frame replay: slot %llu is %s but has priority %llu",
                     (unsigned long long)s, live ? "live" : "dead", (unsigned long long)q);
            return FHD_ERR_INTERNAL;
        }
    }
    return FHD_OK;
}
