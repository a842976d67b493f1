/* test_ckpt_corrupt.c - damaged and edited checkpoints are rejected and leave the learner as it
 * was.
 *
 *   1. every truncation of a real checkpoint (small model, replay included), length 0 to size-1;
 *   2. single-bit flips: all 64 bits of the length field, then 2,000 random ones (1,000 inside
 *      the length field and the header, 1,000 anywhere). "Rejected" means a non-OK status
 * (FHD_ERR_CHECKPOINT_CORRUPT, or FHD_ERR_CHECKPOINT_VERSION for a flipped format version) with the
 * learner's tensors, counters and replay unchanged. A flip that is accepted must be harmless: the
 * learner must end in exactly the state of loading the original file. Both are asserted for every
 * flip.
 *   3. crafted headers: each validation rule on its own, with the checksums recomputed where the
 *      rule under test sits behind them.
 * "Unchanged" is checked on every attempt through the ABI (all named tensors, bitwise, and the
 * metrics counters) and, every few attempts, by saving the learner with its replay and comparing
 * the bytes with a save taken before.
 * Usage: test_ckpt_corrupt <libfoxhunt_dqn.so> <scratch dir>
 */
#include "ckpt_common.h"

static const fhd_api_v1 *api;
static char dir[512], p_orig[600], p_try[600], p_state[600], p_cmp[600];

static const char *cfg =
    "{\"obs_dim\": 4, \"actions\": [3, 2], \"hidden\": [4], \"dueling\": true, "
    "\"spectral_norm\": \"last\", \"n_step\": 2, \"replay\": \"prioritized\", "
    "\"replay_capacity\": 16, \"num_envs\": 2, \"seed\": 3, \"batch_size\": 4, "
    "\"learning_starts\": 8, \"train_freq\": 1, \"gradient_steps\": 1, \"lr\": 0.01, "
    "\"epsilon_decay_steps\": 100}";

static unsigned char *orig;      /* the checkpoint under attack */
static size_t orig_len, hdr_end; /* file size, 8 + header length */
static unsigned char *accepted;  /* save of a learner that loaded `orig` */
static size_t accepted_len;
static unsigned char *t_bytes; /* save of T before any attack */
static size_t t_len;
static fhd_learner *T; /* the learner under attack */
static snapshot t_snap, r_snap, cur;
static uint64_t full_compares;

static uint64_t rng_state = 0x9E3779B97F4A7C15ull;
static uint64_t next_rand(void) {
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return rng_state;
}

/* T still in its original state? (full: also compare a save with replay) */
static int t_unchanged(int full) {
    snap_take(api, T, &cur);
    int d = snap_diff(&t_snap, &cur, 0);
    snap_free(&cur);
    if (d == 0 && full) {
        size_t n = 0;
        unsigned char *b = save_bytes(api, T, p_cmp, FHD_CKPT_INCLUDE_REPLAY, &n);
        d = !b || n != t_len || memcmp(b, t_bytes, n) != 0;
        free(b);
        full_compares++;
    }
    return d == 0;
}

/* T in the state of loading the original file? */
static int t_as_accepted(void) {
    snap_take(api, T, &cur);
    int d = snap_diff_ex(&r_snap, &cur, 1, 1);
    snap_free(&cur);
    size_t n = 0;
    unsigned char *b = save_bytes(api, T, p_cmp, FHD_CKPT_INCLUDE_REPLAY, &n);
    d += !b || n != accepted_len || memcmp(b, accepted, n) != 0;
    free(b);
    return d == 0;
}

static void t_restore(void) {
    int32_t rc = api->checkpoint_load(T, p_state, FHD_CKPT_INCLUDE_REPLAY);
    CHECK(rc == FHD_OK && t_unchanged(0), "restoring T: %s", api->last_error(T));
}

static void setup(void) {
    snprintf(p_orig, sizeof p_orig, "%s/orig.safetensors", dir);
    snprintf(p_try, sizeof p_try, "%s/try.safetensors", dir);
    snprintf(p_state, sizeof p_state, "%s/t_state.safetensors", dir);
    snprintf(p_cmp, sizeof p_cmp, "%s/cmp.safetensors", dir);
    static synth_run r1, r2;
    fhd_learner *S = fhd_test_create(api, cfg);
    synth_init(&r1, 2);
    CHECK(synth_run_until(api, S, &r1, 60, 10000) >= 60, "train S");
    CHECK(api->checkpoint_save(S, p_orig, FHD_CKPT_INCLUDE_REPLAY) == FHD_OK, "save");
    api->destroy(S);
    orig = fhd_test_read_file(p_orig, &orig_len);
    uint64_t n = 0;
    for (int i = 7; i >= 0; i--)
        n = (n << 8) | orig[i];
    hdr_end = 8 + (size_t)n;
    /* the state that loading the original gives */
    fhd_learner *R = fhd_test_create(api, cfg);
    CHECK(api->checkpoint_load(R, p_orig, FHD_CKPT_INCLUDE_REPLAY) == FHD_OK, "load R: %s",
          api->last_error(R));
    snap_take(api, R, &r_snap);
    accepted = save_bytes(api, R, p_cmp, FHD_CKPT_INCLUDE_REPLAY, &accepted_len);
    CHECK(accepted && accepted_len == orig_len && memcmp(accepted, orig, orig_len) == 0,
          "save(load(orig)) != orig");
    api->destroy(R);
    /* T: the same config, a different state (fewer updates, other replay contents) */
    T = fhd_test_create(api, cfg);
    synth_init(&r2, 2);
    r2.env[0].episode = 40;
    CHECK(synth_run_until(api, T, &r2, 25, 10000) >= 25, "train T");
    snap_take(api, T, &t_snap);
    t_bytes = save_bytes(api, T, p_state, FHD_CKPT_INCLUDE_REPLAY, &t_len);
    CHECK(t_bytes != NULL, "save T");
    CHECK(snap_diff(&t_snap, &r_snap, 0) > 0, "T must differ from the checkpoint");
    printf("checkpoint under attack: %zu bytes (length field 8, header %zu, data %zu)\n", orig_len,
           hdr_end - 8, orig_len - hdr_end);
}

/* ---- 1. truncations ------------------------------------------------------------------------ */

static void test_truncations(void) {
    double t0 = ck_now();
    size_t rejected = 0, unchanged = 0, by_corrupt = 0;
    /* one file, cut shorter and shorter: every prefix of the original */
    file_write(p_try, orig, orig_len);
    FILE *fp = fopen(p_try, "r+b");
    for (size_t k = 0; k < orig_len; k++) {
        const size_t len = orig_len - 1 - k;
        CHECK(ftruncate(fileno(fp), (off_t)len) == 0, "ftruncate");
        int32_t rc = api->checkpoint_load(T, p_try, FHD_CKPT_INCLUDE_REPLAY);
        rejected += rc != FHD_OK;
        by_corrupt += rc == FHD_ERR_CHECKPOINT_CORRUPT;
        int ok = t_unchanged(len % 211 == 0 || len + 1 == orig_len);
        unchanged += ok;
        if (rc != FHD_ERR_CHECKPOINT_CORRUPT || !ok)
            CHECK(0, "truncated to %zu bytes: %s (%s), learner %s", len, api->status_name(rc),
                  api->last_error(T), ok ? "unchanged" : "CHANGED");
    }
    fclose(fp);
    CHECK(rejected == orig_len && unchanged == orig_len, "truncations");
    printf(
        "truncations: %zu lengths (0..%zu) tried, %zu rejected (%zu FHD_ERR_CHECKPOINT_CORRUPT), "
        "learner unchanged after %zu; %.2f s\n",
        orig_len, orig_len - 1, rejected, by_corrupt, unchanged, ck_now() - t0);
    /* the complete file still loads */
    CHECK(api->checkpoint_load(T, p_orig, FHD_CKPT_INCLUDE_REPLAY) == FHD_OK && t_as_accepted(),
          "the complete file");
    t_restore();
}

/* ---- 2. bit flips --------------------------------------------------------------------------- */

static void test_flips(void) {
    double t0 = ck_now();
    enum { LENGTH_BITS = 64, FLIPS = LENGTH_BITS + 2000 };
    size_t tried[3] = {0}, rejected[3] = {0}, harmless[3] = {0}, bad = 0;
    size_t codes_corrupt = 0, codes_version = 0, codes_other = 0;
    file_write(p_try, orig, orig_len);
    FILE *fp = fopen(p_try, "r+b");
    for (int k = 0; k < FLIPS; k++) {
        /* every bit of the length field, then 1,000 in the header, then 1,000 anywhere */
        const int r = k - LENGTH_BITS;
        size_t pos = k < LENGTH_BITS ? (size_t)k / 8
                     : r < 1000      ? (size_t)(next_rand() % hdr_end)
                                     : (size_t)(next_rand() % orig_len);
        int bit = k < LENGTH_BITS ? k % 8 : (int)(next_rand() % 8);
        int region = pos < 8 ? 0 : pos < hdr_end ? 1 : 2;
        unsigned char flipped = (unsigned char)(orig[pos] ^ (1u << bit));
        CHECK(pwrite(fileno(fp), &flipped, 1, (off_t)pos) == 1, "pwrite");
        tried[region]++;
        int32_t rc = api->checkpoint_load(T, p_try, FHD_CKPT_INCLUDE_REPLAY);
        CHECK(pwrite(fileno(fp), orig + pos, 1, (off_t)pos) == 1, "pwrite");
        if (rc == FHD_OK) {
            int same = t_as_accepted();
            harmless[region] += same;
            if (!same) {
                bad++;
                CHECK(0, "flip of bit %d at byte %zu was accepted and changed the result", bit,
                      pos);
            }
            t_restore();
            continue;
        }
        rejected[region]++;
        codes_corrupt += rc == FHD_ERR_CHECKPOINT_CORRUPT;
        codes_version += rc == FHD_ERR_CHECKPOINT_VERSION;
        codes_other += rc != FHD_ERR_CHECKPOINT_CORRUPT && rc != FHD_ERR_CHECKPOINT_VERSION;
        int ok = t_unchanged(k % 50 == 0);
        if (!ok || (rc != FHD_ERR_CHECKPOINT_CORRUPT && rc != FHD_ERR_CHECKPOINT_VERSION)) {
            bad++;
            CHECK(0, "flip of bit %d at byte %zu: %s (%s), learner %s", bit, pos,
                  api->status_name(rc), api->last_error(T), ok ? "unchanged" : "CHANGED");
        }
    }
    fclose(fp);
    CHECK(bad == 0, "%zu flips were mishandled", bad);
    printf("bit flips: %d tried (length field %zu (all 64 bits + random), header %zu, data %zu); "
           "rejected %zu/%zu/%zu "
           "(FHD_ERR_CHECKPOINT_CORRUPT %zu, FHD_ERR_CHECKPOINT_VERSION %zu, other %zu); accepted "
           "and harmless %zu/%zu/%zu; %.2f s\n",
           FLIPS, tried[0], tried[1], tried[2], rejected[0], rejected[1], rejected[2],
           codes_corrupt, codes_version, codes_other, harmless[0], harmless[1], harmless[2],
           ck_now() - t0);
}

/* ---- 3. crafted headers --------------------------------------------------------------------- */

typedef void (*edit_fn)(st_file *f);

static json_t *meta_of(st_file *f) {
    return json_object_get(f->header, "__metadata__");
}

/* Apply `edit` to a parsed copy of the original, write it, load it, expect `code` and a message
 * containing `needle`, and T unchanged (or, for code FHD_OK, T in the accepted state). */
static void crafted(const char *what, edit_fn edit, const unsigned char *tail, size_t tail_len,
                    int32_t code, const char *needle) {
    st_file f;
    st_parse(orig, orig_len, &f);
    edit(&f);
    st_write(p_try, &f, tail, tail_len);
    st_free(&f);
    int32_t rc = api->checkpoint_load(T, p_try, FHD_CKPT_INCLUDE_REPLAY);
    const char *msg = api->last_error(T);
    CHECK(rc == code && (!needle || strstr(msg, needle)), "%s: expected %s \"%s\"; got %s: %s",
          what, api->status_name(code), needle ? needle : "", api->status_name(rc), msg);
    if (code == FHD_OK) {
        CHECK(t_as_accepted(), "%s: accepted with a different result", what);
        t_restore();
    } else {
        CHECK(t_unchanged(1), "%s: the learner changed", what);
    }
}

static void raw(const char *what, const void *bytes, size_t len, const char *needle) {
    file_write(p_try, bytes, len);
    int32_t rc = api->checkpoint_load(T, p_try, 0);
    CHECK(rc == FHD_ERR_CHECKPOINT_CORRUPT && strstr(api->last_error(T), needle), "%s: %s: %s",
          what, api->status_name(rc), api->last_error(T));
    CHECK(t_unchanged(0), "%s: the learner changed", what);
}

static void e_none(st_file *f) {
    (void)f;
}
static void e_dtype(st_file *f) {
    json_object_set_new(json_object_get(f->header, "online.torso.0.weight"), "dtype",
                        json_string("I32"));
}
static void e_shape(st_file *f) {
    json_object_set_new(json_object_get(f->header, "online.torso.0.weight"), "shape",
                        json_pack("[i, i]", 2, 8));
}
static void e_missing(st_file *f) {
    json_object_del(f->header, "adam.v.torso.0.bias");
}
static void e_unknown(st_file *f) {
    json_object_set_new(
        f->header, "online.torso.9.weight",
        json_pack("{s:s, s:[i], s:[i, i]}", "dtype", "F32", "shape", 0, "data_offsets", 0, 0));
}
static void e_extra_key(st_file *f) {
    json_object_set_new(json_object_get(f->header, "target.torso.0.bias"), "note",
                        json_string("x"));
}
/* online.torso.0.bias takes the offsets of target.torso.0.bias (same size): overlap + gap */
static void e_overlap(st_file *f) {
    json_t *o = json_object_get(json_object_get(f->header, "target.torso.0.bias"), "data_offsets");
    json_object_set(json_object_get(f->header, "online.torso.0.bias"), "data_offsets", o);
}
static void e_swap(st_file *f) { /* two same-size tensors swap places: checksums catch it */
    json_t *a = json_object_get(f->header, "online.torso.0.bias");
    json_t *b = json_object_get(f->header, "target.torso.0.bias");
    json_t *oa = json_incref(json_object_get(a, "data_offsets"));
    json_object_set(a, "data_offsets", json_object_get(b, "data_offsets"));
    json_object_set_new(b, "data_offsets", oa);
}
static void e_meta_number(st_file *f) {
    json_object_set_new(meta_of(f), "backend", json_integer(1));
}
static void set_cfg_key(st_file *f, const char *key, json_t *value, int restamp) {
    json_t *c = json_loads(json_string_value(json_object_get(meta_of(f), "config")), 0, NULL);
    json_object_set_new(c, key, value);
    char *s = json_dumps(c, JSON_COMPACT | JSON_SORT_KEYS);
    json_object_set_new(meta_of(f), "config", json_string(s));
    free(s);
    json_decref(c);
    if (restamp)
        st_restamp_metadata(f);
}
static void e_cfg_lr_stale(st_file *f) {
    set_cfg_key(f, "lr", json_real(0.02), 0);
}
static void e_cfg_lr(st_file *f) {
    set_cfg_key(f, "lr", json_real(0.02), 1);
}
static void e_cfg_hidden(st_file *f) {
    set_cfg_key(f, "hidden", json_pack("[i]", 5), 1);
}
static void e_cfg_invalid(st_file *f) {
    set_cfg_key(f, "gamma", json_real(1.5), 1);
}
static void set_meta(st_file *f, const char *key, const char *value) {
    if (value)
        json_object_set_new(meta_of(f), key, json_string(value));
    else
        json_object_del(meta_of(f), key);
    st_restamp_metadata(f);
}
static void e_version2(st_file *f) {
    set_meta(f, "format_version", "2");
}
static void e_version_text(st_file *f) {
    set_meta(f, "format_version", "1.0");
}
static void e_version_missing(st_file *f) {
    set_meta(f, "format_version", NULL);
}
static void e_format(st_file *f) {
    set_meta(f, "format", "something-else");
}
static void e_library(st_file *f) {
    set_meta(f, "library_version", NULL);
}
static void e_algorithm(st_file *f) {
    set_meta(f, "checksum_algorithm", "fnv1a64");
}
static void e_no_replay_flag(st_file *f) {
    set_meta(f, "includes_replay", "false");
}
static void e_unknown_meta(st_file *f) {
    set_meta(f, "comment", "written by a later minor");
}
static void e_ck_missing(st_file *f) {
    json_object_del(meta_of(f), "checksum.replay.size");
}
static void e_ck_extra(st_file *f) {
    json_object_set_new(meta_of(f), "checksum.bogus", json_string("0000000000000000"));
}
static void e_ck_upper(st_file *f) {
    char v[17];
    snprintf(v, sizeof v, "%s",
             json_string_value(json_object_get(meta_of(f), "checksum.rng.seed")));
    for (char *p = v; *p; p++)
        if (*p >= 'a' && *p <= 'f')
            *p = (char)(*p - 'a' + 'A');
    if (!strpbrk(v, "ABCDEF"))
        v[0] = 'G';
    json_object_set_new(meta_of(f), "checksum.rng.seed", json_string(v));
}
/* Overwrite `n` bytes of tensor `name` at byte `at` and recompute its checksum. */
static void poke(st_file *f, const char *name, size_t at, const void *v, size_t n) {
    size_t b = 0, e = 0;
    st_range(f, name, &b, &e);
    if (b + at + n <= e)
        memcpy(f->data + b + at, v, n);
    st_restamp_tensor(f, name);
}
static void e_action(st_file *f) {
    int32_t a = 3; /* branch 0 has 3 actions */
    poke(f, "replay.actions", 8 * 5, &a, 4);
}
static void e_prev_action(st_file *f) {
    int32_t a = 2; /* branch 1 has 2 actions */
    poke(f, "step.prev_actions", 4, &a, 4);
}
static void e_pos(st_file *f) {
    uint64_t v = 16;
    poke(f, "replay.pos", 0, &v, 8);
}
static void e_prio_zero(st_file *f) {
    uint64_t v = 0;
    poke(f, "replay.priorities", 8 * 3, &v, 8);
}
static void e_maxq(st_file *f) {
    uint64_t v = 0;
    poke(f, "replay.max_priority_q", 0, &v, 8);
}
static void e_head(st_file *f) {
    uint32_t v = 2; /* n_step 2 */
    poke(f, "staging.head", 4, &v, 4);
}
static void e_seed(st_file *f) {
    uint64_t v = 4;
    poke(f, "rng.seed", 0, &v, 8);
}
static void e_recent(st_file *f) {
    uint32_t v = 101;
    poke(f, "episodes.recent_count", 0, &v, 4);
}
static void e_have_prev(st_file *f) {
    uint8_t v = 2;
    poke(f, "step.have_prev", 0, &v, 1);
}

static void e_nan_weight(st_file *f) {
    const float v = NAN;
    poke(f, "online.torso.0.weight", 4 * 3, &v, 4);
}
static void e_inf_obs(st_file *f) {
    const float v = -INFINITY;
    poke(f, "replay.obs", 4 * 7, &v, 4);
}

static void test_crafted(void) {
    /* re-serialised without padding (another writer's layout): still a valid checkpoint */
    crafted("unpadded header", e_none, NULL, 0, FHD_OK, NULL);
    const unsigned char tail[8] = {0};
    crafted("8 trailing bytes", e_none, tail, 8, FHD_ERR_CHECKPOINT_CORRUPT, "trailing bytes");
    crafted("dtype", e_dtype, NULL, 0, FHD_ERR_CHECKPOINT_CORRUPT, "has dtype I32; expected F32");
    crafted("shape", e_shape, NULL, 0, FHD_ERR_CHECKPOINT_CORRUPT,
            "has shape [2, 8]; this config "
            "needs [4, 4]");
    crafted("missing tensor", e_missing, NULL, 0, FHD_ERR_CHECKPOINT_CORRUPT,
            "\"adam.v.torso.0.bias\" is missing");
    crafted("unknown tensor", e_unknown, NULL, 0, FHD_ERR_CHECKPOINT_CORRUPT, "unknown tensor");
    crafted("extra entry key", e_extra_key, NULL, 0, FHD_ERR_CHECKPOINT_CORRUPT, "exactly");
    crafted("overlapping offsets", e_overlap, NULL, 0, FHD_ERR_CHECKPOINT_CORRUPT, "overlap");
    crafted("swapped offsets", e_swap, NULL, 0, FHD_ERR_CHECKPOINT_CORRUPT, "checksum mismatch");
    crafted("metadata number", e_meta_number, NULL, 0, FHD_ERR_CHECKPOINT_CORRUPT,
            "__metadata__.backend is not a string");
    crafted("config edited, stale checksum", e_cfg_lr_stale, NULL, 0, FHD_ERR_CHECKPOINT_CORRUPT,
            "metadata checksum");
    crafted("config lr edited (overridable)", e_cfg_lr, NULL, 0, FHD_OK, NULL);
    crafted("config hidden edited", e_cfg_hidden, NULL, 0, FHD_ERR_CHECKPOINT_MISMATCH,
            "the checkpoint has hidden [5]; the learner has [4]");
    crafted("config invalid", e_cfg_invalid, NULL, 0, FHD_ERR_CHECKPOINT_CORRUPT,
            "recorded config is invalid");
    crafted("format_version 2", e_version2, NULL, 0, FHD_ERR_CHECKPOINT_VERSION,
            "format version 2");
    crafted("format_version 1.0", e_version_text, NULL, 0, FHD_ERR_CHECKPOINT_CORRUPT,
            "format_version");
    crafted("format_version missing", e_version_missing, NULL, 0, FHD_ERR_CHECKPOINT_CORRUPT,
            "format_version");
    crafted("format", e_format, NULL, 0, FHD_ERR_CHECKPOINT_CORRUPT, "not a foxhunt-dqn");
    crafted("library_version", e_library, NULL, 0, FHD_ERR_CHECKPOINT_CORRUPT, "library_version");
    crafted("checksum algorithm", e_algorithm, NULL, 0, FHD_ERR_CHECKPOINT_CORRUPT,
            "checksum_algorithm");
    crafted("includes_replay false with replay tensors", e_no_replay_flag, NULL, 0,
            FHD_ERR_CHECKPOINT_MISMATCH, "INCLUDE_REPLAY");
    crafted("unknown metadata key (covered by the checksum)", e_unknown_meta, NULL, 0, FHD_OK,
            NULL);
    crafted("tensor checksum missing", e_ck_missing, NULL, 0, FHD_ERR_CHECKPOINT_CORRUPT,
            "no checksum");
    crafted("checksum of no tensor", e_ck_extra, NULL, 0, FHD_ERR_CHECKPOINT_CORRUPT,
            "names no tensor");
    crafted("checksum in upper case", e_ck_upper, NULL, 0, FHD_ERR_CHECKPOINT_CORRUPT,
            "lowercase hex");
    crafted("replay action out of range", e_action, NULL, 0, FHD_ERR_CHECKPOINT_CORRUPT,
            "replay.actions[5][0] = 3");
    crafted("previous action out of range", e_prev_action, NULL, 0, FHD_ERR_CHECKPOINT_CORRUPT,
            "step.prev_actions");
    crafted("replay.pos past capacity", e_pos, NULL, 0, FHD_ERR_CHECKPOINT_CORRUPT, "replay.pos");
    crafted("zero priority in a filled slot", e_prio_zero, NULL, 0, FHD_ERR_CHECKPOINT_CORRUPT,
            "replay.priorities");
    crafted("max priority 0", e_maxq, NULL, 0, FHD_ERR_CHECKPOINT_CORRUPT, "max_priority_q");
    crafted("staging head", e_head, NULL, 0, FHD_ERR_CHECKPOINT_CORRUPT, "staging.head");
    crafted("rng.seed", e_seed, NULL, 0, FHD_ERR_CHECKPOINT_CORRUPT, "rng.seed");
    crafted("recent_count", e_recent, NULL, 0, FHD_ERR_CHECKPOINT_CORRUPT, "recent_count");
    crafted("have_prev", e_have_prev, NULL, 0, FHD_ERR_CHECKPOINT_CORRUPT, "have_prev");
    crafted("NaN weight", e_nan_weight, NULL, 0, FHD_ERR_CHECKPOINT_CORRUPT,
            "\"online.torso.0.weight\": element 3 is NaN or Inf");
    crafted("Inf in replay storage", e_inf_obs, NULL, 0, FHD_ERR_CHECKPOINT_CORRUPT,
            "\"replay.obs\": element 7 is NaN or Inf");

    /* raw byte-level cases */
    raw("empty file", "", 0, "0 bytes");
    raw("7 bytes", "\x02\0\0\0\0\0\0", 7, "7 bytes");
    unsigned char *b = malloc(orig_len + 64);
    memcpy(b, orig, orig_len);
    const uint64_t lens[3] = {0, (uint64_t)300 << 20, (uint64_t)1 << 40};
    for (int i = 0; i < 3; i++) {
        for (int k = 0; k < 8; k++)
            b[k] = (unsigned char)(lens[i] >> (8 * k));
        raw("header length", b, orig_len, "header length");
    }
    memcpy(b, orig, orig_len);
    b[8] = ' ';
    raw("header not starting with {", b, orig_len, "does not start with '{'");
    /* a duplicate key, inserted textually right after the opening brace */
    const char dup[] = "\"__metadata__\":{},";
    size_t n = hdr_end - 8 + sizeof dup - 1;
    for (int k = 0; k < 8; k++)
        b[k] = (unsigned char)((uint64_t)n >> (8 * k));
    b[8] = '{';
    memcpy(b + 9, dup, sizeof dup - 1);
    memcpy(b + 9 + sizeof dup - 1, orig + 9, orig_len - 9);
    raw("duplicate key", b, orig_len + sizeof dup - 1, "duplicate");
    /* a valid safetensors file that is not a checkpoint */
    const char other[] = "{\"w\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}";
    n = sizeof other - 1;
    for (int k = 0; k < 8; k++)
        b[k] = (unsigned char)((uint64_t)n >> (8 * k));
    memcpy(b + 8, other, n);
    memset(b + 8 + n, 0, 4);
    raw("foreign safetensors file", b, 8 + n + 4, "not a foxhunt-dqn checkpoint");
    free(b);
}

int main(int argc, char **argv) {
    const int rc = ckpt_start(argc, argv, &api, dir, sizeof dir);
    if (rc >= 0)
        return rc;
    double t0 = ck_now();
    setup();
    test_truncations();
    test_flips();
    test_crafted();
    printf("full save-and-compare checks: %llu; total %.2f s\n", (unsigned long long)full_compares,
           ck_now() - t0);
    api->destroy(T);
    snap_free(&t_snap);
    snap_free(&r_snap);
    free(orig);
    free(accepted);
    free(t_bytes);
    return fhd_test_finish();
}
