/* test_prune.c - gradual magnitude pruning on the CPU backend (white-box through the core
 * objects; docs/design.md section 4, Pruning): the schedule and the pruned count, the mask
 * tensors' names and views, the selection against a brute-force sort by (|w|, index) on
 * weights full of ties (per tensor and global, torso and all), the update (masked weights and
 * gradients, the pruned weights' Adam moments 0, the target copying masked weights (before a
 * pruning update's selection), biases and out-of-scope weights never 0, the sparsity reached at
 * prune_end and kept after it), writes of pruned weights, checkpoints with masks and without, and
 * that cuda takes pruning with spectral norm and detailed_metrics. */
#include "ckpt_common.h" /* the safetensors reader/writer and checksums of the checkpoint tests */
#include "cpu_internal.h"
#include "learner.h"
#include "prune.h"

static fhd_learner *make(const char *cfg) {
    fhd_learner *L = NULL;
    fhd_error err = FHD_ERROR_INIT;
    if (fhd__learner_init(cfg, strlen(cfg), &L, &err) != FHD_OK) {
        printf("FAIL init %s: %s\n", cfg, err.message);
        exit(1);
    }
    return L;
}

static uint32_t lcg(uint32_t *s) {
    *s = *s * 1664525u + 1013904223u;
    return *s >> 8;
}

/* ---- the brute-force rule: sort (|w|, index) ascending, prune the first k ---------------- */

typedef struct {
    float a;
    uint64_t i;
} ent;

static int ent_cmp(const void *x, const void *y) {
    const ent *p = (const ent *)x, *q = (const ent *)y;
    if (p->a != q->a)
        return p->a < q->a ? -1 : 1;
    return p->i < q->i ? -1 : (p->i > q->i ? 1 : 0);
}

/* Expected masks (P, layout of one network) for sparsity s from weights W. */
static void expected_masks(const fhd_learner *L, const float *W, double s, float *mask) {
    const fhd__layout *lo = &L->lo;
    for (uint64_t i = 0; i < lo->num_params; i++)
        mask[i] = 1.0f;
    ent *e = (ent *)malloc(sizeof(ent) * lo->num_params);
    const int global = L->cfg.prune_global;
    uint64_t n = 0;
    for (uint32_t j = 0; j < lo->num_masks; j++) {
        fhd__tensor_ref t;
        fhd__layout_mask(lo, j, &t);
        for (uint64_t i = 0; i < t.count; i++)
            e[n++] = (ent){fabsf(W[t.offset + i]), t.offset + i};
        if (!global || j + 1 == lo->num_masks) {
            qsort(e, n, sizeof(ent), ent_cmp);
            const uint64_t k = fhd__prune_count(s, n);
            for (uint64_t q = 0; q < k; q++)
                mask[e[q].i] = 0.0f;
            n = 0;
        }
    }
    free(e);
}

/* ---- schedule and count ------------------------------------------------------------------ */

static void test_schedule(void) {
    fhd__config c;
    const char *js = "{\"obs_dim\":3,\"actions\":[2],\"prune_sparsity\":0.8,\"prune_start\":10,"
                     "\"prune_end\":30,\"prune_frequency\":5}";
    CHECK(fhd__config_parse(js, strlen(js), &c, NULL) == FHD_OK, "parse");
    double s = -1.0;
    CHECK(!fhd__prune_at(&c, 9, &s) && !fhd__prune_at(&c, 12, &s) && !fhd__prune_at(&c, 31, &s) &&
              !fhd__prune_at(&c, 35, &s),
          "pruning updates are start, start + f, ..., end only");
    CHECK(fhd__prune_at(&c, 10, &s) && s == 0.0, "sparsity 0 at start (%g)", s);
    CHECK(fhd__prune_at(&c, 15, &s) && s == 0.8 * (1.0 - 0.75 * 0.75 * 0.75), "cubic at 15 (%g)",
          s);
    CHECK(fhd__prune_at(&c, 30, &s) && s == 0.8, "the final sparsity at end (%g)", s);
    c.prune_end = c.prune_start = 7;
    CHECK(fhd__prune_at(&c, 7, &s) && s == 0.8 && !fhd__prune_at(&c, 12, &s),
          "end == start: one pruning update to the final sparsity");
    c.prune_sparsity = 0.0;
    CHECK(!fhd__prune_at(&c, 7, &s), "sparsity 0: never");
    /* Python's round(): halves to even */
    CHECK(fhd__prune_count(0.5, 3) == 2 && fhd__prune_count(0.5, 5) == 2 &&
              fhd__prune_count(0.125, 20) == 2 && fhd__prune_count(0.375, 4) == 2 &&
              fhd__prune_count(0.3, 10) == 3 && fhd__prune_count(0.0, 10) == 0 &&
              fhd__prune_count(0.999, 10) == 10 && fhd__prune_count(0.94, 10) == 9,
          "round half to even");
}

/* ---- names and views --------------------------------------------------------------------- */

static void test_names(void) {
    fhd_learner *L = make("{\"obs_dim\":3,\"actions\":[2,3],\"hidden\":[4,5],\"prune_sparsity\""
                          ":0.5,\"prune_scope\":\"all\"}");
    const char *want[] = {"online.torso.0.weight_mask", "online.torso.1.weight_mask",
                          "online.head.value.weight_mask", "online.head.advantage.weight_mask"};
    const uint64_t count[] = {12, 20, 5, 25};
    CHECK(L->lo.num_masks == 4, "4 masks (%u)", L->lo.num_masks);
    const uint32_t n = fhd__layout_tensor_count(&L->lo);
    for (uint32_t j = 0; j < 4; j++) {
        fhd__tensor_ref t, w;
        CHECK(fhd__layout_tensor(&L->lo, n - 4 + j, &t) == 0 && strcmp(t.name, want[j]) == 0 &&
                  t.buf == FHD_BUF_MASK && t.count == count[j],
              "tensor %u is %s (%s, %llu)", n - 4 + j, want[j], t.name,
              (unsigned long long)t.count);
        char wn[96];
        snprintf(wn, sizeof wn, "%.*s", (int)(strlen(want[j]) - 5), want[j]);
        CHECK(fhd__layout_tensor_find(&L->lo, wn, &w) == 0 && w.offset == t.offset &&
                  w.rank == t.rank && w.shape[0] == t.shape[0] && w.shape[1] == t.shape[1],
              "%s is the view of %s", want[j], wn);
    }
    float ones[25];
    CHECK(fhd__learner_tensor_read(L, want[3], ones, 25) == FHD_OK && ones[0] == 1.0f &&
              ones[24] == 1.0f,
          "a new learner's masks are ones");
    CHECK(fhd__learner_tensor_write(L, want[0], ones, 12) == FHD_ERR_INVALID_ARGUMENT,
          "masks are read-only through tensor_write");
    fhd__learner_destroy(L);
    L = make("{\"obs_dim\":3,\"actions\":[2],\"hidden\":[4],\"prune_sparsity\":0.5}");
    CHECK(L->lo.num_masks == 1, "torso scope: one mask per torso layer (%u)", L->lo.num_masks);
    fhd__learner_destroy(L);
    L = make("{\"obs_dim\":3,\"actions\":[2],\"hidden\":[4]}");
    fhd__tensor_ref t;
    CHECK(L->lo.num_masks == 0 &&
              fhd__layout_tensor_find(&L->lo, "online.torso.0.weight_mask", &t) != 0,
          "no pruning: no masks");
    fhd__learner_destroy(L);
}

/* ---- the selection against the brute-force sort ------------------------------------------- */

static void test_select(const char *cfg, const char *what) {
    fhd_learner *L = make(cfg);
    fhd__backend *b = L->be;
    const uint64_t P = b->P;
    float *want = (float *)malloc(sizeof(float) * P);
    uint32_t rng = 12345;
    static const double sp[] = {0.1, 0.25, 0.5, 0.7, 0.9, 0.99};
    for (int rep = 0; rep < 6; rep++) {
        for (uint64_t i = 0; i < P; i++) { /* a few magnitudes: ties everywhere, +-0 too */
            const float v = (float)(lcg(&rng) % 9) / 8.0f;
            b->params[i] = (lcg(&rng) & 1) ? -v : v;
        }
        for (uint64_t i = 0; i < P; i++)
            b->mask[i] = 1.0f;
        expected_masks(L, b->params, sp[rep], want);
        fhd__cpu_prune_select(b, sp[rep]);
        uint64_t bad = 0, zeros = 0, w0 = 0;
        for (uint64_t i = 0; i < P; i++) {
            bad += b->mask[i] != want[i];
            zeros += b->mask[i] == 0.0f;
            w0 += b->mask[i] == 0.0f && b->params[i] != 0.0f;
        }
        CHECK(bad == 0 && zeros > 0 && w0 == 0,
              "%s sparsity %g: masks as the (|w|, index) rule (%llu differ, %llu pruned, %llu "
              "pruned weights not 0)",
              what, sp[rep], (unsigned long long)bad, (unsigned long long)zeros,
              (unsigned long long)w0);
    }
    free(want);
    fhd__learner_destroy(L);
}

/* ---- the update -------------------------------------------------------------------------- */

#define B 16
static void batch(uint32_t S, uint32_t *rng, float *obs, float *next, int32_t *act, float *rew,
                  uint8_t *term) {
    for (uint32_t i = 0; i < B * S; i++) {
        obs[i] = (float)(lcg(rng) % 2001) / 1000.0f - 1.0f;
        next[i] = (float)(lcg(rng) % 2001) / 1000.0f - 1.0f;
    }
    for (uint32_t i = 0; i < B; i++) {
        act[i] = (int32_t)(lcg(rng) % 3);
        rew[i] = (float)(lcg(rng) % 200) / 100.0f - 1.0f;
        term[i] = (uint8_t)(lcg(rng) % 8 == 0);
    }
}

static void read_all(fhd_learner *L, int kind, float *dst, uint64_t n) {
    CHECK(L->ops->read(L->be, kind, 0, n, dst) == FHD_OK, "read state %d", kind);
}

static void test_update(void) {
    const char *cfg = "{\"obs_dim\":6,\"actions\":[3],\"hidden\":[32,16],\"batch_size\":16,"
                      "\"replay_capacity\":64,\"lr\":0.01,\"prune_sparsity\":0.75,"
                      "\"prune_start\":3,\"prune_end\":15,\"prune_frequency\":4,"
                      "\"target_update_interval\":5}";
    fhd_learner *L = make(cfg);
    const fhd__layout *lo = &L->lo;
    const uint64_t P = lo->num_params;
    float *p = (float *)malloc(sizeof(float) * 2 * P), *g = (float *)malloc(sizeof(float) * P);
    float *m = (float *)malloc(sizeof(float) * P);
    float *am = (float *)malloc(sizeof(float) * P), *av = (float *)malloc(sizeof(float) * P);
    float obs[B * 6], next[B * 6], rew[B];
    int32_t act[B];
    uint8_t term[B];
    uint32_t rng = 99;
    for (int u = 1; u <= 20; u++) {
        batch(6, &rng, obs, next, act, rew, term);
        fhd_batch hb = FHD_BATCH_INIT;
        hb.batch_size = B;
        hb.obs = obs;
        hb.next_obs = next;
        hb.actions = act;
        hb.rewards = rew;
        hb.terminated = term;
        CHECK(fhd__learner_train_batch(L, &hb, NULL) == FHD_OK, "update %d", u);
        read_all(L, FHD_STATE_PARAMS, p, 2 * P);
        read_all(L, FHD_STATE_GRAD, g, P);
        read_all(L, FHD_STATE_MASK, m, P);
        double s = 0.0;
        for (int t = 1; t <= u; t++)
            fhd__prune_at(&L->cfg, (uint64_t)t, &s); /* the latest pruning update's sparsity */
        uint64_t w_bad = 0, out_bad = 0;
        for (uint64_t i = 0; i < P; i++)
            w_bad += m[i] == 0.0f && p[i] != 0.0f;
        read_all(L, FHD_STATE_ADAM_M, am, P);
        read_all(L, FHD_STATE_ADAM_V, av, P);
        uint64_t mv_bad = 0;
        for (uint64_t i = 0; i < P; i++)
            mv_bad += m[i] == 0.0f && (am[i] != 0.0f || av[i] != 0.0f);
        CHECK(mv_bad == 0, "update %d: Adam moments of pruned weights 0 (%llu not)", u,
              (unsigned long long)mv_bad);
        for (uint32_t l = 0; l <= lo->L; l++) { /* biases and the head: never pruned */
            const fhd__layer *ly = &lo->layers[l];
            for (uint32_t i = 0; i < ly->out; i++)
                out_bad += m[ly->b_off + i] != 1.0f;
            for (uint64_t i = 0; l == lo->L && i < (uint64_t)ly->out * ly->in; i++)
                out_bad += m[ly->w_off + i] != 1.0f;
        }
        CHECK(w_bad == 0 && out_bad == 0,
              "update %d: pruned weights 0 (%llu not), biases and "
              "head kept (%llu not)",
              u, (unsigned long long)w_bad, (unsigned long long)out_bad);
        for (uint32_t j = 0; j < lo->num_masks; j++) {
            fhd__tensor_ref t;
            fhd__layout_mask(lo, j, &t);
            uint64_t z = 0;
            for (uint64_t i = 0; i < t.count; i++)
                z += m[t.offset + i] == 0.0f;
            CHECK(z == fhd__prune_count(s, t.count), "update %d %s: %llu zeros, want %llu", u,
                  t.name, (unsigned long long)z, (unsigned long long)fhd__prune_count(s, t.count));
        }
        if (u % 5 == 0) { /* the target copied the masked weights before the selection */
            double s_now;
            const int pruning = fhd__prune_at(&L->cfg, (uint64_t)u, &s_now);
            uint64_t differ = 0, newly = 0;
            for (uint64_t i = 0; i < P; i++) {
                differ += p[P + i] != p[i];
                newly += p[P + i] != p[i] && p[i] == 0.0f && m[i] == 0.0f;
            }
            CHECK(differ == newly && (pruning ? newly > 0 : differ == 0),
                  "update %d: the target is the online network masked before this update's "
                  "selection (%llu differ, %llu newly pruned)",
                  u, (unsigned long long)differ, (unsigned long long)newly);
        }
    }
    /* the gradient of update 20 is masked (the mask did not change at 20) */
    uint64_t g_bad = 0, g_nz = 0;
    for (uint64_t i = 0; i < P; i++) {
        g_bad += m[i] == 0.0f && g[i] != 0.0f;
        g_nz += m[i] == 1.0f && g[i] != 0.0f;
    }
    CHECK(g_bad == 0 && g_nz > 0, "grad.* 0 where pruned (%llu not), nonzero elsewhere (%llu)",
          (unsigned long long)g_bad, (unsigned long long)g_nz);

    /* a host write of a pruned weight: the mask applies */
    fhd__tensor_ref w0;
    fhd__layout_tensor_find(lo, "online.torso.0.weight", &w0);
    float *w = (float *)malloc(sizeof(float) * w0.count);
    for (uint64_t i = 0; i < w0.count; i++)
        w[i] = 0.5f;
    CHECK(fhd__learner_tensor_write(L, "online.torso.0.weight", w, w0.count) == FHD_OK, "write");
    CHECK(fhd__learner_tensor_read(L, "online.torso.0.weight", w, w0.count) == FHD_OK, "read");
    uint64_t zero = 0, half = 0;
    for (uint64_t i = 0; i < w0.count; i++) {
        zero += w[i] == 0.0f && m[w0.offset + i] == 0.0f;
        half += w[i] == 0.5f && m[w0.offset + i] == 1.0f;
    }
    CHECK(zero + half == w0.count && zero == fhd__prune_count(0.75, w0.count),
          "tensor_write: pruned entries stay 0 (%llu), the rest written (%llu)",
          (unsigned long long)zero, (unsigned long long)half);

    /* checkpoint: masks saved and restored; a learner resumed equals the original */
    char path[] = "/tmp/fhd_prune_ckpt_XXXXXX";
    int fd = mkstemp(path);
    close(fd);
    CHECK(fhd__checkpoint_save(L, path, 0) == FHD_OK, "save: %s", L->err);
    fhd_learner *R = make(cfg);
    CHECK(fhd__checkpoint_load(R, path, 0) == FHD_OK, "load: %s", R->err);
    float *p2 = (float *)malloc(sizeof(float) * 2 * P), *m2 = (float *)malloc(sizeof(float) * P);
    read_all(L, FHD_STATE_PARAMS, p, 2 * P);
    read_all(R, FHD_STATE_PARAMS, p2, 2 * P);
    read_all(R, FHD_STATE_MASK, m2, P);
    CHECK(memcmp(m, m2, sizeof(float) * P) == 0 && memcmp(p, p2, sizeof(float) * 2 * P) == 0,
          "checkpoint: masks and parameters restored");
    {
        FILE *f = fopen(path, "r+b");
        uint64_t hlen = 0;
        CHECK(f && fread(&hlen, 8, 1, f) == 1, "header length");
        char *h = (char *)malloc(hlen + 1);
        CHECK(fread(h, 1, hlen, f) == hlen, "header");
        h[hlen] = 0;
        fclose(f);
        CHECK(strstr(h, "online.torso.0.weight_mask") != NULL, "the file names the mask");
        free(h);
    }
    fhd__learner_destroy(R);
    /* into a learner without pruning: a mismatch that names the key, not a damaged file */
    R = make("{\"obs_dim\":6,\"actions\":[3],\"hidden\":[32,16],\"batch_size\":16,"
             "\"replay_capacity\":64,\"lr\":0.01,\"target_update_interval\":5}");
    CHECK(fhd__checkpoint_load(R, path, 0) == FHD_ERR_CHECKPOINT_MISMATCH &&
              strstr(R->err, "prune_sparsity") != NULL,
          "masks into a learner without pruning: the config difference is named (%s)", R->err);
    fhd__learner_destroy(R);
    /* a mask holding 0.5 (its checksums restamped): refused as damaged, the learner unchanged */
    {
        size_t len = 0, b0, b1;
        unsigned char *bytes = fhd_test_read_file(path, &len);
        st_file f;
        CHECK(bytes && st_parse(bytes, len, &f) == 0 &&
                  st_range(&f, "online.torso.1.weight_mask", &b0, &b1) == 0 && b1 > b0,
              "the file holds online.torso.1.weight_mask");
        const float bad_value = 0.5f;
        memcpy(f.data + b0 + 4 * 3, &bad_value, 4);
        st_restamp_tensor(&f, "online.torso.1.weight_mask");
        st_restamp_metadata(&f);
        char bad[64];
        snprintf(bad, sizeof bad, "%s.bad", path);
        CHECK(st_write(bad, &f, NULL, 0) == 0, "write the damaged file");
        R = make(cfg);
        float *r0 = (float *)malloc(sizeof(float) * P), *r1 = (float *)malloc(sizeof(float) * P);
        read_all(R, FHD_STATE_MASK, r0, P);
        CHECK(fhd__checkpoint_load(R, bad, 0) == FHD_ERR_CHECKPOINT_CORRUPT &&
                  strstr(R->err, "online.torso.1.weight_mask") &&
                  strstr(R->err, "element 3 is 0.5"),
              "a mask of 0.5 is refused (%s)", R->err);
        read_all(R, FHD_STATE_MASK, r1, P);
        CHECK(memcmp(r0, r1, sizeof(float) * P) == 0, "the refused load left the masks");
        free(r0);
        free(r1);
        fhd__learner_destroy(R);
        st_free(&f);
        free(bytes);
        unlink(bad);
    }
    unlink(path);
    /* an old learner's checkpoint (no masks) loads into a learner without pruning only */
    fhd_learner *O = make("{\"obs_dim\":6,\"actions\":[3],\"hidden\":[32,16],\"batch_size\":16,"
                          "\"replay_capacity\":64,\"lr\":0.01,\"target_update_interval\":5}");
    fd = mkstemp(path);
    close(fd);
    CHECK(fhd__checkpoint_save(O, path, 0) == FHD_OK, "save without masks");
    fhd_learner *O2 = make("{\"obs_dim\":6,\"actions\":[3],\"hidden\":[32,16],\"batch_size\":16,"
                           "\"replay_capacity\":64,\"lr\":0.01,\"target_update_interval\":5}");
    CHECK(fhd__checkpoint_load(O2, path, 0) == FHD_OK, "no masks: loads");
    R = make(cfg);
    CHECK(fhd__checkpoint_load(R, path, 0) == FHD_ERR_CHECKPOINT_MISMATCH &&
              strstr(R->err, "prune_sparsity") != NULL,
          "no masks into a pruning learner: the config difference is named (%s)", R->err);
    unlink(path);
    fhd__learner_destroy(O);
    fhd__learner_destroy(O2);
    fhd__learner_destroy(R);
    free(p);
    free(p2);
    free(g);
    free(m);
    free(m2);
    free(am);
    free(av);
    free(w);
    fhd__learner_destroy(L);
}

/* cuda prunes alone, with spectral norm and with detailed_metrics: none of them is refused
 * before the module is loaded (here the backend may be missing, at $.backend), and auto does not
 * take the cpu for them. */
static void test_cuda_accepts(void) {
    const char *extra[4] = {"", ",\"spectral_norm\":\"last\"", ",\"spectral_norm\":\"all\"",
                            ",\"detailed_metrics\":true"};
    for (int k = 0; k < 4; k++) {
        char cfg[256];
        snprintf(cfg, sizeof cfg,
                 "{\"obs_dim\":3,\"actions\":[2],\"backend\":\"cuda\",\"prune_sparsity\":0.5%s}",
                 extra[k]);
        fhd_learner *L = NULL;
        fhd_error err = FHD_ERROR_INIT;
        const int32_t rc = fhd__learner_init(cfg, strlen(cfg), &L, &err);
        CHECK(rc == FHD_OK ||
                  (rc == FHD_ERR_BACKEND_UNAVAILABLE && strcmp(err.path, "$.backend") == 0),
              "cuda does not refuse pruning%s (%d, %s: %s)", extra[k], rc, err.path, err.message);
        fhd__learner_destroy(L);
    }
    fhd_learner *L = make("{\"obs_dim\":3,\"actions\":[2],\"backend\":\"auto\","
                          "\"prune_sparsity\":0.5,\"spectral_norm\":\"all\","
                          "\"detailed_metrics\":true}");
    CHECK(strstr(L->fallback_reason, "pruning") == NULL,
          "auto does not fall back for pruning with spectral norm (%s: %s)", L->ops->name,
          L->fallback_reason);
    fhd__learner_destroy(L);
}

int main(void) {
    test_schedule();
    test_names();
    test_select("{\"obs_dim\":7,\"actions\":[3,2],\"hidden\":[33,17],\"prune_sparsity\":0.5}",
                "per tensor, torso");
    test_select("{\"obs_dim\":7,\"actions\":[3,2],\"hidden\":[33,17],\"prune_sparsity\":0.5,"
                "\"prune_global\":true,\"prune_scope\":\"all\"}",
                "global, all");
    test_select("{\"obs_dim\":7,\"actions\":[4],\"hidden\":[300],\"dueling\":false,"
                "\"prune_sparsity\":0.5,\"prune_scope\":\"all\"}",
                "per tensor, all, plain head");
    test_select("{\"obs_shape\":[2,9,9],\"conv\":[{\"out\":4,\"kernel\":3,\"stride\":2}],"
                "\"actions\":[3],\"hidden\":[16],\"prune_sparsity\":0.5,\"prune_global\":true}",
                "global, conv torso");
    test_update();
    test_cuda_accepts();
    return fhd_test_finish();
}
