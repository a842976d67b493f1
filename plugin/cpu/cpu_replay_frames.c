/* cpu_replay_frames.c - the frame-once replay of image observations (configs with
 * obs_shape; DESIGN.md section 8).
 *
 * Frames: each observation is stored once, as frame id g (0, 1, ...) in row g mod M of a
 * ring of M = fhd__config_frame_capacity(cfg) rows. The front adds an env's observation when
 * it enters the env's stream and its next observation when the env steps; a next
 * observation that becomes the env's following obs is the same frame (frame_add's hint),
 * and an episode's true final observation is one more frame that only its flushed
 * transitions use.
 * Transitions: number t lives in slot t mod N as (obs id, next id, action, R, disc).
 * Validity is one watermark: f_ref[row] is the number of the last transition that uses the
 * frame in `row` (as obs or next). When the ring overwrites a frame, every transition numbered
 * up to its f_ref dies (lo moves past it; their priorities become 0), so the live transitions
 * are always the contiguous range [lo, T), and none of them refers to an overwritten frame:
 * not at the ring's edges, not across an n-step window (the obs frame is older than the
 * window), not at an episode's end (the final frame is referenced by the flush). The kill is a
 * superset by at most the transitions emitted while the oldest frame was still referenced
 * (about num_envs x n_step), all of them at the old end.
 * Bytes: M frames + 16 bytes of ids per slot, M = N + max(N / 32, 2 num_envs (n_step + 1) + 1).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cpu_internal.h"

void fhd__cpu_frames_alloc(fhd__backend *b, int *ok) {
    const uint64_t N = b->capacity;
    b->frames = 1;
    b->M = fhd__config_frame_capacity(&b->cfg);
    b->f_rows = *ok ? malloc((size_t)(b->M * b->ob)) : NULL;
    b->f_ref = *ok ? malloc(sizeof(uint64_t) * b->M) : NULL;
    b->t_obs = *ok ? calloc(N, sizeof(uint64_t)) : NULL;
    b->t_next = *ok ? calloc(N, sizeof(uint64_t)) : NULL;
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

int32_t fhd__cpu_frame_add(fhd__backend *b, const void *row, uint64_t hint, uint64_t *id) {
    const size_t ob = (size_t)b->ob;
    if (hint != FHD_FRAME_NONE && alive(b, hint) &&
        memcmp(b->f_rows + (hint % b->M) * ob, row, ob) == 0) {
        *id = hint;
        return FHD_OK;
    }
    const uint64_t g = b->fc[0], r = g % b->M;
    if (b->f_ref[r] != FHD_FRAME_NONE && b->f_ref[r] + 1 > b->fc[2])
        kill_below(b, b->f_ref[r] + 1); /* frame g - M dies, and every user of it */
    memcpy(b->f_rows + r * ob, row, ob);
    b->f_ref[r] = FHD_FRAME_NONE;
    b->fc[0] = g + 1;
    *id = g;
    return FHD_OK;
}

int32_t fhd__cpu_replay_add_ids(fhd__backend *b, uint32_t n, const uint64_t *obs_ids,
                                const int32_t *actions, const float *returns,
                                const uint64_t *next_ids, const float *disc) {
    const uint32_t D = b->lo.D;
    const uint64_t N = b->capacity;
    for (uint32_t i = 0; i < n; i++) {
        if (!alive(b, obs_ids[i]) || !alive(b, next_ids[i])) {
            snprintf(b->err, sizeof b->err,
                     "replay: frame %llu or %llu is not stored (frames added %llu, ring %llu)",
                     (unsigned long long)obs_ids[i], (unsigned long long)next_ids[i],
                     (unsigned long long)b->fc[0], (unsigned long long)b->M);
            return FHD_ERR_INTERNAL;
        }
    }
    for (uint32_t i = 0; i < n; i++) {
        const uint64_t t = b->fc[1], s = t % N;
        if (t >= N && b->fc[2] < t - N + 1)
            kill_below(b, t - N + 1); /* the slot's previous transition */
        b->t_obs[s] = obs_ids[i];
        b->t_next[s] = next_ids[i];
        b->f_ref[obs_ids[i] % b->M] = t;
        b->f_ref[next_ids[i] % b->M] = t;
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

const unsigned char *fhd__cpu_frames_obs(const fhd__backend *b, uint64_t s, int next) {
    const uint64_t id = next ? b->t_next[s] : b->t_obs[s];
    return b->f_rows + (id % b->M) * b->ob;
}

void *fhd__cpu_frames_state(fhd__backend *b, int kind, uint64_t *n) {
    const int u8 = b->cfg.obs_dtype == FHD_OBS_UINT8;
    switch (kind) {
    case FHD_STATE_FRAMES:
    case FHD_STATE_FRAMES_U8:
        if (u8 != (kind == FHD_STATE_FRAMES_U8))
            return NULL;
        *n = b->M * b->lo.S;
        return b->f_rows;
    case FHD_STATE_FRAME_REFS:
        *n = b->M;
        return b->f_ref;
    case FHD_STATE_REPLAY_OBS_ID:
        *n = b->capacity;
        return b->t_obs;
    case FHD_STATE_REPLAY_NEXT_ID:
        *n = b->capacity;
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
        if (!alive(b, b->t_obs[s]) || !alive(b, b->t_next[s]) || b->t_obs[s] >= b->t_next[s]) {
            snprintf(msg, cap,
                     "frame replay: live transition %llu (slot %llu) uses frames %llu, %llu; "
                     "frames added %llu, ring %llu",
                     (unsigned long long)t, (unsigned long long)s, (unsigned long long)b->t_obs[s],
                     (unsigned long long)b->t_next[s], (unsigned long long)b->fc[0],
                     (unsigned long long)b->M);
            return FHD_ERR_INTERNAL;
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
