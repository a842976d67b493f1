/* checkpoint_load.c - validate a checkpoint file completely, then apply it to the learner.
 *
 * Order (nothing in the learner changes before step 6):
 *   1. header: file size >= 8, header length in [2, the learner's header bound] and inside
 *      the file; its structure pre-scanned against the learner's bounds (nesting, members,
 *      string lengths: checkpoint_header.h) before jansson parses it; JSON well-formed without
 *      duplicate keys, "__metadata__" a string map;
 *   2. metadata: format name, format version (FHD_ERR_CHECKPOINT_VERSION when unknown),
 *      library version present, checksum algorithm, includes_replay, the metadata checksum, a
 *      valid config;
 *   3. compatibility with the learner: replay requested but absent, architecture fields
 *      (FHD_ERR_CHECKPOINT_MISMATCH naming the field and both values);
 *   4. tensors: exactly the catalogue of the recorded config, dtypes, shapes (the replay
 *      storage at its used or its whole length: checkpoint_trim.h), data_offsets contiguous
 *      from 0 and covering the data section to the end of the file, checksums well-formed;
 *   5. data: every tensor the load applies is read once from the one open descriptor into
 *      memory and its CRC-64 compared; value checks that protect the learner (action indices,
 *      ring positions, priority leaves, counters, finiteness, the replay storage's length
 *      against its counters). Without FHD_CKPT_INCLUDE_REPLAY the replay group (storage,
 *      staging, step state) is neither read nor held: its offsets were checked in 4, its
 *      bytes are not used;
 *   6. apply (checkpoint_apply.c): what was read and validated is written into the learner;
 *      nothing is read from the file any more, so a file changed while it is loaded is either
 *      refused (checksums, or its size/mtime changed) or loaded as it was read, and a refusal
 *      changes nothing.
 * With the replay, the file's replay storage is staged in memory between 5 and 6: a load needs
 * the file's replay bytes (its used rows) once more, transiently (FHD_ERR_OUT_OF_MEMORY,
 * learner unchanged, when that is not available).
 */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "checkpoint_header.h"
#include "checkpoint_io.h"
#include "checkpoint_load.h"
#include "checkpoint_state.h"
#include "checkpoint_trim.h"
#include "learner.h"
#include "priority.h"

int32_t fhd__ck_load_fail(load_ctx *c, int32_t code, const char *fmt, ...) {
    char text[768];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(text, sizeof text, fmt, ap);
    va_end(ap);
    return fhd__fail(c->L, code, "checkpoint_load: %s: %s", c->path, text);
}

#define failf fhd__ck_load_fail

static int32_t io_error(load_ctx *c, const char *what) {
    int e = errno;
    if (e == 0)
        return failf(c, FHD_ERR_IO, "%s: the file ended early (it changed while it was read)",
                     what);
    return failf(c, FHD_ERR_IO, "%s: %s", what, strerror(e));
}

/* ---- 1. header ---------------------------------------------------------------------------- */

static int32_t read_header(load_ctx *c) {
    /* O_NONBLOCK: opening a FIFO without a writer would block forever; the S_ISREG check below
     * rejects it (and O_NONBLOCK does not change reads of regular files) */
    c->fd = open(c->path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (c->fd < 0)
        return io_error(c, "cannot open the file");
    if (fstat(c->fd, &c->st) != 0)
        return io_error(c, "fstat");
    if (!S_ISREG(c->st.st_mode))
        return failf(c, FHD_ERR_IO, "not a regular file");
    c->size = (uint64_t)c->st.st_size;
    if (c->size < 8)
        return failf(c, FHD_ERR_CHECKPOINT_CORRUPT,
                     "the file is %" PRIu64 " bytes; a checkpoint begins with an 8-byte header "
                     "length",
                     c->size);
    unsigned char b[8];
    if (fhd__pread_all(c->fd, b, 8, 0) != 0)
        return io_error(c, "reading the header length");
    c->hlen = 0;
    for (int i = 7; i >= 0; i--)
        c->hlen = (c->hlen << 8) | b[i];
    if (c->hlen < 2 || c->hlen > FHD_CKPT_HEADER_MAX)
        return failf(c, FHD_ERR_CHECKPOINT_CORRUPT,
                     "header length %" PRIu64 " is outside [2, %" PRIu64 "] (256 MiB)", c->hlen,
                     FHD_CKPT_HEADER_MAX);
    if (c->hlen > c->size - 8)
        return failf(c, FHD_ERR_CHECKPOINT_CORRUPT,
                     "header length %" PRIu64 " runs past the end of the file (%" PRIu64
                     " bytes): the file is truncated or not a checkpoint",
                     c->hlen, c->size);
    fhd__ck_header_limits lim;
    int32_t rc = fhd__ck_header_limits_of(&c->L->cfg, &c->L->lo, &lim);
    if (rc != FHD_OK)
        return failf(c, rc, "computing the header's bounds: out of memory");
    if (c->hlen > lim.max_bytes)
        return failf(c, FHD_ERR_CHECKPOINT_CORRUPT,
                     "header length %" PRIu64 " exceeds %" PRIu64 " bytes, the most a checkpoint "
                     "this learner could be given needs (any architecture, %" PRIu64
                     " tensors at most): not a checkpoint",
                     c->hlen, lim.max_bytes, lim.max_tensors);
    c->data0 = 8 + c->hlen;
    c->header = malloc((size_t)c->hlen);
    if (!c->header)
        return failf(c, FHD_ERR_OUT_OF_MEMORY, "out of memory for a %" PRIu64 "-byte header",
                     c->hlen);
    if (fhd__pread_all(c->fd, c->header, (size_t)c->hlen, 8) != 0)
        return io_error(c, "reading the header");
    char msg[512];
    rc = fhd__ck_header_prescan(c->header, (size_t)c->hlen, &lim, msg, sizeof msg);
    if (rc != FHD_OK)
        return failf(c, rc, "%s", msg);
    if (fhd__ck_header_parse(c->header, (size_t)c->hlen, &c->root, &c->meta, msg, sizeof msg))
        return failf(c, FHD_ERR_CHECKPOINT_CORRUPT, "%s", msg);
    return FHD_OK;
}

/* ---- 2. metadata -------------------------------------------------------------------------- */

static const char *meta_str(load_ctx *c, const char *key) {
    return json_string_value(json_object_get(c->meta, key));
}

static int32_t check_metadata(load_ctx *c) {
    const char *s = meta_str(c, "format");
    if (!s || strcmp(s, FHD_CKPT_FORMAT_NAME) != 0)
        return failf(c, FHD_ERR_CHECKPOINT_CORRUPT,
                     "not a foxhunt-dqn checkpoint: __metadata__.format is %s%s%s; expected \"%s\"",
                     s ? "\"" : "", s ? s : "missing", s ? "\"" : "", FHD_CKPT_FORMAT_NAME);
    s = meta_str(c, "format_version");
    uint64_t v = 0;
    size_t n = s ? strlen(s) : 0;
    int ok = n >= 1 && n <= 9 && !(n > 1 && s[0] == '0');
    for (size_t i = 0; ok && i < n; i++) {
        ok = s[i] >= '0' && s[i] <= '9';
        v = v * 10 + (uint64_t)(s[i] - '0');
    }
    if (!ok)
        return failf(c, FHD_ERR_CHECKPOINT_CORRUPT,
                     "__metadata__.format_version is %s; expected a decimal version number",
                     s ? s : "missing");
    if (v != FHD_CKPT_FORMAT_VERSION)
        return failf(c, FHD_ERR_CHECKPOINT_VERSION,
                     "checkpoint format version %" PRIu64 "; this library (%s) reads version %d", v,
                     FHD_VERSION_STRING, FHD_CKPT_FORMAT_VERSION);
    s = meta_str(c, "library_version");
    if (!s || !*s)
        return failf(c, FHD_ERR_CHECKPOINT_CORRUPT, "__metadata__.library_version is missing");
    s = meta_str(c, "checksum_algorithm");
    if (!s || strcmp(s, FHD_CKPT_CHECKSUM_ALGORITHM) != 0)
        return failf(c, FHD_ERR_CHECKPOINT_CORRUPT,
                     "__metadata__.checksum_algorithm is %s; expected \"%s\"", s ? s : "missing",
                     FHD_CKPT_CHECKSUM_ALGORITHM);
    /* the metadata checksum covers every metadata value, the config included */
    uint64_t want, got;
    s = meta_str(c, FHD_CKPT_CHECKSUM_PREFIX "__metadata__");
    if (!s || fhd__ck_parse_hex64(s, &want) != 0)
        return failf(
            c, FHD_ERR_CHECKPOINT_CORRUPT,
            "__metadata__.checksum.__metadata__ is missing or not 16 lowercase hex digits");
    if (fhd__ck_metadata_crc(c->crc, c->meta, &got) != 0)
        return failf(c, FHD_ERR_OUT_OF_MEMORY, "out of memory");
    if (got != want)
        return failf(c, FHD_ERR_CHECKPOINT_CORRUPT,
                     "the metadata checksum does not match (stored %016" PRIx64
                     ", computed %016" PRIx64 "): the metadata is damaged",
                     want, got);
    s = meta_str(c, "includes_replay");
    if (!s || (strcmp(s, "true") != 0 && strcmp(s, "false") != 0))
        return failf(c, FHD_ERR_CHECKPOINT_CORRUPT,
                     "__metadata__.includes_replay is %s; expected \"true\" or \"false\"",
                     s ? s : "missing");
    c->has_replay = strcmp(s, "true") == 0;
    const json_t *cj = json_object_get(c->meta, "config");
    if (!cj)
        return failf(c, FHD_ERR_CHECKPOINT_CORRUPT, "__metadata__.config is missing");
    fhd_error err = FHD_ERROR_INIT;
    if (fhd__config_parse(json_string_value(cj), json_string_length(cj), &c->cfg, &err) != FHD_OK)
        return failf(c, FHD_ERR_CHECKPOINT_CORRUPT, "the recorded config is invalid: %s",
                     err.message);
    if (fhd__layout_init(&c->lo, &c->cfg) != 0)
        return failf(c, FHD_ERR_CHECKPOINT_CORRUPT, "the recorded config's network is too large");
    return FHD_OK;
}

/* ---- 3. compatibility --------------------------------------------------------------------- */

/* Text of config key `key` as the canonical config JSON writes it (shortest exact numbers),
 * with a space after array commas: "[64, 64]", "\"all\"", "0.99". */
static void value_text(const fhd__config *cfg, const char *key, char *buf, size_t cap) {
    char *js = fhd__config_to_json(cfg), pat[64];
    snprintf(pat, sizeof pat, "\"%s\":", key);
    const char *p = js ? strstr(js, pat) : NULL;
    size_t k = 0;
    if (p) {
        int depth = 0;
        for (p += strlen(pat); *p && k + 2 < cap; p++) {
            if ((*p == ',' || *p == '}') && depth == 0)
                break;
            depth += (*p == '[') - (*p == ']');
            buf[k++] = *p;
            if (*p == ',')
                buf[k++] = ' ';
        }
    }
    buf[k] = '\0';
    if (k == 0)
        snprintf(buf, cap, "?");
    free(js);
    /* a real: the shortest text that reads back as the same double */
    char *end;
    double d = strtod(buf, &end);
    if (*end == '\0' && strpbrk(buf, ".eE") && buf[0] != '"') {
        for (int prec = 1; prec <= 17; prec++) {
            char t[40];
            snprintf(t, sizeof t, "%.*g", prec, d);
            if (strtod(t, NULL) == d) {
                snprintf(buf, cap, "%s", t);
                break;
            }
        }
    }
}

static int32_t check_compat(load_ctx *c) {
    fhd_learner *L = c->L;
    if (c->load_replay && !c->has_replay)
        return failf(c, FHD_ERR_CHECKPOINT_MISMATCH,
                     "FHD_CKPT_INCLUDE_REPLAY was requested but the checkpoint was saved without "
                     "it and holds no replay buffer; load it with flags 0");
    /* Without the replay, the replay and staging shapes of the file do not matter. */
    fhd__config a = c->cfg;
    if (!c->load_replay) {
        a.replay_capacity = L->cfg.replay_capacity;
        a.replay = L->cfg.replay;
        a.n_step = L->cfg.n_step;
        a.num_envs = L->cfg.num_envs;
    }
    if (fhd__config_equal(&a, &L->cfg)) /* the common case, without reading the manifest */
        return FHD_OK;
    const char *key = fhd__config_first_difference(&a, &L->cfg, 0);
    if (!key)
        return FHD_OK;
    char theirs[256], ours[256];
    value_text(&c->cfg, key, theirs, sizeof theirs);
    value_text(&L->cfg, key, ours, sizeof ours);
    return failf(c, FHD_ERR_CHECKPOINT_MISMATCH,
                 "the checkpoint has %s %s; the learner has %s. Only the keys of the manifest's "
                 "resume_overridable list may differ%s; create the learner with the checkpoint's "
                 "%s",
                 key, theirs, ours,
                 c->load_replay ? ""
                                : " (and, without FHD_CKPT_INCLUDE_REPLAY, the replay and "
                                  "staging sizes)",
                 key);
}

/* ---- 4 and 5. tensors and data ------------------------------------------------------------ */

/* NaN/Inf in float tensors: rejected like any other invalid input. No state of a learner holds
 * them (observe refuses non-finite inputs and returns, tensor_write non-finite values, train a
 * diverging update) and checkpoint_save refuses to write one, so such a file is damaged or
 * crafted; the first one found is reported. */
static void check_finite(load_ctx *c, const fhd__ck_tensor *t, const void *data, uint64_t e0,
                         uint64_t m) {
    if (t->dtype != FHD_CK_F32 || c->nonfinite)
        return;
    const float *x = (const float *)data;
    for (uint64_t k = 0; k < m; k++)
        if (!isfinite(x[k])) {
            c->nonfinite = t->name;
            c->nonfinite_at = e0 + k;
            return;
        }
}

/* Value checks of the replay storage (elements [e0, e0 + m) at p). */
static void check_replay(load_ctx *c, const fhd__ck_tensor *t, const void *p, uint64_t e0,
                         uint64_t m) {
    check_finite(c, t, p, e0, m);
    if (t->kind == FHD_STATE_REPLAY_ACTIONS) {
        const int32_t *a = (const int32_t *)p;
        const uint32_t D = c->lo.D;
        for (uint64_t k = 0; k < m && !c->bad_action; k++) {
            uint32_t d = (uint32_t)((e0 + k) % D);
            if (a[k] < 0 || (uint32_t)a[k] >= c->lo.K[d]) {
                c->bad_action = 1;
                c->bad_action_at = e0 + k;
                c->bad_action_value = a[k];
            }
        }
    } else if (t->kind == FHD_STATE_REPLAY_PRIORITY) {
        const uint64_t *q = (const uint64_t *)p;
        for (uint64_t k = 0; k < m; k++) {
            if (q[k] == 0) {
                if (c->prio_first_zero > e0 + k)
                    c->prio_first_zero = e0 + k;
            } else {
                c->prio_nonzero_end = e0 + k + 1;
                if (q[k] > c->prio_max) {
                    c->prio_max = q[k];
                    c->prio_max_at = e0 + k;
                }
                if (q[k] > FHD_PRIO_MAX_Q && !c->prio_over) {
                    c->prio_over = 1;
                    c->prio_over_at = e0 + k;
                }
            }
        }
    }
}

/* Tensors this load applies: without the replay, not the replay group. */
static int wanted(const load_ctx *c, const fhd__ck_tensor *t) {
    return c->load_replay || !t->replay_group;
}

static int32_t read_data(load_ctx *c) {
    c->prio_first_zero = UINT64_MAX;
    for (uint32_t i = 0; i < c->cat.n; i++) {
        fhd__ck_tensor *t = &c->cat.t[i];
        if (!wanted(c, t))
            continue;
        t->data = malloc(t->bytes ? (size_t)t->bytes : 1);
        if (!t->data)
            return failf(c, FHD_ERR_OUT_OF_MEMORY,
                         "out of memory for tensor \"%s\" (%.1f MiB); the learner is unchanged",
                         t->name, (double)t->bytes / 1048576.0);
        /* in chunks: the CRC and the value checks run while the data is warm */
        const size_t es = fhd__ck_dtype_size(t->dtype);
        const uint64_t per = FHD_CKPT_CHUNK_BYTES / es;
        uint64_t h = 0;
        for (uint64_t e = 0; e < t->count; e += per) {
            const uint64_t m = t->count - e < per ? t->count - e : per;
            unsigned char *p = t->data + e * es;
            if (fhd__pread_all(c->fd, p, (size_t)(m * es), c->data0 + t->begin + e * es) != 0)
                return io_error(c, "reading the data");
            h = fhd__crc64_update(c->crc, h, p, (size_t)(m * es));
            if (t->streamed)
                check_replay(c, t, p, e, m);
            else
                check_finite(c, t, p, e, m);
        }
        if (h != t->crc)
            return failf(c, FHD_ERR_CHECKPOINT_CORRUPT,
                         "tensor \"%s\": checksum mismatch (stored %016" PRIx64
                         ", computed %016" PRIx64 "): the data is damaged",
                         t->name, t->crc, h);
    }
    return FHD_OK;
}

static const fhd__ck_tensor *find(load_ctx *c, const char *name) {
    return fhd__ck_catalog_find(&c->cat, name);
}

/* Actions (rows, D) of an in-memory tensor in range; returns the first bad element or -1. */
static int64_t first_bad_action(load_ctx *c, const fhd__ck_tensor *t) {
    const int32_t *a = (const int32_t *)t->data;
    const uint32_t D = c->lo.D;
    for (uint64_t k = 0; k < t->count; k++)
        if (a[k] < 0 || (uint32_t)a[k] >= c->lo.K[k % D])
            return (int64_t)k;
    return -1;
}

static int32_t check_values(load_ctx *c) {
    const uint32_t D = c->lo.D;
    if (c->nonfinite)
        return failf(c, FHD_ERR_CHECKPOINT_CORRUPT,
                     "tensor \"%s\": element %" PRIu64 " is NaN or Inf (checkpoint_save refuses "
                     "a non-finite state: not a file this library wrote, or damaged)",
                     c->nonfinite, c->nonfinite_at);
    for (uint32_t i = 0; i < c->cat.n; i++) { /* pruning masks hold 0 or 1 only */
        const fhd__ck_tensor *t = &c->cat.t[i];
        if (t->source != FHD_CK_SRC_BACKEND || t->kind != FHD_STATE_MASK || !wanted(c, t))
            continue;
        const float *m = (const float *)t->data;
        for (uint64_t k = 0; k < t->count; k++)
            if (m[k] != 0.0f && m[k] != 1.0f)
                return failf(c, FHD_ERR_CHECKPOINT_CORRUPT,
                             "tensor \"%s\": element %" PRIu64 " is %g; a pruning mask holds 0 "
                             "or 1 only", t->name, k, (double)m[k]);
    }
    for (uint32_t i = 0; i < c->cat.n; i++) {
        const fhd__ck_tensor *t = &c->cat.t[i];
        if (t->source == FHD_CK_SRC_SCALAR && wanted(c, t))
            memcpy(fhd__ck_field_ptr(c->L, &c->sc, t->field), t->data, (size_t)t->bytes);
    }
    const fhd__ck_scalars *s = &c->sc;
    if (s->seed != c->cfg.seed)
        return failf(c, FHD_ERR_CHECKPOINT_CORRUPT,
                     "rng.seed is %" PRIu64 " but the recorded config's seed is %" PRIu64, s->seed,
                     c->cfg.seed);
    if (s->recent_count > FHD_RECENT_EPISODES || s->recent_pos >= FHD_RECENT_EPISODES)
        return failf(c, FHD_ERR_CHECKPOINT_CORRUPT,
                     "episodes.recent_count %u / recent_pos %u out of range (at most %d / %d)",
                     s->recent_count, s->recent_pos, FHD_RECENT_EPISODES, FHD_RECENT_EPISODES - 1);
    if (!c->load_replay)
        return FHD_OK;
    const uint64_t N = c->cfg.replay_capacity;
    /* a row ring fills from slot 0; the frame-once replay's live range [lo, T) has
     * pos = T mod N and size = T - lo, which kills shrink below N anywhere */
    const int frames = c->cfg.num_obs_shape > 0;
    if (s->replay_size > N || s->replay_pos >= N ||
        (!frames && s->replay_size < N && s->replay_pos != s->replay_size))
        return failf(c, FHD_ERR_CHECKPOINT_CORRUPT,
                     "replay.pos %" PRIu64 " / replay.size %" PRIu64
                     " are inconsistent with replay_capacity %" PRIu64,
                     s->replay_pos, s->replay_size, N);
    if (s->max_priority_q < 1 || s->max_priority_q > FHD_PRIO_MAX_Q)
        return failf(c, FHD_ERR_CHECKPOINT_CORRUPT,
                     "replay.max_priority_q %" PRIu64 " is outside [1, %" PRIu64 "]",
                     s->max_priority_q, (uint64_t)FHD_PRIO_MAX_Q);
    if (c->bad_action)
        return failf(
            c, FHD_ERR_CHECKPOINT_CORRUPT,
            "replay.actions[%" PRIu64 "][%" PRIu64 "] = %d is out of range for branch %" PRIu64,
            c->bad_action_at / D, c->bad_action_at % D, c->bad_action_value, c->bad_action_at % D);
    if (c->cfg.replay == FHD_REPLAY_PRIORITIZED) {
        if (c->prio_over)
            return failf(c, FHD_ERR_CHECKPOINT_CORRUPT,
                         "replay.priorities[%" PRIu64 "] exceeds the largest quantised priority",
                         c->prio_over_at);
        /* new transitions get the running max: no leaf may exceed it (check_invariants) */
        if (c->prio_max > s->max_priority_q)
            return failf(c, FHD_ERR_CHECKPOINT_CORRUPT,
                         "replay.priorities[%" PRIu64 "] = %" PRIu64
                         " exceeds replay.max_priority_q %" PRIu64 ", the running maximum",
                         c->prio_max_at, c->prio_max, s->max_priority_q);
        /* (a row ring's filled slots are [0, size); the frame replay's live slots are the
         * cyclic range from lo mod N, which its counters give: not checked here) */
        if (!frames &&
            (c->prio_first_zero < s->replay_size || c->prio_nonzero_end > s->replay_size))
            return failf(c, FHD_ERR_CHECKPOINT_CORRUPT,
                         "replay.priorities: the filled slots [0, %" PRIu64
                         ") must have non-zero priorities and the others zero",
                         s->replay_size);
    }
    const char *with_actions[2] = {"staging.actions", "step.prev_actions"};
    for (int k = 0; k < 2; k++) {
        int64_t bad = first_bad_action(c, find(c, with_actions[k]));
        if (bad >= 0)
            return failf(c, FHD_ERR_CHECKPOINT_CORRUPT,
                         "%s: element %" PRId64 " is out of range for branch %u", with_actions[k],
                         bad, (uint32_t)((uint64_t)bad % D));
    }
    const uint32_t *head = (const uint32_t *)find(c, "staging.head")->data;
    const uint32_t *len = (const uint32_t *)find(c, "staging.length")->data;
    for (uint32_t e = 0; e < c->cfg.num_envs; e++)
        if (head[e] >= c->cfg.n_step || len[e] >= c->cfg.n_step)
            return failf(c, FHD_ERR_CHECKPOINT_CORRUPT,
                         "staging.head[%u] = %u / staging.length[%u] = %u out of range (n_step %u)",
                         e, head[e], e, len[e], c->cfg.n_step);
    if (s->have_prev > 1)
        return failf(c, FHD_ERR_CHECKPOINT_CORRUPT, "step.have_prev is %u; expected 0 or 1",
                     s->have_prev);
    return FHD_OK;
}

/* Shortened replay tensors hold exactly the used rows the file's counters give. */
static int32_t check_rows(load_ctx *c) {
    char msg[768];
    int32_t rc = fhd__ck_trim_check(&c->cat, &c->cfg, &c->sc, msg, sizeof msg);
    return rc == FHD_OK ? FHD_OK : fhd__ck_load_fail(c, rc, "%s", msg);
}

static int32_t check_same_file(load_ctx *c) {
    struct stat now;
    if (fstat(c->fd, &now) != 0)
        return io_error(c, "fstat");
    if (now.st_size != c->st.st_size || now.st_mtim.tv_sec != c->st.st_mtim.tv_sec ||
        now.st_mtim.tv_nsec != c->st.st_mtim.tv_nsec)
        return failf(c, FHD_ERR_IO, "the file was modified while it was being loaded");
    return FHD_OK;
}

/* ---- entry -------------------------------------------------------------------------------- */

static int32_t load(load_ctx *c) {
    int32_t rc = read_header(c);
    if (rc == FHD_OK)
        rc = check_metadata(c);
    if (rc == FHD_OK)
        rc = check_compat(c);
    if (rc == FHD_OK) {
        rc = fhd__ck_catalog_build(&c->cfg, &c->lo, c->has_replay, &c->cat);
        if (rc != FHD_OK)
            return failf(c, rc, "out of memory");
        char msg[512];
        if (fhd__ck_header_match(c->root, c->meta, &c->cat, c->size - c->data0, msg, sizeof msg))
            return failf(c, FHD_ERR_CHECKPOINT_CORRUPT, "%s", msg);
        rc = read_data(c);
    }
    if (rc == FHD_OK)
        rc = check_values(c);
    if (rc == FHD_OK && c->load_replay)
        rc = check_rows(c);
    if (rc == FHD_OK)
        rc = fhd__ck_apply_prepare(c);
    if (rc == FHD_OK)
        rc = check_same_file(c);
    if (rc == FHD_OK)
        rc = fhd__ck_apply(c);
    return rc;
}

int32_t fhd__ck_load(fhd_learner *L, const char *path, uint32_t flags) {
    load_ctx c;
    memset(&c, 0, sizeof c);
    c.L = L;
    c.path = path;
    c.flags = flags;
    c.fd = -1;
    c.load_replay = (flags & FHD_CKPT_INCLUDE_REPLAY) != 0;
    c.crc = malloc(sizeof(*c.crc));
    int32_t rc;
    if (!c.crc) {
        rc = fhd__fail(L, FHD_ERR_OUT_OF_MEMORY, "checkpoint_load: out of memory");
    } else {
        fhd__crc64_init(c.crc);
        rc = load(&c);
    }
    if (c.fd >= 0)
        close(c.fd);
    json_decref(c.root);
    free(c.header);
    fhd__ck_catalog_free(&c.cat);
    free(c.crc);
    free(c.fill);
    return rc;
}
