/* checkpoint_state.c - the catalogue of checkpoint tensors and the learner-side sources. */
#include "checkpoint_state.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const struct {
    const char *name;
    size_t size;
} dtypes[FHD_CK_DTYPE_COUNT_] = {
    {"F32", 4}, {"F64", 8}, {"I32", 4}, {"U32", 4}, {"U64", 8}, {"U8", 1},
};

const char *fhd__ck_dtype_name(int dtype) {
    return dtype >= 0 && dtype < FHD_CK_DTYPE_COUNT_ ? dtypes[dtype].name : "?";
}

size_t fhd__ck_dtype_size(int dtype) {
    return dtype >= 0 && dtype < FHD_CK_DTYPE_COUNT_ ? dtypes[dtype].size : 0;
}

/* ---- building ----------------------------------------------------------------------------- */

typedef struct builder {
    fhd__ck_tensor *t;
    uint32_t n, cap;
    int failed;
} builder;

static fhd__ck_tensor *add(builder *b, const char *name, int dtype, uint32_t rank, uint64_t d0,
                           uint64_t d1, uint64_t d2, uint64_t d3) {
    if (b->failed)
        return NULL;
    if (b->n == b->cap) {
        uint32_t cap = b->cap ? 2 * b->cap : 64;
        fhd__ck_tensor *nt = realloc(b->t, sizeof(*nt) * cap);
        if (!nt) {
            b->failed = 1;
            return NULL;
        }
        b->t = nt;
        b->cap = cap;
    }
    fhd__ck_tensor *t = &b->t[b->n++];
    memset(t, 0, sizeof(*t));
    snprintf(t->name, sizeof t->name, "%s", name);
    t->dtype = dtype;
    t->rank = rank;
    uint64_t dims[4] = {d0, d1, d2, d3};
    t->count = 1;
    for (uint32_t i = 0; i < rank; i++) {
        t->shape[i] = dims[i];
        t->count *= dims[i];
    }
    t->bytes = t->count * fhd__ck_dtype_size(dtype);
    return t;
}

static void add_field(builder *b, const char *name, int dtype, uint32_t rank, uint64_t d0,
                      uint64_t d1, uint64_t d2, int field, int replay_group) {
    fhd__ck_tensor *t = add(b, name, dtype, rank, d0, d1, d2, 0);
    if (!t)
        return;
    t->source = field < FHD_CKF_RECENT ? FHD_CK_SRC_SCALAR : FHD_CK_SRC_FRONT;
    t->field = field;
    t->replay_group = replay_group;
}

/* The dims of a rank-1 or rank-2 tensor, for add_backend. */
#define DIMS(d0, d1) ((const uint64_t[4]){(d0), (d1), 0, 0})

static void add_backend(builder *b, const char *name, int dtype, uint32_t rank,
                        const uint64_t *dims, int kind, uint64_t offset, int replay_group,
                        int streamed) {
    fhd__ck_tensor *t = add(b, name, dtype, rank, dims[0], dims[1], dims[2], dims[3]);
    if (!t)
        return;
    t->source = FHD_CK_SRC_BACKEND;
    t->kind = kind;
    t->offset = offset;
    t->replay_group = replay_group;
    t->streamed = streamed;
}

/* The last tensor added may be shortened to its used rows (group `rows`). */
static void rows_of_last(builder *b, int rows) {
    if (!b->failed && b->n > 0) {
        b->t[b->n - 1].rows = rows;
        b->t[b->n - 1].full_rows = b->t[b->n - 1].shape[0];
    }
}

static int data_order(const void *x, const void *y) {
    const fhd__ck_tensor *a = (const fhd__ck_tensor *)x, *b = (const fhd__ck_tensor *)y;
    size_t sa = fhd__ck_dtype_size(a->dtype), sb = fhd__ck_dtype_size(b->dtype);
    if (sa != sb)
        return sa > sb ? -1 : 1;
    return strcmp(a->name, b->name);
}

int32_t fhd__ck_catalog_build(const fhd__config *cfg, const fhd__layout *lo, int include_replay,
                              fhd__ck_catalog *out) {
    builder b = {NULL, 0, 0, 0};
    memset(out, 0, sizeof(*out));
    /* networks, optimiser and spectral-norm vectors: the layout's named tensors without grad.* */
    uint32_t nt = fhd__layout_tensor_count(lo);
    for (uint32_t i = 0; i < nt; i++) {
        fhd__tensor_ref r;
        if (fhd__layout_tensor(lo, i, &r) != 0 || r.buf == FHD_BUF_GRAD)
            continue;
        add_backend(&b, r.name, FHD_CK_F32, r.rank, r.shape, (int)r.buf, r.offset, 0, 0);
    }
    /* counters and RNG */
    add_field(&b, "rng.seed", FHD_CK_U64, 0, 0, 0, 0, FHD_CKF_SEED, 0);
    add_field(&b, "rng.explore_counter", FHD_CK_U64, 0, 0, 0, 0, FHD_CKF_EXPLORE, 0);
    add_field(&b, "counters.updates", FHD_CK_U64, 0, 0, 0, 0, FHD_CKF_UPDATES, 0);
    if (cfg->guard.on) /* the training guard's count: part of the sampling counter */
        add_field(&b, "counters.skipped_updates", FHD_CK_U64, 0, 0, 0, 0, FHD_CKF_SKIPPED, 0);
    add_field(&b, "counters.env_steps", FHD_CK_U64, 0, 0, 0, 0, FHD_CKF_ENV_STEPS, 0);
    add_field(&b, "counters.episodes", FHD_CK_U64, 0, 0, 0, 0, FHD_CKF_EPISODES, 0);
    /* episode statistics of the metrics */
    add_field(&b, "episodes.recent_returns", FHD_CK_F64, 1, FHD_RECENT_EPISODES, 0, 0,
              FHD_CKF_RECENT, 0);
    add_field(&b, "episodes.recent_count", FHD_CK_U32, 0, 0, 0, 0, FHD_CKF_RECENT_COUNT, 0);
    add_field(&b, "episodes.recent_pos", FHD_CK_U32, 0, 0, 0, 0, FHD_CKF_RECENT_POS, 0);
    add_field(&b, "episodes.last_return", FHD_CK_F64, 0, 0, 0, 0, FHD_CKF_LAST_RETURN, 0);
    if (include_replay) {
        const uint64_t N = cfg->replay_capacity, S = lo->S, D = lo->D;
        const uint64_t E = cfg->num_envs, n = cfg->n_step;
        add_field(&b, "replay.pos", FHD_CK_U64, 0, 0, 0, 0, FHD_CKF_REPLAY_POS, 1);
        add_field(&b, "replay.size", FHD_CK_U64, 0, 0, 0, 0, FHD_CKF_REPLAY_SIZE, 1);
        add_field(&b, "replay.max_priority_q", FHD_CK_U64, 0, 0, 0, 0, FHD_CKF_REPLAY_MAXQ, 1);
        /* observations in the learner's dtype (obs_dtype "uint8": U8, a quarter of the bytes) */
        const int u8 = cfg->obs_dtype == FHD_OBS_UINT8;
        const int obs_dt = u8 ? FHD_CK_U8 : FHD_CK_F32;
        const int frames = cfg->num_obs_shape > 0; /* image observations: each frame once */
        if (frames) {
            const uint64_t M = fhd__config_frame_capacity(cfg);
            const uint64_t k = cfg->frame_stack ? cfg->frame_stack : 1; /* frames / obs */
            add_backend(&b, "replay.frames", obs_dt, 2, DIMS(M, S / k),
                        u8 ? FHD_STATE_FRAMES_U8 : FHD_STATE_FRAMES, 0, 1, 1);
            rows_of_last(&b, FHD_CK_ROWS_FRAMES);
            add_backend(&b, "replay.frame_refs", FHD_CK_U64, 1, DIMS(M, 0), FHD_STATE_FRAME_REFS,
                        0, 1, 1);
            rows_of_last(&b, FHD_CK_ROWS_FRAMES);
            add_backend(&b, "replay.obs_ids", FHD_CK_U64, 2, DIMS(N, k), FHD_STATE_REPLAY_OBS_ID,
                        0, 1, 1);
            rows_of_last(&b, FHD_CK_ROWS_SLOTS);
            add_backend(&b, "replay.next_ids", FHD_CK_U64, 2, DIMS(N, k),
                        FHD_STATE_REPLAY_NEXT_ID, 0, 1, 1);
            rows_of_last(&b, FHD_CK_ROWS_SLOTS);
            add_backend(&b, "replay.frame_counters", FHD_CK_U64, 1, DIMS(3, 0),
                        FHD_STATE_FRAME_COUNTERS, 0, 1, 1);
        } else {
            add_backend(&b, "replay.obs", obs_dt, 2, DIMS(N, S),
                        u8 ? FHD_STATE_REPLAY_OBS_U8 : FHD_STATE_REPLAY_OBS, 0, 1, 1);
            rows_of_last(&b, FHD_CK_ROWS_SLOTS);
            add_backend(&b, "replay.next_obs", obs_dt, 2, DIMS(N, S),
                        u8 ? FHD_STATE_REPLAY_NEXT_OBS_U8 : FHD_STATE_REPLAY_NEXT_OBS, 0, 1, 1);
            rows_of_last(&b, FHD_CK_ROWS_SLOTS);
        }
        add_backend(&b, "replay.actions", FHD_CK_I32, 2, DIMS(N, D),
                    FHD_STATE_REPLAY_ACTIONS, 0, 1, 1);
        rows_of_last(&b, FHD_CK_ROWS_SLOTS);
        add_backend(&b, "replay.returns", FHD_CK_F32, 1, DIMS(N, 0),
                    FHD_STATE_REPLAY_RETURNS, 0, 1, 1);
        rows_of_last(&b, FHD_CK_ROWS_SLOTS);
        add_backend(&b, "replay.discounts", FHD_CK_F32, 1, DIMS(N, 0),
                    FHD_STATE_REPLAY_DISC, 0, 1, 1);
        rows_of_last(&b, FHD_CK_ROWS_SLOTS);
        if (cfg->replay == FHD_REPLAY_PRIORITIZED) {
            add_backend(&b, "replay.priorities", FHD_CK_U64, 1, DIMS(N, 0),
                        FHD_STATE_REPLAY_PRIORITY, 0, 1, 1);
            rows_of_last(&b, FHD_CK_ROWS_SLOTS);
        }
        /* n-step staging rings */
        if (frames) {
            const uint64_t k = cfg->frame_stack ? cfg->frame_stack : 1;
            add_field(&b, "staging.frame_ids", FHD_CK_U64, 3, E, n, k, FHD_CKF_ST_FRAME_ID, 1);
            add_field(&b, "step.last_frame_ids", FHD_CK_U64, 2, E, k, 0, FHD_CKF_LAST_FRAME, 1);
        } else {
            add_field(&b, "staging.obs", obs_dt, 3, E, n, S, FHD_CKF_ST_OBS, 1);
        }
        add_field(&b, "staging.actions", FHD_CK_I32, 3, E, n, D, FHD_CKF_ST_ACT, 1);
        add_field(&b, "staging.rewards", FHD_CK_F32, 2, E, n, 0, FHD_CKF_ST_REW, 1);
        add_field(&b, "staging.head", FHD_CK_U32, 1, E, 0, 0, FHD_CKF_ST_HEAD, 1);
        add_field(&b, "staging.length", FHD_CK_U32, 1, E, 0, 0, FHD_CKF_ST_LEN, 1);
        /* step(): the previous call and the running episodes */
        add_field(&b, "step.prev_obs", obs_dt, 2, E, S, 0, FHD_CKF_PREV_OBS, 1);
        add_field(&b, "step.prev_actions", FHD_CK_I32, 2, E, D, 0, FHD_CKF_PREV_ACT, 1);
        add_field(&b, "step.have_prev", FHD_CK_U8, 0, 0, 0, 0, FHD_CKF_HAVE_PREV, 1);
        add_field(&b, "step.episode_return", FHD_CK_F64, 1, E, 0, 0, FHD_CKF_EP_RETURN, 1);
        add_field(&b, "step.episode_length", FHD_CK_U64, 1, E, 0, 0, FHD_CKF_EP_LEN, 1);
    }
    if (b.failed) {
        free(b.t);
        return FHD_ERR_OUT_OF_MEMORY;
    }
    qsort(b.t, b.n, sizeof(*b.t), data_order);
    uint64_t off = 0;
    for (uint32_t i = 0; i < b.n; i++) {
        b.t[i].begin = off;
        off += b.t[i].bytes;
        b.t[i].end = off;
    }
    out->t = b.t;
    out->n = b.n;
    out->data_bytes = off;
    return FHD_OK;
}

void fhd__ck_catalog_free(fhd__ck_catalog *c) {
    if (!c)
        return;
    for (uint32_t i = 0; i < c->n; i++)
        free(c->t[i].data);
    free(c->t);
    c->t = NULL;
    c->n = 0;
}

fhd__ck_tensor *fhd__ck_catalog_find(const fhd__ck_catalog *c, const char *name) {
    for (uint32_t i = 0; i < c->n; i++)
        if (strcmp(c->t[i].name, name) == 0)
            return &c->t[i];
    return NULL;
}

/* ---- the learner side --------------------------------------------------------------------- */

int32_t fhd__ck_scalars_get(fhd_learner *L, fhd__ck_scalars *sc) {
    fhd__backend_scalars bs;
    /* an asynchronous backend (CUDA) first completes its queued updates */
    int32_t rc = L->ops->finish ? L->ops->finish(L->be) : FHD_OK;
    if (rc == FHD_OK)
        rc = L->ops->get_scalars(L->be, &bs);
    if (rc != FHD_OK)
        return rc;
    memset(sc, 0, sizeof(*sc));
    sc->seed = L->cfg.seed;
    sc->explore_counter = L->act_calls;
    sc->updates = bs.updates;
    sc->skipped = bs.skipped;
    sc->env_steps = L->env_steps;
    sc->episodes = L->episodes;
    sc->replay_pos = bs.replay_pos;
    sc->replay_size = bs.replay_size;
    sc->max_priority_q = bs.max_priority_q;
    sc->recent_count = L->recent_count;
    sc->recent_pos = L->recent_pos;
    sc->last_return = L->last_episode_return;
    sc->have_prev = L->have_prev ? 1 : 0;
    return FHD_OK;
}

void *fhd__ck_field_ptr(fhd_learner *L, fhd__ck_scalars *sc, int field) {
    switch (field) {
    case FHD_CKF_SEED:
        return &sc->seed;
    case FHD_CKF_EXPLORE:
        return &sc->explore_counter;
    case FHD_CKF_UPDATES:
        return &sc->updates;
    case FHD_CKF_SKIPPED:
        return &sc->skipped;
    case FHD_CKF_ENV_STEPS:
        return &sc->env_steps;
    case FHD_CKF_EPISODES:
        return &sc->episodes;
    case FHD_CKF_RECENT_COUNT:
        return &sc->recent_count;
    case FHD_CKF_RECENT_POS:
        return &sc->recent_pos;
    case FHD_CKF_LAST_RETURN:
        return &sc->last_return;
    case FHD_CKF_REPLAY_POS:
        return &sc->replay_pos;
    case FHD_CKF_REPLAY_SIZE:
        return &sc->replay_size;
    case FHD_CKF_REPLAY_MAXQ:
        return &sc->max_priority_q;
    case FHD_CKF_HAVE_PREV:
        return &sc->have_prev;
    case FHD_CKF_RECENT:
        return L->recent;
    case FHD_CKF_ST_OBS:
        return L->st_obs;
    case FHD_CKF_ST_ACT:
        return L->st_act;
    case FHD_CKF_ST_REW:
        return L->st_rew;
    case FHD_CKF_ST_HEAD:
        return L->st_head;
    case FHD_CKF_ST_LEN:
        return L->st_len;
    case FHD_CKF_PREV_OBS:
        return L->prev_obs;
    case FHD_CKF_PREV_ACT:
        return L->prev_act;
    case FHD_CKF_EP_RETURN:
        return L->ep_return;
    case FHD_CKF_ST_FRAME_ID:
        return L->st_id;
    case FHD_CKF_LAST_FRAME:
        return L->last_frame;
    case FHD_CKF_EP_LEN:
        return L->ep_len;
    default:
        return NULL;
    }
}

int32_t fhd__ck_read_elems(fhd_learner *L, fhd__ck_scalars *sc, const fhd__ck_tensor *t,
                           uint64_t e0, uint64_t n, void *dst) {
    if (t->source == FHD_CK_SRC_BACKEND)
        return L->ops->read(L->be, t->kind, t->offset + e0, n, dst);
    const char *p = (const char *)fhd__ck_field_ptr(L, sc, t->field);
    if (!p)
        return FHD_ERR_INTERNAL;
    const size_t es = fhd__ck_dtype_size(t->dtype);
    memcpy(dst, p + e0 * es, n * es);
    return FHD_OK;
}
