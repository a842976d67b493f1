/* test_ckpt_trim.c - a checkpoint with the replay holds only the used rows of the replay
 * storage (white-box through the core objects; docs/checkpoints.md "Replay storage").
 *
 * For the frame-once replay (uint8 frames, frame_stack 4, prioritized) and the row replay,
 * with a replay far from full: the file is bounded by the used rows (not the capacity); a
 * learner with another, longer history loads it and then holds every state kind of the saved
 * learner over the whole storage (the unused rows are zero, frame_refs FHD_FRAME_NONE), saves
 * the same bytes, and trains on bitwise as the original; the same file with the storage at
 * full length (what earlier versions wrote) loads to the same state; a shortened tensor whose
 * length disagrees with the counters, or longer than the storage, is refused as damaged and
 * leaves the learner as it was; a replay that has wrapped is written whole; a frame replay
 * saved before its first transition was stored resumes exactly.
 * usage: test_ckpt_trim SCRATCH_DIR */
#include "ckpt_common.h"
#include "checkpoint_state.h"
#include "learner.h"

#define E 2
#define FS 4              /* frame_stack */
#define PIX (16 * 16)     /* bytes of one frame */
#define PS (FS * PIX)     /* bytes of one observation */

static const char *pix_cfg =
    "{\"obs_shape\": [4, 16, 16], \"obs_dtype\": \"uint8\", \"frame_stack\": 4, "
    "\"actions\": [4, 3], \"hidden\": [16], \"replay\": \"prioritized\", \"batch_size\": 4, "
    "\"replay_capacity\": 4096, \"learning_starts\": 8, \"num_envs\": 2, \"n_step\": 2, "
    "\"seed\": 5}";
static const char *row_cfg =
    "{\"obs_dim\": 4, \"actions\": [3, 2], \"hidden\": [16], \"batch_size\": 4, "
    "\"replay_capacity\": %u, \"learning_starts\": 8, \"num_envs\": 2, \"n_step\": 2, "
    "\"seed\": 6}";

static fhd_learner *create(const char *cfg) {
    fhd_learner *L = NULL;
    fhd_error err = FHD_ERROR_INIT;
    if (fhd__learner_init(cfg, strlen(cfg), &L, &err) != FHD_OK) {
        printf("FAIL create: %s\n", err.message);
        exit(1);
    }
    return L;
}

/* Steps [t0, t0 + n) of a deterministic stream (`salt` tells streams apart); pixel learners
 * see stacks of frames that shift by one frame a step, row learners 4 floats. */
static void observe(fhd_learner *L, int t0, int n, int salt) {
    static uint8_t obs[E * PS], next[E * PS];
    float fobs[E * 4], fnext[E * 4], rew[E];
    int32_t act[E * 2];
    uint8_t term[E] = {0, 0}, trunc[E] = {0, 0};
    const int pix = L->cfg.num_obs_shape > 0;
    for (int t = t0; t < t0 + n; t++) {
        for (int e = 0; e < E; e++) {
            for (int j = 0; j < FS; j++)
                for (int i = 0; i < PIX; i++) {
                    obs[e * PS + j * PIX + i] = (uint8_t)(i * 3 + e * 29 + (t + j) * 11 + salt);
                    next[e * PS + j * PIX + i] =
                        (uint8_t)(i * 3 + e * 29 + (t + 1 + j) * 11 + salt);
                }
            for (int i = 0; i < 4; i++) {
                fobs[e * 4 + i] = (float)((t * 7 + i * 3 + e + salt) % 19) / 19.0f;
                fnext[e * 4 + i] = (float)(((t + 1) * 7 + i * 3 + e + salt) % 19) / 19.0f;
            }
            act[e * 2] = (t + e + salt) % 3;
            act[e * 2 + 1] = (t * 2 + e) % 2;
            rew[e] = (float)((t + e) % 3) - 1.0f;
            term[e] = (t + e) % 23 == 22;
        }
        fhd_transitions tr = FHD_TRANSITIONS_INIT;
        tr.num_envs = E;
        if (pix) {
            tr.obs_u8 = obs;
            tr.next_obs_u8 = next;
        } else {
            tr.obs = fobs;
            tr.next_obs = fnext;
        }
        tr.actions = act;
        tr.rewards = rew;
        tr.terminated = term;
        tr.truncated = trunc;
        int32_t rc = fhd__learner_observe(L, &tr);
        if (rc != FHD_OK) {
            printf("FAIL observe: %s\n", L->err);
            exit(1);
        }
    }
}

/* Every backend state of a checkpoint, over the whole storage, and the backend scalars equal
 * in a and b; returns the number of states compared. */
static int same_state(fhd_learner *a, fhd_learner *b, const char *what) {
    fhd__ck_catalog cat;
    CHECK(fhd__ck_catalog_build(&a->cfg, &a->lo, 1, &cat) == FHD_OK, "catalogue");
    int n = 0;
    for (uint32_t i = 0; i < cat.n; i++) {
        const fhd__ck_tensor *t = &cat.t[i];
        if (t->source != FHD_CK_SRC_BACKEND)
            continue;
        size_t bytes = (size_t)t->bytes;
        unsigned char *x = malloc(bytes + 1), *y = malloc(bytes + 1);
        CHECK(a->ops->read(a->be, t->kind, t->offset, t->count, x) == FHD_OK &&
                  b->ops->read(b->be, t->kind, t->offset, t->count, y) == FHD_OK,
              "%s: read %s", what, t->name);
        size_t k = 0;
        while (k < bytes && x[k] == y[k])
            k++;
        CHECK(k == bytes, "%s: %s differs from byte %zu of %zu", what, t->name, k, bytes);
        free(x);
        free(y);
        n++;
    }
    fhd__ck_catalog_free(&cat);
    fhd__backend_scalars sa, sb;
    a->ops->get_scalars(a->be, &sa);
    b->ops->get_scalars(b->be, &sb);
    CHECK(memcmp(&sa, &sb, sizeof sa) == 0, "%s: backend scalars differ (size %" PRIu64
          " / %" PRIu64 ")", what, sa.replay_size, sb.replay_size);
    return n;
}

static uint64_t shape0(const st_file *f, const char *name) {
    return (uint64_t)json_integer_value(
        json_array_get(json_object_get(json_object_get(f->header, name), "shape"), 0));
}

/* Tensor `name` of f resized to `rows` rows (new rows hold `fill`), every data_offsets moved,
 * the checksums restamped: the file another writer would produce. */
static void st_resize(st_file *f, const char *name, uint64_t rows, int fill) {
    json_t *e = json_object_get(f->header, name);
    json_t *shape = json_object_get(e, "shape");
    uint64_t r0 = shape0(f, name);
    size_t b0 = 0, e0 = 0;
    CHECK(st_range(f, name, &b0, &e0) == 0, "no tensor %s", name);
    const size_t row = r0 ? (e0 - b0) / r0 : 0, nb = (size_t)rows * row;
    unsigned char *d = malloc(f->data_len - (e0 - b0) + nb + 1);
    memcpy(d, f->data, b0);
    size_t keep = nb < e0 - b0 ? nb : e0 - b0;
    memcpy(d + b0, f->data + b0, keep);
    memset(d + b0 + keep, fill, nb - keep);
    memcpy(d + b0 + nb, f->data + e0, f->data_len - e0);
    const char *key;
    json_t *v;
    json_object_foreach(f->header, key, v) { /* tensors after this one move */
        json_t *o = json_object_get(v, "data_offsets");
        if (!o || strcmp(key, name) == 0)
            continue;
        size_t b = (size_t)json_integer_value(json_array_get(o, 0));
        size_t en = (size_t)json_integer_value(json_array_get(o, 1));
        if (b >= e0) {
            json_array_set_new(o, 0, json_integer((json_int_t)(b - (e0 - b0) + nb)));
            json_array_set_new(o, 1, json_integer((json_int_t)(en - (e0 - b0) + nb)));
        }
    }
    json_array_set_new(json_object_get(e, "data_offsets"), 1, json_integer((json_int_t)(b0 + nb)));
    json_array_set_new(shape, 0, json_integer((json_int_t)rows));
    free(f->data);
    f->data = d;
    f->data_len = f->data_len - (e0 - b0) + nb;
    st_restamp_tensor(f, name);
    st_restamp_metadata(f);
}

static unsigned char *save_read(fhd_learner *L, const char *path, size_t *n) {
    CHECK(fhd__checkpoint_save(L, path, FHD_CKPT_INCLUDE_REPLAY) == FHD_OK, "save: %s",
          L->err);
    return fhd_test_read_file(path, n);
}

static uint64_t file_size(const char *path) {
    struct stat st;
    return stat(path, &st) == 0 ? (uint64_t)st.st_size : 0;
}

static const char *const pix_rows[] = {"replay.frames", "replay.frame_refs"};
static const char *const pix_slots[] = {"replay.obs_ids", "replay.next_ids", "replay.actions",
                                        "replay.returns", "replay.discounts",
                                        "replay.priorities"};
static const char *const row_slots[] = {"replay.obs", "replay.next_obs", "replay.actions",
                                        "replay.returns", "replay.discounts"};

/* A doctored copy of `src` (tensor `name` at `rows` rows) is refused by L, which stays as
 * `ref` is. */
static void refused(const char *dir, const char *src, const char *name, uint64_t rows,
                    fhd_learner *L, fhd_learner *ref, const char *expect) {
    size_t n;
    unsigned char *b = fhd_test_read_file(src, &n);
    st_file f;
    CHECK(b && st_parse(b, n, &f) == 0, "parse %s", src);
    st_resize(&f, name, rows, 0);
    char path[600];
    snprintf(path, sizeof path, "%s/doctored.safetensors", dir);
    CHECK(st_write(path, &f, NULL, 0) == 0, "write %s", path);
    int32_t rc = fhd__checkpoint_load(L, path, FHD_CKPT_INCLUDE_REPLAY);
    const char *msg = L->err;
    CHECK(rc == FHD_ERR_CHECKPOINT_CORRUPT && strstr(msg, name) && strstr(msg, expect),
          "%s at %" PRIu64 " rows: rc %d: %s", name, rows, rc, msg);
    same_state(L, ref, "after a refused load");
    st_free(&f);
    free(b);
}

static void test_pixels(const char *dir) {
    char a_path[600], b_path[600], c_path[600], full_path[600];
    snprintf(a_path, sizeof a_path, "%s/pix_replay.safetensors", dir);
    snprintf(b_path, sizeof b_path, "%s/pix_noreplay.safetensors", dir);
    snprintf(c_path, sizeof c_path, "%s/pix_again.safetensors", dir);
    snprintf(full_path, sizeof full_path, "%s/pix_full.safetensors", dir);
    fhd_learner *L = create(pix_cfg);
    observe(L, 0, 20, 0);
    CHECK(fhd__learner_train(L, 3, NULL) == FHD_OK, "train: %s", L->err);
    CHECK(fhd__checkpoint_save(L, a_path, FHD_CKPT_INCLUDE_REPLAY) == FHD_OK, "save: %s",
          L->err);
    CHECK(fhd__checkpoint_save(L, b_path, 0) == FHD_OK, "save: %s", L->err);
    uint64_t fc[3];
    CHECK(L->ops->read(L->be, FHD_STATE_FRAME_COUNTERS, 0, 3, fc) == FHD_OK, "counters");
    const uint64_t N = L->cfg.replay_capacity, M = fhd__config_frame_capacity(&L->cfg);
    CHECK(fc[0] > 0 && fc[0] < M && fc[1] > 0 && fc[1] < N, "frames %" PRIu64 ", T %" PRIu64,
          fc[0], fc[1]);
    /* the replay's bytes in the file: the used rows, the staging and step state, the header */
    const uint64_t used = fc[0] * (PIX + 8) + fc[1] * (2 * FS * 8 + 2 * 4 + 4 + 4 + 8);
    const uint64_t staging = E * 2 * (FS * 8 + 2 * 4 + 4) + E * (FS * 8 + PS + 2 * 4 + 8 + 8 + 8);
    const uint64_t whole = M * (PIX + 8) + N * (2 * FS * 8 + 2 * 4 + 4 + 4 + 8);
    const uint64_t sa = file_size(a_path), sb = file_size(b_path);
    printf("pixels: %" PRIu64 " frames, %" PRIu64 " transitions: file %" PRIu64
           " bytes (%" PRIu64 " without the replay; the whole storage is %" PRIu64 ")\n",
           fc[0], fc[1], sa, sb, whole);
    CHECK(sa > sb && sa - sb <= used + staging + 8192,
          "the replay takes %" PRIu64 " bytes of the file; its used rows %" PRIu64, sa - sb,
          used);
    size_t n;
    unsigned char *bytes = fhd_test_read_file(a_path, &n);
    st_file f;
    CHECK(bytes && st_parse(bytes, n, &f) == 0, "parse");
    for (size_t i = 0; i < 2; i++)
        CHECK(shape0(&f, pix_rows[i]) == fc[0], "%s has %" PRIu64 " rows", pix_rows[i],
              shape0(&f, pix_rows[i]));
    for (size_t i = 0; i < 6; i++)
        CHECK(shape0(&f, pix_slots[i]) == fc[1], "%s has %" PRIu64 " rows", pix_slots[i],
              shape0(&f, pix_slots[i]));

    /* a learner with another history that fills (and wraps) its storage loads the file */
    fhd_learner *R = create(pix_cfg);
    observe(R, 0, 2600, 77);
    CHECK(fhd__learner_train(R, 2, NULL) == FHD_OK, "train R");
    fhd_learner *R0 = create(pix_cfg); /* R before the doctored loads */
    observe(R0, 0, 2600, 77);
    CHECK(fhd__learner_train(R0, 2, NULL) == FHD_OK, "train R0");
    refused(dir, a_path, "replay.returns", fc[1] - 1, R, R0, "used");
    refused(dir, a_path, "replay.frames", fc[0] + 1, R, R0, "used");
    refused(dir, a_path, "replay.frame_refs", fc[0] - 1, R, R0, "used");
    refused(dir, a_path, "replay.priorities", 0, R, R0, "used");
    refused(dir, a_path, "replay.obs_ids", N + 1, R, R0, "shape");
    CHECK(fhd__checkpoint_load(R, a_path, FHD_CKPT_INCLUDE_REPLAY) == FHD_OK, "load: %s",
          R->err);
    CHECK(same_state(L, R, "loaded") >= 12, "the network, optimiser and replay states");
    CHECK(fhd__checkpoint_save(R, c_path, FHD_CKPT_INCLUDE_REPLAY) == FHD_OK, "save R");
    size_t n2;
    unsigned char *again = fhd_test_read_file(c_path, &n2);
    CHECK(again && n2 == n && memcmp(again, bytes, n) == 0, "saved again: other bytes");
    free(again);

    /* the file with the storage at full length (earlier versions) loads to the same state */
    for (size_t i = 0; i < 2; i++)
        st_resize(&f, pix_rows[i], M, i == 1 ? 0xff : 0);
    for (size_t i = 0; i < 6; i++)
        st_resize(&f, pix_slots[i], N, 0);
    CHECK(st_write(full_path, &f, NULL, 0) == 0, "write the full file");
    CHECK(file_size(full_path) > whole, "the full file holds the whole storage");
    printf("pixels: the same state at full length: %" PRIu64 " bytes\n", file_size(full_path));
    fhd_learner *Q = create(pix_cfg); /* a longer history than L's, not wrapped */
    observe(Q, 0, 60, 33);
    CHECK(fhd__checkpoint_load(Q, full_path, FHD_CKPT_INCLUDE_REPLAY) == FHD_OK,
          "load the full file: %s", Q->err);
    same_state(L, Q, "loaded at full length");

    /* without the replay: an empty replay, whatever the learner held (wrapped or not) */
    fhd_learner *F = create(pix_cfg), *G = create(pix_cfg);
    observe(G, 0, 60, 3);
    CHECK(fhd__checkpoint_load(F, b_path, 0) == FHD_OK &&
              fhd__checkpoint_load(G, b_path, 0) == FHD_OK &&
              fhd__checkpoint_load(R0, b_path, 0) == FHD_OK,
          "load without the replay: %s", R0->err);
    same_state(F, G, "flags 0 over 60 steps");
    same_state(F, R0, "flags 0 over a wrapped replay");
    fhd__learner_destroy(F);
    fhd__learner_destroy(G);

    /* training goes on bitwise alike, past the wrap of both rings */
    observe(L, 20, 2500, 0);
    observe(R, 20, 2500, 0);
    observe(Q, 20, 2500, 0);
    CHECK(fhd__learner_train(L, 4, NULL) == FHD_OK && fhd__learner_train(R, 4, NULL) == FHD_OK &&
              fhd__learner_train(Q, 4, NULL) == FHD_OK,
          "train on");
    same_state(L, R, "trained on");
    same_state(L, Q, "trained on (full file)");
    /* wrapped: the whole storage */
    CHECK(L->ops->read(L->be, FHD_STATE_FRAME_COUNTERS, 0, 3, fc) == FHD_OK && fc[0] >= M &&
              fc[1] >= N,
          "both rings wrapped (%" PRIu64 " frames, %" PRIu64 " transitions)", fc[0], fc[1]);
    st_free(&f);
    free(bytes);
    bytes = save_read(L, a_path, &n);
    CHECK(bytes && st_parse(bytes, n, &f) == 0, "parse");
    CHECK(shape0(&f, "replay.frames") == M && shape0(&f, "replay.actions") == N,
          "a wrapped replay is written whole");
    st_free(&f);
    free(bytes);
    fhd__learner_destroy(L);
    fhd__learner_destroy(R);
    fhd__learner_destroy(R0);
    fhd__learner_destroy(Q);
}

static void test_rows(const char *dir) {
    char cfg[512], a_path[600], b_path[600];
    snprintf(cfg, sizeof cfg, row_cfg, 4096u);
    snprintf(a_path, sizeof a_path, "%s/row_replay.safetensors", dir);
    snprintf(b_path, sizeof b_path, "%s/row_noreplay.safetensors", dir);
    fhd_learner *L = create(cfg), *R = create(cfg), *R0 = create(cfg);
    observe(L, 0, 30, 0);
    CHECK(fhd__learner_train(L, 3, NULL) == FHD_OK, "train");
    CHECK(fhd__checkpoint_save(L, a_path, FHD_CKPT_INCLUDE_REPLAY) == FHD_OK &&
              fhd__checkpoint_save(L, b_path, 0) == FHD_OK,
          "save: %s", L->err);
    fhd__backend_scalars s;
    L->ops->get_scalars(L->be, &s);
    const uint64_t per_slot = 2 * 4 * 4 + 2 * 4 + 4 + 4;
    const uint64_t sa = file_size(a_path), sb = file_size(b_path);
    printf("rows: %" PRIu64 " transitions: file %" PRIu64 " bytes (%" PRIu64
           " without the replay; the whole storage is %" PRIu64 ")\n",
           s.replay_size, sa, sb, 4096 * per_slot);
    CHECK(s.replay_size > 0 && sa - sb <= s.replay_size * per_slot + 4096,
          "the replay takes %" PRIu64 " bytes", sa - sb);
    observe(R, 0, 3000, 9);
    observe(R0, 0, 3000, 9);
    refused(dir, a_path, "replay.next_obs", s.replay_size + 1, R, R0, "used");
    CHECK(fhd__checkpoint_load(R, a_path, FHD_CKPT_INCLUDE_REPLAY) == FHD_OK, "load: %s",
          R->err);
    same_state(L, R, "rows: loaded");
    observe(L, 30, 20, 0);
    observe(R, 30, 20, 0);
    CHECK(fhd__learner_train(L, 3, NULL) == FHD_OK && fhd__learner_train(R, 3, NULL) == FHD_OK,
          "train on");
    same_state(L, R, "rows: trained on");
    fhd__learner_destroy(L);
    fhd__learner_destroy(R);
    fhd__learner_destroy(R0);
    /* a wrapped ring: every slot */
    snprintf(cfg, sizeof cfg, row_cfg, 64u);
    L = create(cfg);
    observe(L, 0, 40, 0);
    size_t n;
    unsigned char *bytes = save_read(L, a_path, &n);
    st_file f;
    CHECK(bytes && st_parse(bytes, n, &f) == 0, "parse");
    for (size_t i = 0; i < 5; i++)
        CHECK(shape0(&f, row_slots[i]) == 64, "%s of a wrapped ring has %" PRIu64 " rows",
              row_slots[i], shape0(&f, row_slots[i]));
    R = create(cfg);
    CHECK(fhd__checkpoint_load(R, a_path, FHD_CKPT_INCLUDE_REPLAY) == FHD_OK, "load wrapped");
    same_state(L, R, "rows: wrapped");
    st_free(&f);
    free(bytes);
    fhd__learner_destroy(L);
    fhd__learner_destroy(R);
}

/* Saved before the first transition was stored (n_step 3, one step): frames but no live
 * transition; the load keeps the frames the staging refers to. */
static void test_early(const char *dir) {
    const char *cfg =
        "{\"obs_shape\": [4, 16, 16], \"obs_dtype\": \"uint8\", \"frame_stack\": 4, "
        "\"actions\": [4, 3], \"hidden\": [16], \"batch_size\": 4, \"replay_capacity\": 64, "
        "\"num_envs\": 2, \"n_step\": 3, \"seed\": 5}";
    fhd_learner *A = create(cfg), *B = create(cfg);
    observe(A, 0, 1, 0);
    observe(B, 0, 40, 8); /* B's storage wrapped */
    char path[600];
    snprintf(path, sizeof path, "%s/early.safetensors", dir);
    uint64_t fc[3];
    CHECK(A->ops->read(A->be, FHD_STATE_FRAME_COUNTERS, 0, 3, fc) == FHD_OK && fc[0] > 0 &&
              fc[1] == 0,
          "frames %" PRIu64 ", transitions %" PRIu64, fc[0], fc[1]);
    CHECK(fhd__checkpoint_save(A, path, FHD_CKPT_INCLUDE_REPLAY) == FHD_OK, "save: %s", A->err);
    CHECK(fhd__checkpoint_load(B, path, FHD_CKPT_INCLUDE_REPLAY) == FHD_OK, "load: %s", B->err);
    same_state(A, B, "saved before the first transition");
    observe(A, 1, 5, 0);
    observe(B, 1, 5, 0);
    same_state(A, B, "saved before the first transition, 5 steps on");
    fhd__learner_destroy(A);
    fhd__learner_destroy(B);
}

int main(int argc, char **argv) {
    if (argc < 2) {
        printf("usage: test_ckpt_trim SCRATCH_DIR\n");
        return 2;
    }
    make_dirs(argv[1]);
    test_pixels(argv[1]);
    test_rows(argv[1]);
    test_early(argv[1]);
    return fhd_test_finish();
}
