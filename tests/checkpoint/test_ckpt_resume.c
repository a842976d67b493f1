/* test_ckpt_resume.c - checkpoints restore the learner exactly.
 *
 *   1. exact resume: 2,000 updates in one run versus 1,000, save (with replay), load into a new
 *      learner, 1,000 more: bitwise identical tensors, counters and replay (step loop of a
 *      synthetic environment, n_step 3, prioritised replay, spectral norm, 2 envs, 2 branches);
 *   2. save -> load -> save gives the same bytes;
 *   3. without FHD_CKPT_INCLUDE_REPLAY: networks, optimiser, counters restored, replay, staging
 *      and step state emptied exactly like a new learner's;
 *   4. config differences: architecture -> FHD_ERR_CHECKPOINT_MISMATCH naming the field and
 *      both values, learner unchanged; resume_overridable keys keep the learner's values;
 *   5. argument and I/O errors;
 *   6. the file layout read back with an independent parser (header, dtypes, shapes, offsets,
 *      checksums, metadata).
 * Usage: test_ckpt_resume <libfoxhunt_dqn.so> <scratch dir>
 */
#include "ckpt_common.h"

static const fhd_api_v1 *api;
static char dir[512];

/* The test config: base keys, then `extra` (a JSON object's members) replacing them. */
static const char *cfg_base =
    "{\"obs_dim\": 4, \"actions\": [3, 2], \"hidden\": [16, 16], \"dueling\": true, "
    "\"spectral_norm\": \"all\", \"double_dqn\": true, \"n_step\": 3, \"gamma\": 0.97, "
    "\"replay\": \"prioritized\", \"replay_capacity\": 300, \"num_envs\": 2, \"seed\": 7, "
    "\"batch_size\": 16, \"learning_starts\": 64, \"train_freq\": 2, \"gradient_steps\": 1, "
    "\"epsilon_decay_steps\": 3000, \"target_update_interval\": 100, \"lr\": 0.001}";

static char *cfgf(const char *extra) {
    static char buf[4][2048];
    static int k;
    k = (k + 1) % 4;
    char ex[1024];
    snprintf(ex, sizeof ex, "{%s}", extra);
    json_t *b = json_loads(cfg_base, 0, NULL), *e = json_loads(ex, 0, NULL);
    json_object_update(b, e);
    char *s = json_dumps(b, JSON_COMPACT);
    snprintf(buf[k], sizeof buf[k], "%s", s);
    free(s);
    json_decref(b);
    json_decref(e);
    return buf[k];
}

static void path_of(char *out, size_t cap, const char *name) {
    snprintf(out, cap, "%s/%s", dir, name);
}

static snapshot sa, sb, sc;

/* ---- 1, 2, 3 -------------------------------------------------------------------------------- */

static void test_resume(void) {
    char p_mid[600], p_a[600], p_b[600], p_nr[600], p_f[600], p_u[600];
    path_of(p_mid, sizeof p_mid, "resume_mid.safetensors");
    path_of(p_a, sizeof p_a, "resume_a.safetensors");
    path_of(p_b, sizeof p_b, "resume_b.safetensors");
    path_of(p_nr, sizeof p_nr, "noreplay.safetensors");
    path_of(p_f, sizeof p_f, "fresh.safetensors");
    path_of(p_u, sizeof p_u, "used.safetensors");
    const char *cfg = cfgf("");
    double t0 = ck_now();

    /* A: 2,000 updates in one go */
    static synth_run ra, rb;
    synth_init(&ra, 2);
    fhd_learner *A = fhd_test_create(api, cfg);
    int64_t ua1 = synth_run_until(api, A, &ra, 1000, 100000);
    int64_t ua2 = synth_run_until(api, A, &ra, 2000, 100000);
    CHECK(ua1 == 1000 && ua2 == 2000, "A reached %lld / %lld updates", (long long)ua1,
          (long long)ua2);

    /* B: 1,000, save with replay, load into a new learner, 1,000 more */
    synth_init(&rb, 2);
    fhd_learner *B1 = fhd_test_create(api, cfg);
    int64_t ub1 = synth_run_until(api, B1, &rb, 1000, 100000);
    int32_t rc = api->checkpoint_save(B1, p_mid, FHD_CKPT_INCLUDE_REPLAY);
    CHECK(rc == FHD_OK, "save: %s", api->last_error(B1));
    snap_take(api, B1, &sc);
    api->destroy(B1);
    fhd_learner *B2 = fhd_test_create(api, cfg);
    rc = api->checkpoint_load(B2, p_mid, FHD_CKPT_INCLUDE_REPLAY);
    CHECK(rc == FHD_OK, "load: %s", api->last_error(B2));
    snap_take(api, B2, &sb);
    /* grad.* is not part of a checkpoint (it is recomputed by every update) */
    int mid_diffs = 0;
    for (uint32_t i = 0; i < sb.n; i++)
        if (strncmp(sb.names[i], "grad.", 5) != 0 &&
            memcmp(sb.vals[i], sc.vals[i], sizeof(float) * sb.counts[i]) != 0)
            mid_diffs++;
    CHECK(mid_diffs == 0, "%d tensors differ right after loading", mid_diffs);
    snap_free(&sb);
    snap_free(&sc);
    int64_t ub2 = synth_run_until(api, B2, &rb, 2000, 100000);
    CHECK(ub1 == 1000 && ub2 == 2000, "B reached %lld / %lld updates", (long long)ub1,
          (long long)ub2);
    CHECK(ra.steps == rb.steps, "step calls %llu vs %llu", (unsigned long long)ra.steps,
          (unsigned long long)rb.steps);
    CHECK(memcmp(&ra, &rb, sizeof ra) == 0, "the environments diverged (different actions)");

    snap_take(api, A, &sa);
    snap_take(api, B2, &sb);
    int d = snap_diff(&sa, &sb, 1);
    snap_free(&sb);
    uint64_t elems = 0;
    for (uint32_t i = 0; i < sa.n; i++)
        elems += sa.counts[i];
    CHECK(d == 0, "%d tensors/metrics differ after resuming", d);
    printf("exact resume: %u tensors (%llu floats) and %d metrics bitwise identical after 2000 "
           "updates, %llu step calls, env_steps %s, episodes %s\n",
           sa.n, (unsigned long long)elems, 8, (unsigned long long)ra.steps, sa.metrics[0],
           sa.metrics[2]);

    size_t la = 0, lb = 0;
    unsigned char *fa = save_bytes(api, A, p_a, FHD_CKPT_INCLUDE_REPLAY, &la);
    unsigned char *fb = save_bytes(api, B2, p_b, FHD_CKPT_INCLUDE_REPLAY, &lb);
    CHECK(fa && fb && la == lb && memcmp(fa, fb, la) == 0,
          "the full checkpoints (replay, staging, step state) differ: %zu vs %zu bytes", la, lb);
    free(fb);

    /* 2. save -> load -> save is the identity on the file */
    fhd_learner *C = fhd_test_create(api, cfg);
    CHECK(api->checkpoint_load(C, p_a, FHD_CKPT_INCLUDE_REPLAY) == FHD_OK, "load: %s",
          api->last_error(C));
    size_t lc = 0;
    unsigned char *fc = save_bytes(api, C, p_b, FHD_CKPT_INCLUDE_REPLAY, &lc);
    CHECK(fc && lc == la && memcmp(fa, fc, la) == 0, "save(load(f)) != f");
    free(fc);
    api->destroy(C);

    /* 3. without the replay: a used learner and a new one end up in the same state */
    CHECK(api->checkpoint_save(A, p_nr, 0) == FHD_OK, "save: %s", api->last_error(A));
    fhd_learner *F = fhd_test_create(api, cfg);
    fhd_learner *U = fhd_test_create(api, cfg);
    static synth_run ru;
    synth_init(&ru, 2);
    synth_run_until(api, U, &ru, 300, 100000);
    CHECK(api->checkpoint_load(F, p_nr, 0) == FHD_OK, "load F: %s", api->last_error(F));
    CHECK(api->checkpoint_load(U, p_nr, 0) == FHD_OK, "load U: %s", api->last_error(U));
    snap_take(api, F, &sc);
    int same_as_a = 0, tensors = 0;
    for (uint32_t i = 0; i < sc.n; i++) {
        if (strncmp(sc.names[i], "grad.", 5) == 0)
            continue;
        tensors++;
        same_as_a += memcmp(sc.vals[i], sa.vals[i], sizeof(float) * sc.counts[i]) == 0;
    }
    CHECK(same_as_a == tensors, "%d of %d tensors restored without the replay", same_as_a, tensors);
    CHECK(strcmp(sc.metrics[0], sa.metrics[0]) == 0 && strcmp(sc.metrics[1], sa.metrics[1]) == 0 &&
              strcmp(sc.metrics[2], sa.metrics[2]) == 0 &&
              strcmp(sc.metrics[4], sa.metrics[4]) == 0,
          "counters/epsilon not restored: %s %s %s %s", sc.metrics[0], sc.metrics[1], sc.metrics[2],
          sc.metrics[4]);
    CHECK(strcmp(sc.metrics[3], "0") == 0, "replay_size after a load without replay is %s",
          sc.metrics[3]);
    snap_free(&sc);
    size_t lf = 0, lu = 0;
    unsigned char *ff = save_bytes(api, F, p_f, FHD_CKPT_INCLUDE_REPLAY, &lf);
    unsigned char *fu = save_bytes(api, U, p_u, FHD_CKPT_INCLUDE_REPLAY, &lu);
    CHECK(ff && fu && lf == lu && memcmp(ff, fu, lf) == 0,
          "a used learner's replay/staging/step state was not emptied like a new learner's");
    free(ff);
    free(fu);
    /* the step() state is gone: the host restarts with rewards = NULL */
    float rew[2] = {0, 0}, obs[8] = {0};
    uint8_t fl[2] = {0, 0};
    int32_t act[4];
    fhd_step_args sa_ = FHD_STEP_ARGS_INIT;
    sa_.num_envs = 2;
    sa_.obs = obs;
    sa_.rewards = rew;
    sa_.terminated = fl;
    sa_.truncated = fl;
    sa_.actions = act;
    CHECK(api->step(U, &sa_) == FHD_ERR_INVALID_ARGUMENT, "step with rewards after a load "
                                                          "without replay");
    /* a file with replay loaded without the flag gives the same state as one without */
    CHECK(api->checkpoint_load(U, p_a, 0) == FHD_OK, "load: %s", api->last_error(U));
    fu = save_bytes(api, U, p_u, FHD_CKPT_INCLUDE_REPLAY, &lu);
    ff = fhd_test_read_file(p_f, &lf);
    CHECK(ff && fu && lf == lu && memcmp(ff, fu, lf) == 0, "load(with-replay file, 0) differs");
    free(ff);
    free(fu);
    /* asking for the replay of a file without it */
    snap_take(api, U, &sb);
    rc = api->checkpoint_load(U, p_nr, FHD_CKPT_INCLUDE_REPLAY);
    CHECK(rc == FHD_ERR_CHECKPOINT_MISMATCH && strstr(api->last_error(U), "INCLUDE_REPLAY"),
          "replay requested from a file without it: %s: %s", api->status_name(rc),
          api->last_error(U));
    CHECK(snap_unchanged(api, U, &sb), "a failed load changed the learner");
    snap_free(&sb);
    api->destroy(F);
    api->destroy(U);
    free(fa);
    snap_free(&sa);
    api->destroy(A);
    api->destroy(B2);
    printf("resume tests: %.2f s\n", ck_now() - t0);
}

/* ---- 4. config differences ----------------------------------------------------------------- */

static void expect_mismatch(const char *extra, uint32_t flags, const char *field,
                            const char *theirs, const char *ours) {
    char p[600];
    path_of(p, sizeof p, "resume_a.safetensors");
    fhd_learner *L = fhd_test_create(api, cfgf(extra));
    snap_take(api, L, &sb);
    int32_t rc = api->checkpoint_load(L, p, flags);
    const char *msg = api->last_error(L);
    char want1[128], want2[128];
    snprintf(want1, sizeof want1, "has %s %s;", field, theirs);
    snprintf(want2, sizeof want2, "the learner has %s.", ours);
    CHECK(rc == FHD_ERR_CHECKPOINT_MISMATCH && strstr(msg, want1) && strstr(msg, want2),
          "%s: %s: %s", extra, api->status_name(rc), msg);
    CHECK(snap_unchanged(api, L, &sb), "a mismatched load changed the learner (%s)", extra);
    snap_free(&sb);
    api->destroy(L);
}

static void expect_ok(const char *extra, uint32_t flags) {
    char p[600];
    path_of(p, sizeof p, "resume_a.safetensors");
    fhd_learner *L = fhd_test_create(api, cfgf(extra));
    int32_t rc = api->checkpoint_load(L, p, flags);
    CHECK(rc == FHD_OK, "%s flags %u: %s", extra, flags, api->last_error(L));
    api->destroy(L);
}

static void test_config_differences(void) {
    expect_mismatch("\"hidden\": [32, 32]", 0, "hidden", "[16, 16]", "[32, 32]");
    expect_mismatch("\"hidden\": [16]", 0, "hidden", "[16, 16]", "[16]");
    expect_mismatch("\"dueling\": false", 0, "dueling", "true", "false");
    expect_mismatch("\"spectral_norm\": \"last\"", 0, "spectral_norm", "\"all\"", "\"last\"");
    expect_mismatch("\"actions\": [3, 3]", 0, "actions", "[3, 2]", "[3, 3]");
    expect_mismatch("\"obs_dim\": 5", 0, "obs_dim", "4", "5");
    expect_mismatch("\"seed\": 8", 0, "seed", "7", "8");
    expect_mismatch("\"gamma\": 0.99", 0, "gamma", "0.97", "0.99");
    /* replay and staging sizes matter only with the replay */
    expect_ok("\"replay_capacity\": 500", 0);
    expect_mismatch("\"replay_capacity\": 500", FHD_CKPT_INCLUDE_REPLAY, "replay_capacity", "300",
                    "500");
    expect_ok("\"replay\": \"uniform\"", 0);
    expect_mismatch("\"replay\": \"uniform\"", FHD_CKPT_INCLUDE_REPLAY, "replay", "\"prioritized\"",
                    "\"uniform\"");
    expect_ok("\"num_envs\": 3", 0);
    expect_mismatch("\"num_envs\": 3", FHD_CKPT_INCLUDE_REPLAY, "num_envs", "2", "3");
    expect_ok("\"n_step\": 2", 0);
    expect_mismatch("\"n_step\": 2", FHD_CKPT_INCLUDE_REPLAY, "n_step", "3", "2");

    /* resume_overridable keys keep the learner's values: X (lr 3e-4, its own epsilon schedule)
     * and Y (the checkpoint's config) load the same file and take the same update; their
     * parameters differ, and X's epsilon follows X's schedule at the restored env_steps. */
    char p[600];
    path_of(p, sizeof p, "resume_a.safetensors");
    fhd_learner *X = fhd_test_create(api, cfgf("\"lr\": 0.0003, \"epsilon_start\": 0.5, "
                                               "\"epsilon_end\": 0.25, \"epsilon_decay_steps\": "
                                               "100000, \"learning_starts\": 0"));
    fhd_learner *Y = fhd_test_create(api, cfgf(""));
    CHECK(api->checkpoint_load(X, p, FHD_CKPT_INCLUDE_REPLAY) == FHD_OK, "load X: %s",
          api->last_error(X));
    CHECK(api->checkpoint_load(Y, p, FHD_CKPT_INCLUDE_REPLAY) == FHD_OK, "load Y: %s",
          api->last_error(Y));
    snap_take(api, X, &sb);
    double env_steps = atof(sb.metrics[0]), eps = atof(sb.metrics[4]);
    double want = 0.5 + (0.25 - 0.5) * (env_steps / 100000.0);
    CHECK(env_steps > 0 && fabs(eps - want) < 1e-6,
          "epsilon %.9g at %g env steps; X's schedule "
          "gives %.9g",
          eps, env_steps, want);
    snap_free(&sb);
    CHECK(api->train(X, 1, NULL) == FHD_OK && api->train(Y, 1, NULL) == FHD_OK, "train");
    float wx[16 * 4], wy[16 * 4], w0[16 * 4];
    api->tensor_read(X, "online.torso.0.weight", wx, 64);
    api->tensor_read(Y, "online.torso.0.weight", wy, 64);
    fhd_learner *Z = fhd_test_create(api, cfgf(""));
    api->checkpoint_load(Z, p, 0);
    api->tensor_read(Z, "online.torso.0.weight", w0, 64);
    double dx = 0, dy = 0;
    for (int i = 0; i < 64; i++) {
        dx += fabs((double)wx[i] - w0[i]);
        dy += fabs((double)wy[i] - w0[i]);
    }
    /* Adam's first step moves each weight by about lr: the ratio of the steps is the lr ratio */
    CHECK(dx > 0 && dy > 0 && fabs(dx / dy - 0.3) < 0.05,
          "update sizes %g (lr 3e-4) vs %g "
          "(lr 1e-3): ratio %g",
          dx, dy, dx / dy);
    api->destroy(X);
    api->destroy(Y);
    api->destroy(Z);
}

/* ---- 5. argument and I/O errors ------------------------------------------------------------ */

static void test_errors(void) {
    char p[600], q[600];
    path_of(p, sizeof p, "resume_a.safetensors");
    fhd_learner *L = fhd_test_create(api, cfgf(""));
    snap_take(api, L, &sb);
    int32_t rc = api->checkpoint_load(L, NULL, 0);
    CHECK(rc == FHD_ERR_NULL_POINTER, "load NULL: %s", api->status_name(rc));
    rc = api->checkpoint_save(L, NULL, 0);
    CHECK(rc == FHD_ERR_NULL_POINTER, "save NULL: %s", api->status_name(rc));
    rc = api->checkpoint_load(L, p, 2);
    CHECK(rc == FHD_ERR_INVALID_ARGUMENT, "load flags 2: %s", api->status_name(rc));
    rc = api->checkpoint_save(L, p, 0x80);
    CHECK(rc == FHD_ERR_INVALID_ARGUMENT, "save flags 0x80: %s", api->status_name(rc));
    path_of(q, sizeof q, "no-such-file.safetensors");
    rc = api->checkpoint_load(L, q, 0);
    CHECK(rc == FHD_ERR_IO && strstr(api->last_error(L), "No such file"), "load missing: %s: %s",
          api->status_name(rc), api->last_error(L));
    path_of(q, sizeof q, "no-such-dir/x.safetensors");
    rc = api->checkpoint_save(L, q, 0);
    CHECK(rc == FHD_ERR_IO && strstr(api->last_error(L), "temporary"),
          "save into a missing "
          "directory: %s: %s",
          api->status_name(rc), api->last_error(L));
    rc = api->checkpoint_load(L, dir, 0);
    CHECK(rc == FHD_ERR_IO, "load a directory: %s: %s", api->status_name(rc), api->last_error(L));
    CHECK(snap_unchanged(api, L, &sb), "failed calls changed the learner");
    snap_free(&sb);
    api->destroy(L);
}

/* ---- 6. the file read back independently ---------------------------------------------------- */

static void test_layout(void) {
    char p[600];
    path_of(p, sizeof p, "resume_a.safetensors");
    CHECK(ck_crc64(0, "123456789", 9) == UINT64_C(0x995DC9BBDF1939FA), "CRC-64/XZ check value");
    size_t len = 0;
    unsigned char *b = fhd_test_read_file(p, &len);
    st_file f;
    CHECK(b && st_parse(b, len, &f) == 0, "parse");
    uint64_t n = 0;
    for (int i = 7; i >= 0; i--)
        n = (n << 8) | b[i];
    CHECK((8 + n) % 8 == 0, "the data section starts at %llu, not 8-aligned",
          (unsigned long long)(8 + n));
    json_t *m = json_object_get(f.header, "__metadata__");
    const char *expect[][2] = {{"format", "foxhunt-dqn"},
                               {"format_version", "1"},
                               {"backend", "cpu"},
                               {"includes_replay", "true"},
                               {"checksum_algorithm", "crc64-xz"}};
    for (int i = 0; i < 5; i++) {
        const char *v = json_string_value(json_object_get(m, expect[i][0]));
        CHECK(v && strcmp(v, expect[i][1]) == 0, "__metadata__.%s = %s", expect[i][0],
              v ? v : "(missing)");
    }
    const char *lv = json_string_value(json_object_get(m, "library_version"));
    CHECK(lv && strlen(lv) >= 5, "library_version %s", lv ? lv : "(missing)");
    /* the recorded config has every key of the manifest's schema */
    json_t *cfg = json_loads(json_string_value(json_object_get(m, "config")), 0, NULL);
    json_t *manifest = json_loads(api->manifest(), 0, NULL);
    json_t *schema = json_object_get(manifest, "config_schema");
    CHECK(cfg && json_integer_value(json_object_get(cfg, "n_step")) == 3 && schema &&
              json_object_size(cfg) == json_object_size(schema),
          "config in the metadata: %zu keys, the schema %zu", cfg ? json_object_size(cfg) : 0,
          schema ? json_object_size(schema) : 0);
    const char *skey;
    json_t *sval;
    json_object_foreach(schema, skey, sval) {
        CHECK(cfg && json_object_get(cfg, skey), "the recorded config lacks %s", skey);
    }
    json_decref(manifest);
    json_decref(cfg);
    /* metadata checksum recomputed independently */
    const char *stored = json_string_value(json_object_get(m, "checksum.__metadata__"));
    char keep[17];
    snprintf(keep, sizeof keep, "%s", stored ? stored : "");
    st_restamp_metadata(&f);
    CHECK(strcmp(keep, json_string_value(json_object_get(m, "checksum.__metadata__"))) == 0,
          "metadata checksum");
    /* every tensor: dtype, contiguity, checksum; every layout tensor but grad.* present */
    size_t covered = 0, ntensors = 0, bad_crc = 0;
    const char *key;
    json_t *v;
    int dtypes_seen[6] = {0};
    const char *dnames[6] = {"F32", "F64", "I32", "U32", "U64", "U8"};
    json_object_foreach(f.header, key, v) {
        if (strcmp(key, "__metadata__") == 0)
            continue;
        ntensors++;
        size_t b0 = 0, e0 = 0;
        st_range(&f, key, &b0, &e0);
        covered += e0 - b0;
        char ck[128], hex[17];
        snprintf(ck, sizeof ck, "checksum.%s", key);
        snprintf(hex, sizeof hex, "%016" PRIx64, ck_crc64(0, f.data + b0, e0 - b0));
        const char *sv = json_string_value(json_object_get(m, ck));
        bad_crc += !sv || strcmp(sv, hex) != 0;
        const char *dt = json_string_value(json_object_get(v, "dtype"));
        for (int i = 0; i < 6; i++)
            dtypes_seen[i] += dt && strcmp(dt, dnames[i]) == 0;
    }
    CHECK(covered == f.data_len, "tensors cover %zu of %zu data bytes", covered, f.data_len);
    CHECK(bad_crc == 0, "%zu tensor checksums differ from an independent CRC-64", bad_crc);
    for (int i = 0; i < 6; i++)
        CHECK(dtypes_seen[i] > 0, "no tensor of dtype %s", dnames[i]);
    fhd_learner *L = fhd_test_create(api, cfgf(""));
    int missing = 0, shape_bad = 0, layout_tensors = 0;
    for (uint32_t i = 0;; i++) {
        fhd_tensor_info ti = FHD_TENSOR_INFO_INIT;
        if (api->tensor_info(L, i, &ti) != FHD_OK)
            break;
        if (strncmp(ti.name, "grad.", 5) == 0)
            continue;
        layout_tensors++;
        json_t *e = json_object_get(f.header, ti.name);
        if (!e) {
            missing++;
            continue;
        }
        json_t *s = json_object_get(e, "shape");
        shape_bad += json_array_size(s) != ti.rank;
        for (uint32_t d = 0; d < ti.rank; d++)
            shape_bad += (uint64_t)json_integer_value(json_array_get(s, d)) != ti.shape[d];
    }
    CHECK(missing == 0 && shape_bad == 0, "%d layout tensors missing, %d shape errors", missing,
          shape_bad);
    const char *extra[] = {"rng.seed",
                           "rng.explore_counter",
                           "counters.updates",
                           "counters.env_steps",
                           "counters.episodes",
                           "replay.obs",
                           "replay.priorities",
                           "replay.pos",
                           "replay.size",
                           "replay.max_priority_q",
                           "staging.obs",
                           "staging.head",
                           "staging.length",
                           "step.prev_obs",
                           "step.have_prev",
                           "step.episode_return",
                           "episodes.recent_returns"};
    for (size_t i = 0; i < sizeof extra / sizeof extra[0]; i++)
        CHECK(json_object_get(f.header, extra[i]) != NULL, "tensor %s missing", extra[i]);
    printf("layout: %zu tensors (%d named network/optimiser tensors), %zu data bytes, header %llu "
           "bytes\n",
           ntensors, layout_tensors, f.data_len, (unsigned long long)n);
    api->destroy(L);
    st_free(&f);
    free(b);
}

int main(int argc, char **argv) {
    const int rc = ckpt_start(argc, argv, &api, dir, sizeof dir);
    if (rc >= 0)
        return rc;
    test_resume();
    test_config_differences();
    test_errors();
    test_layout();
    return fhd_test_finish();
}
