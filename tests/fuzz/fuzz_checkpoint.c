/* fuzz_checkpoint.c - fuzz target: checkpoint loading through the v1 ABI.
 *
 * Each input is a candidate checkpoint file. A fresh small learner (CONFIG below: the config
 * of the seed checkpoints, so that mutations get past the compatibility check) loads it with
 * flags 0 and with FHD_CKPT_INCLUDE_REPLAY. Checksums stop almost every mutation at the first
 * CRC comparison, so each input whose header parses is also loaded once more "repaired": the
 * harness recomputes every "checksum.<tensor>" and "checksum.__metadata__" (CRC-64/XZ, as
 * plugin/checkpoint_header.h documents) and rewrites the header, which lets mutated counters,
 * ring positions, priorities, shapes and configs reach the value checks and the apply step.
 *
 * Properties checked for every load:
 *   - the status is FHD_OK or a code of the table, with a message on failure;
 *   - a rejected load leaves the learner bit for bit as it was (every named tensor, the replay
 *     storage and priorities, the backend scalars, the front's counters and n-step staging);
 *   - after an accepted load the backend's invariants hold (check_invariants: ring position,
 *     sum tree sums, running max priority), and the learner acts, observes, trains and reports
 *     metrics.
 *
 * FHD_FUZZ_WRITE_SEEDS=DIR: write real checkpoints of CONFIG (fresh; trained, without and with
 * the replay) into DIR and exit; tests/fuzz/run_fuzzers.sh seeds the corpus with them.
 */
#define _POSIX_C_SOURCE 200809L
#include <fcntl.h>
#include <jansson.h>
#include <unistd.h>

#include "fuzz_common.h"
#include "learner.h"

#define CONFIG                                                                                     \
    "{\"obs_dim\": 3, \"actions\": [2, 3], \"hidden\": [8], \"dueling\": true, "                   \
    "\"spectral_norm\": \"all\", \"batch_size\": 4, \"replay_capacity\": 16, "                     \
    "\"learning_starts\": 0, \"train_freq\": 1, \"num_envs\": 2, \"n_step\": 2, "                  \
    "\"replay\": \"prioritized\", \"target_update_interval\": 3, \"seed\": 7}"
#define S_ 3
#define D_ 2
#define E_ 2

static const fhd_api_v1 *api;
static char tmp_path[256];
static int verbose; /* FHD_FUZZ_VERBOSE: print every load's status */

/* ---- CRC-64/XZ (independent of the library's table-driven one) -------------------------- */

static uint64_t crc64(uint64_t crc, const void *data, size_t n) {
    const unsigned char *p = data;
    crc = ~crc;
    for (size_t i = 0; i < n; i++) {
        crc ^= p[i];
        for (int k = 0; k < 8; k++)
            crc = (crc >> 1) ^ (0xC96C5795D7870F42ull & (0 - (crc & 1)));
    }
    return ~crc;
}

static int by_string(const void *x, const void *y) {
    return strcmp(*(const char *const *)x, *(const char *const *)y);
}

/* The input with every checksum recomputed, or NULL when its header is not a JSON object with
 * a "__metadata__" object (then there is nothing to repair). */
static unsigned char *repair(const uint8_t *data, size_t size, size_t *out_len) {
    if (size < 8)
        return NULL;
    uint64_t hlen = 0;
    for (int i = 7; i >= 0; i--)
        hlen = (hlen << 8) | data[i];
    if (hlen < 2 || hlen > size - 8)
        return NULL;
    const unsigned char *body = data + 8 + hlen;
    const size_t body_len = size - 8 - (size_t)hlen;
    json_t *root = json_loadb((const char *)data + 8, (size_t)hlen, JSON_REJECT_DUPLICATES, NULL);
    json_t *meta = json_object_get(root, "__metadata__");
    unsigned char *out = NULL;
    if (!json_is_object(root) || !json_is_object(meta))
        goto done;
    const char *key;
    json_t *v;
    char hex[17], name[256];
    json_object_foreach(root, key, v) {
        json_t *off = json_object_get(v, "data_offsets");
        json_int_t b = json_integer_value(json_array_get(off, 0));
        json_int_t e = json_integer_value(json_array_get(off, 1));
        if (strcmp(key, "__metadata__") == 0 || b < 0 || e < b || (uint64_t)e > body_len)
            continue;
        snprintf(hex, sizeof hex, "%016llx",
                 (unsigned long long)crc64(0, body + b, (size_t)(e - b)));
        snprintf(name, sizeof name, "checksum.%s", key);
        json_object_set_new(meta, name, json_string(hex));
    }
    size_t n = json_object_size(meta), k = 0;
    const char **keys = malloc(sizeof(char *) * (n ? n : 1));
    FUZZ_REQUIRE(keys != NULL, "out of memory in the harness");
    json_object_foreach(meta, key, v) {
        if (strncmp(key, "checksum.", 9) != 0)
            keys[k++] = key;
    }
    qsort(keys, k, sizeof(char *), by_string);
    uint64_t h = 0;
    for (size_t i = 0; i < k; i++) {
        const json_t *s = json_object_get(meta, keys[i]);
        h = crc64(h, keys[i], strlen(keys[i]) + 1);
        h = crc64(h, json_is_string(s) ? json_string_value(s) : "", json_string_length(s));
        h = crc64(h, "", 1);
    }
    free(keys);
    snprintf(hex, sizeof hex, "%016llx", (unsigned long long)h);
    json_object_set_new(meta, "checksum.__metadata__", json_string(hex));
    char *text = json_dumps(root, JSON_COMPACT | JSON_SORT_KEYS);
    if (!text)
        goto done;
    size_t tl = strlen(text), padded = tl + (8 - (8 + tl) % 8) % 8;
    *out_len = 8 + padded + body_len;
    out = malloc(*out_len);
    FUZZ_REQUIRE(out != NULL, "out of memory in the harness");
    for (int i = 0; i < 8; i++)
        out[i] = (unsigned char)((uint64_t)padded >> (8 * i));
    memcpy(out + 8, text, tl);
    memset(out + 8 + tl, ' ', padded - tl);
    memcpy(out + 8 + padded, body, body_len);
    free(text);
done:
    json_decref(root);
    return out;
}

/* ---- the learner's whole state as one fingerprint --------------------------------------- */

static uint64_t fingerprint(fhd_learner *L) {
    uint64_t h = 0;
    fhd_tensor_info ti = FHD_TENSOR_INFO_INIT;
    for (uint32_t i = 0; api->tensor_info(L, i, &ti) == FHD_OK; i++) {
        float *buf = malloc(sizeof(float) * (ti.count ? ti.count : 1));
        FUZZ_REQUIRE(buf && api->tensor_read(L, ti.name, buf, ti.count) == FHD_OK, "read %s",
                     ti.name);
        h = crc64(h, ti.name, strlen(ti.name));
        h = crc64(h, buf, sizeof(float) * ti.count);
        free(buf);
    }
    const uint64_t N = L->cfg.replay_capacity;
    static const struct {
        int kind;
        uint64_t per_slot;
    } kinds[] = {{FHD_STATE_REPLAY_OBS, S_},     {FHD_STATE_REPLAY_NEXT_OBS, S_},
                 {FHD_STATE_REPLAY_ACTIONS, D_}, {FHD_STATE_REPLAY_RETURNS, 1},
                 {FHD_STATE_REPLAY_DISC, 1},     {FHD_STATE_REPLAY_PRIORITY, 1}};
    for (size_t k = 0; k < sizeof kinds / sizeof kinds[0]; k++) {
        const uint64_t count = N * kinds[k].per_slot;
        const size_t bytes = count * fhd__state_elem_size(kinds[k].kind);
        void *buf = malloc(bytes);
        FUZZ_REQUIRE(buf && L->ops->read(L->be, kinds[k].kind, 0, count, buf) == FHD_OK,
                     "read state kind %d", kinds[k].kind);
        h = crc64(h, buf, bytes);
        free(buf);
    }
    fhd__backend_scalars sc;
    L->ops->get_scalars(L->be, &sc);
    h = crc64(h, &sc, sizeof sc);
    const uint64_t front[] = {L->env_steps,           L->episodes,     L->act_calls,
                              (uint64_t)L->have_prev, L->recent_count, L->recent_pos};
    h = crc64(h, front, sizeof front);
    h = crc64(h, L->recent, sizeof L->recent);
    h = crc64(h, &L->last_episode_return, sizeof L->last_episode_return);
    const size_t En = (size_t)L->E * L->n;
    h = crc64(h, L->st_obs, sizeof(float) * En * S_);
    h = crc64(h, L->st_act, sizeof(int32_t) * En * D_);
    h = crc64(h, L->st_rew, sizeof(float) * En);
    h = crc64(h, L->st_head, sizeof(uint32_t) * L->E);
    h = crc64(h, L->st_len, sizeof(uint32_t) * L->E);
    h = crc64(h, L->prev_obs, sizeof(float) * L->E * S_);
    h = crc64(h, L->prev_act, sizeof(int32_t) * L->E * D_);
    h = crc64(h, L->ep_return, sizeof(double) * L->E);
    h = crc64(h, L->ep_len, sizeof(uint64_t) * L->E);
    return h;
}

/* ---- driving a learner ------------------------------------------------------------------ */

static fhd_learner *create(void) {
    fhd_learner *L = NULL;
    fhd_error err = FHD_ERROR_INIT;
    int32_t rc = api->init(CONFIG, strlen(CONFIG), &L, &err);
    FUZZ_REQUIRE(rc == FHD_OK, "init: %s", err.message);
    return L;
}

/* `steps` observe calls of a deterministic toy stream; some episodes end. */
static void feed(fhd_learner *L, int steps, int32_t expect) {
    float obs[E_ * S_], next[E_ * S_], rew[E_];
    int32_t act[E_ * D_];
    uint8_t term[E_], trunc[E_];
    for (int s = 0; s < steps; s++) {
        for (int e = 0; e < E_; e++) {
            for (int j = 0; j < S_; j++) {
                obs[e * S_ + j] = 0.1f * (float)((s + e + j) % 7) - 0.3f;
                next[e * S_ + j] = 0.1f * (float)((s + e + j + 1) % 7) - 0.3f;
            }
            act[e * D_] = (s + e) % 2;
            act[e * D_ + 1] = (s * 2 + e) % 3;
            rew[e] = (float)((s * 3 + e) % 5) - 2.0f;
            term[e] = (s + e) % 9 == 8;
            trunc[e] = !term[e] && (s + e) % 13 == 12;
        }
        fhd_transitions t = {sizeof t, E_, obs, act, rew, next, term, trunc, NULL, NULL, NULL};
        int32_t rc = api->observe(L, &t);
        FUZZ_REQUIRE(rc == expect, "observe: %s", api->last_error(L));
    }
}

/* After an accepted load: invariants, then every kind of call works. */
static void exercise(fhd_learner *L) {
    char msg[512] = {0};
    int32_t rc = L->ops->check_invariants(L->be, msg, sizeof msg);
    FUZZ_REQUIRE(rc == FHD_OK, "invariants after an accepted load: %s", msg);
    float obs[S_] = {0.5f, -0.25f, 0.125f};
    int32_t act[D_];
    fhd_act_args a = FHD_ACT_ARGS_INIT;
    a.num_obs = 1;
    a.obs = obs;
    a.actions = act;
    a.explore = 1;
    rc = api->act(L, &a);
    FUZZ_REQUIRE(rc == FHD_OK, "act after load: %s", api->last_error(L));
    FUZZ_REQUIRE(act[0] >= 0 && act[0] < 2 && act[1] >= 0 && act[1] < 3, "actions %d %d", act[0],
                 act[1]);
    feed(L, 3, FHD_OK);
    /* step() continues from the loaded previous observations and actions */
    float sobs[E_ * S_] = {0.1f, 0.2f, 0.3f, -0.1f, -0.2f, -0.3f}, srew[E_] = {1.0f, -1.0f};
    int32_t sact[E_ * D_];
    uint8_t sterm[E_] = {0, 1}, strunc[E_] = {0, 0};
    fhd_step_args sa = FHD_STEP_ARGS_INIT;
    sa.num_envs = E_;
    sa.obs = sobs;
    sa.actions = sact;
    if (L->have_prev) {
        sa.rewards = srew;
        sa.terminated = sterm;
        sa.truncated = strunc;
    }
    /* a file may hold finite values that make training diverge (all-zero spectral-norm
     * vectors, huge weights): step and train then say so (FHD_ERR_DIVERGED) and apply nothing */
    rc = api->step(L, &sa);
    FUZZ_REQUIRE(rc == FHD_OK || rc == FHD_ERR_DIVERGED, "step after load: %s",
                 api->last_error(L));
    rc = api->train(L, 2, NULL);
    FUZZ_REQUIRE(rc == FHD_OK || rc == FHD_ERR_NOT_READY || rc == FHD_ERR_DIVERGED,
                 "train after load: %s", api->last_error(L));
    if (rc == FHD_ERR_DIVERGED) {
        const uint64_t before = fingerprint(L);
        fhd_train_stats st = FHD_TRAIN_STATS_INIT;
        if (api->train(L, 1, &st) == FHD_ERR_DIVERGED)
            FUZZ_REQUIRE(st.updates_done == 0 && fingerprint(L) == before,
                         "a diverged update changed the learner");
    }
    rc = L->ops->check_invariants(L->be, msg, sizeof msg);
    FUZZ_REQUIRE(rc == FHD_OK, "invariants after training a loaded learner: %s", msg);
    size_t need = 0;
    rc = api->metrics(L, NULL, 0, &need);
    FUZZ_REQUIRE(rc == FHD_OK && need > 2, "metrics after load: %s", api->last_error(L));
}

static void write_file(const char *path, const void *data, size_t size) {
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    FUZZ_REQUIRE(fd >= 0, "create %s", path);
    size_t off = 0;
    while (off < size) {
        ssize_t w = write(fd, (const char *)data + off, size - off);
        FUZZ_REQUIRE(w > 0, "write %s", path);
        off += (size_t)w;
    }
    close(fd);
}

static void load_and_check(fhd_learner *L, const void *data, size_t size) {
    write_file(tmp_path, data, size);
    for (uint32_t flags = 0; flags <= FHD_CKPT_INCLUDE_REPLAY; flags++) {
        const uint64_t before = fingerprint(L);
        int32_t rc = api->checkpoint_load(L, tmp_path, flags);
        FUZZ_REQUIRE(fuzz_status_known(rc), "load status %d", rc);
        if (verbose)
            printf("  load (%zu bytes, flags %u): %s %s\n", size, flags, api->status_name(rc),
                   rc == FHD_OK ? "" : api->last_error(L));
        if (rc == FHD_OK) {
            exercise(L);
        } else {
            FUZZ_REQUIRE(fuzz_message_ok(api->last_error(L), 1024), "no message");
            FUZZ_REQUIRE(fingerprint(L) == before, "a rejected load (%s: %s) changed the learner",
                         api->status_name(rc), api->last_error(L));
        }
    }
}

static void write_seeds(const char *dir) {
    char path[1024];
    fhd_learner *L = create();
    snprintf(path, sizeof path, "%s/fresh_replay.safetensors", dir);
    FUZZ_REQUIRE(api->checkpoint_save(L, path, FHD_CKPT_INCLUDE_REPLAY) == FHD_OK, "save: %s",
                 api->last_error(L));
    feed(L, 20, FHD_OK); /* 40 transitions through a 16-slot ring: it wraps */
    FUZZ_REQUIRE(api->train(L, 5, NULL) == FHD_OK, "train: %s", api->last_error(L));
    feed(L, 1, FHD_OK); /* n-step staging holds something */
    snprintf(path, sizeof path, "%s/trained.safetensors", dir);
    FUZZ_REQUIRE(api->checkpoint_save(L, path, 0) == FHD_OK, "save: %s", api->last_error(L));
    snprintf(path, sizeof path, "%s/trained_replay.safetensors", dir);
    FUZZ_REQUIRE(api->checkpoint_save(L, path, FHD_CKPT_INCLUDE_REPLAY) == FHD_OK, "save: %s",
                 api->last_error(L));
    api->destroy(L);
    printf("wrote 3 seed checkpoints into %s\n", dir);
}

static void remove_tmp(void) {
    unlink(tmp_path);
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc;
    (void)argv;
    fuzz_no_cuda_module();
    api = (const fhd_api_v1 *)fhd_get_api_base()->get_api(1, NULL);
    verbose = getenv("FHD_FUZZ_VERBOSE") != NULL;
    const char *seeds = getenv("FHD_FUZZ_WRITE_SEEDS");
    if (seeds && *seeds) {
        write_seeds(seeds);
        exit(0);
    }
    /* FHD_FUZZ_TMPDIR (run_fuzzers.sh: its work directory), else /dev/shm, else $TMPDIR */
    const char *base = getenv("FHD_FUZZ_TMPDIR");
    if (!base || !*base)
        base = access("/dev/shm", W_OK) == 0 ? "/dev/shm" : getenv("TMPDIR");
    snprintf(tmp_path, sizeof tmp_path, "%s/fhd_fuzz_ckpt.%ld.safetensors", base ? base : "/tmp",
             (long)getpid());
    atexit(remove_tmp);
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    fhd_learner *L = create();
    load_and_check(L, data, size);
    size_t rlen = 0;
    unsigned char *fixed = repair(data, size, &rlen);
    if (fixed && (rlen != size || memcmp(fixed, data, size) != 0))
        load_and_check(L, fixed, rlen);
    free(fixed);
    api->destroy(L);
    return 0;
}
