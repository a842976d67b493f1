/* test_misuse.c - ABI misuse at every function of the v1 table, through dlopen.
 *
 * tests/learner/test_learner.c covers the common bad inputs of act, observe, train_batch and
 * step (a NULL array, NaN, a wrong count, an out-of-range action); this test covers the rest:
 * NULL for every pointer argument of every function, struct_size 0 / 4 / one byte short of
 * the first version, counts at the extremes (UINT32_MAX, UINT64_MAX, 2^24 + 1), NaN and both
 * infinities in every float input, INT32_MIN/INT32_MAX actions, flags outside their set, paths
 * that are not files (a directory, a FIFO, /dev/null, a path longer than PATH_MAX), and calls
 * on a learner after another learner was destroyed. Every rejected call must return its
 * status with a message and leave the learner exactly as it was (every named tensor and the
 * counters of metrics, compared bit for bit).
 *
 * Not detectable by any library, hence not tested (documented in SECURITY.md): a pointer to
 * an array shorter than the count says (num_obs, metrics `cap` larger than the real buffer,
 * e.g. SIZE_MAX with a 16-byte buffer), a `len` larger than the config text, a dangling or
 * foreign learner handle, a string that is not NUL-terminated.
 * usage: test_misuse LIBRARY SCRATCH_DIR */
#define _GNU_SOURCE
#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stddef.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "fhd_test.h"
#include "rel_common.h"

static const fhd_api_v1 *api;
static fhd_learner *gL;
static uint64_t g_state;
static int g_calls;

/* A rejected call: status, message naming the problem, learner unchanged. */
static void expect(int32_t rc, int32_t code, const char *needle, const char *what) {
    g_calls++;
    CHECK(rc == code, "%s: got %s, expected %s (%s)", what, api->status_name(rc),
          api->status_name(code), api->last_error(gL));
    const char *msg = api->last_error(gL);
    CHECK(msg && strstr(msg, needle) != NULL, "%s: message \"%s\" lacks \"%s\"", what,
          msg ? msg : "(null)", needle);
    CHECK(rel_fingerprint(api, gL) == g_state, "%s: the learner changed", what);
}

/* A call on a NULL learner: FHD_ERR_NULL_POINTER, no crash. */
static void expect_null_learner(int32_t rc, const char *what) {
    g_calls++;
    CHECK(rc == FHD_ERR_NULL_POINTER, "%s(NULL learner): got %s", what, api->status_name(rc));
}

static void test_table_and_statics(void *lib) {
    /* entry point and negotiation */
    fhd_get_api_base_fn entry = (fhd_get_api_base_fn)dlsym(lib, FHD_ENTRY_SYMBOL);
    const fhd_api_base *base = entry();
    const uint32_t majors[] = {0, 2, 3, 0x7fffffffu, UINT32_MAX};
    for (size_t i = 0; i < sizeof majors / sizeof majors[0]; i++) {
        fhd_error e = FHD_ERROR_INIT;
        CHECK(base->get_api(majors[i], &e) == NULL, "get_api(%u) is NULL", majors[i]);
        CHECK(e.code == FHD_ERR_UNSUPPORTED_VERSION && strstr(e.message, "major 1"),
              "get_api(%u): %d %s", majors[i], e.code, e.message);
        CHECK(base->get_api(majors[i], NULL) == NULL, "get_api(%u, NULL err)", majors[i]);
    }
    /* an fhd_error shorter than its first version: written only within its struct_size */
    unsigned char raw[sizeof(fhd_error)];
    const uint32_t sizes[] = {0, 4, 8, 12, offsetof(fhd_error, message) + 1};
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        memset(raw, 0xAB, sizeof raw);
        memcpy(raw, &sizes[i], sizeof(uint32_t));
        base->get_api(9, (fhd_error *)raw);
        int clean = 1;
        for (size_t j = sizes[i] > 4 ? sizes[i] : 4; j < sizeof raw; j++)
            clean &= raw[j] == 0xAB;
        CHECK(clean, "get_api with err.struct_size %u wrote past it", sizes[i]);
        fhd_learner *L = (fhd_learner *)raw;
        memset(raw, 0xAB, sizeof raw);
        memcpy(raw, &sizes[i], sizeof(uint32_t));
        int32_t rc = api->init("{", 1, &L, (fhd_error *)raw);
        clean = 1;
        for (size_t j = sizes[i] > 4 ? sizes[i] : 4; j < sizeof raw; j++)
            clean &= raw[j] == 0xAB;
        CHECK(rc == FHD_ERR_CONFIG_SYNTAX && L == NULL && clean,
              "init with err.struct_size %u: %s, wrote past it: %d", sizes[i], api->status_name(rc),
              !clean);
    }
    /* status table: every code and unknown ones */
    for (int32_t c = 0; c >= FHD_STATUS_MIN_; c--) {
        const char *n = api->status_name(c), *m = api->status_message(c);
        CHECK(n && strncmp(n, "FHD_", 4) == 0 && strcmp(n, "FHD_UNKNOWN_STATUS") != 0,
              "status_name(%d) = %s", c, n ? n : "(null)");
        CHECK(m && *m, "status_message(%d)", c);
    }
    const int32_t unknown[] = {1, FHD_STATUS_MIN_ - 1, INT32_MIN, INT32_MAX, -1000};
    for (size_t i = 0; i < sizeof unknown / sizeof unknown[0]; i++) {
        CHECK(strcmp(api->status_name(unknown[i]), "FHD_UNKNOWN_STATUS") == 0, "status_name(%d)",
              unknown[i]);
        CHECK(api->status_message(unknown[i]) && *api->status_message(unknown[i]),
              "status_message(%d)", unknown[i]);
    }
    CHECK(api->manifest() && api->manifest()[0] == '{', "manifest");
    CHECK(api->last_error(NULL) && *api->last_error(NULL), "last_error(NULL) is a message");
    api->destroy(NULL); /* a harmless no-op */
    CHECK(1, "destroy(NULL) returned");
}

static void test_init(void) {
    fhd_learner *L = (fhd_learner *)&L;
    fhd_error e = FHD_ERROR_INIT;
    CHECK(api->init(REL_CONFIG, strlen(REL_CONFIG), NULL, &e) == FHD_ERR_NULL_POINTER &&
              e.code == FHD_ERR_NULL_POINTER && strstr(e.message, "out"),
          "init(out NULL): %s", e.message);
    CHECK(api->init(REL_CONFIG, strlen(REL_CONFIG), NULL, NULL) == FHD_ERR_NULL_POINTER,
          "init(out NULL, err NULL)");
    e = (fhd_error)FHD_ERROR_INIT;
    CHECK(api->init(NULL, 10, &L, &e) == FHD_ERR_NULL_POINTER && L == NULL &&
              strstr(e.message, "config_json"),
          "init(config NULL): %s", e.message);
    L = (fhd_learner *)&L;
    CHECK(api->init(NULL, 0, &L, NULL) == FHD_ERR_NULL_POINTER && L == NULL,
          "init(config NULL, err NULL)");
    /* lengths: 0, shorter than the text, a NUL inside the length */
    struct {
        const char *text;
        size_t len;
        int32_t code;
        const char *what;
    } cases[] = {
        {REL_CONFIG, 0, FHD_ERR_CONFIG_SYNTAX, "len 0"},
        {REL_CONFIG, 20, FHD_ERR_CONFIG_SYNTAX, "len cuts the text"},
        {"{\"obs_dim\": 3,\0 \"actions\": [2]}", 31, FHD_ERR_CONFIG_SYNTAX, "NUL inside len"},
        {"{\"obs_dim\": 3, \"actions\": [2]}\0garbage", 38, FHD_ERR_CONFIG_SYNTAX,
         "bytes after a NUL"},
        {"\xEF\xBB\xBF{}", 5, FHD_ERR_CONFIG_SYNTAX, "byte order mark"},
        {"{\"obs_dim\": 3, \"actions\": [2], \"\xff\xfe\": 1}", 40, FHD_ERR_CONFIG_SYNTAX,
         "invalid UTF-8 in a key"},
        {"{\"obs_dim\": 1e400, \"actions\": [2]}", 34, FHD_ERR_CONFIG_RANGE, "real overflow"},
        {"{\"obs_dim\": 18446744073709551616, \"actions\": [2]}", 49, FHD_ERR_CONFIG_RANGE,
         "integer overflow"},
        {"{\"obs_dim\": 4294967299, \"actions\": [2]}", 39, FHD_ERR_CONFIG_RANGE,
         "obs_dim 2^32 + 3 (would wrap to 3 in 32 bits)"},
        {"{\"obs_dim\": 3, \"actions\": [4294967298]}", 39, FHD_ERR_CONFIG_RANGE,
         "an action count 2^32 + 2"},
        {"{\"obs_dim\": 3, \"actions\": [2], \"num_envs\": 4294967297}", 54, FHD_ERR_CONFIG_RANGE,
         "num_envs 2^32 + 1"},
        {"{\"obs_dim\": 3, \"actions\": [2], \"lr\": NaN}", 40, FHD_ERR_CONFIG_SYNTAX,
         "NaN literal"},
        {"{\"obs_dim\": 3, \"actions\": [2], \"lr\": Infinity}", 45, FHD_ERR_CONFIG_SYNTAX,
         "Infinity literal"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        e = (fhd_error)FHD_ERROR_INIT;
        L = (fhd_learner *)&L;
        int32_t rc = api->init(cases[i].text, cases[i].len, &L, &e);
        CHECK(rc == cases[i].code && L == NULL && e.code == rc && e.message[0],
              "init %s: got %s (%s)", cases[i].what, api->status_name(rc), e.message);
        printf("init %-44s %s %s: %s\n", cases[i].what, api->status_name(rc), e.path, e.message);
    }
    /* a huge config text (16 MiB of spaces around a valid object) */
    size_t big = (size_t)16 << 20;
    char *text = malloc(big);
    memset(text, ' ', big);
    memcpy(text + big / 2, "{\"obs_dim\": 3, \"actions\": [2]}", 30);
    e = (fhd_error)FHD_ERROR_INIT;
    int32_t rc = api->init(text, big, &L, &e);
    CHECK(rc == FHD_OK, "init of a 16 MiB text: %s", e.message);
    api->destroy(L);
    free(text);
}

static void test_null_learner(void) {
    fhd_act_args a = FHD_ACT_ARGS_INIT;
    fhd_transitions t = FHD_TRANSITIONS_INIT;
    fhd_batch b = FHD_BATCH_INIT;
    fhd_step_args s = FHD_STEP_ARGS_INIT;
    fhd_train_stats st = FHD_TRAIN_STATS_INIT;
    fhd_tensor_info ti = FHD_TENSOR_INFO_INIT;
    size_t need;
    float f[4];
    char buf[16];
    expect_null_learner(api->act(NULL, &a), "act");
    expect_null_learner(api->observe(NULL, &t), "observe");
    expect_null_learner(api->train(NULL, 1, &st), "train");
    expect_null_learner(api->train_batch(NULL, &b, &st), "train_batch");
    expect_null_learner(api->step(NULL, &s), "step");
    expect_null_learner(api->metrics(NULL, buf, sizeof buf, &need), "metrics");
    expect_null_learner(api->checkpoint_save(NULL, "/tmp/x", 0), "checkpoint_save");
    expect_null_learner(api->checkpoint_load(NULL, "/tmp/x", 0), "checkpoint_load");
    expect_null_learner(api->tensor_info(NULL, 0, &ti), "tensor_info");
    expect_null_learner(api->tensor_read(NULL, "online.torso.0.bias", f, 4), "tensor_read");
    expect_null_learner(api->tensor_write(NULL, "online.torso.0.bias", f, 4), "tensor_write");
    /* every argument NULL at once */
    expect_null_learner(api->act(NULL, NULL), "act(all NULL)");
    expect_null_learner(api->observe(NULL, NULL), "observe(all NULL)");
    expect_null_learner(api->train(NULL, 0, NULL), "train(all NULL)");
    expect_null_learner(api->train_batch(NULL, NULL, NULL), "train_batch(all NULL)");
    expect_null_learner(api->step(NULL, NULL), "step(all NULL)");
    expect_null_learner(api->metrics(NULL, NULL, 0, NULL), "metrics(all NULL)");
    expect_null_learner(api->checkpoint_save(NULL, NULL, 0), "checkpoint_save(all NULL)");
    expect_null_learner(api->checkpoint_load(NULL, NULL, 0), "checkpoint_load(all NULL)");
    expect_null_learner(api->tensor_info(NULL, 0, NULL), "tensor_info(all NULL)");
    expect_null_learner(api->tensor_read(NULL, NULL, NULL, 0), "tensor_read(all NULL)");
    expect_null_learner(api->tensor_write(NULL, NULL, NULL, 0), "tensor_write(all NULL)");
}

/* struct_size 0, 4 and one byte short of the first version (minor 0), for every argument struct. */
static void test_struct_sizes(void) {
    float obs[REL_E * REL_S] = {0}, rew[8] = {0};
    int32_t act[8 * REL_D] = {0};
    uint8_t flags[8] = {0};
    const uint32_t bad[] = {0, 4};
    for (size_t i = 0; i < 3; i++) {
        char what[64];
        /* act: the first version ends before `reserved` */
        fhd_act_args a = FHD_ACT_ARGS_INIT;
        a.num_obs = 1;
        a.obs = obs;
        a.actions = act;
        a.struct_size = i < 2 ? bad[i] : (uint32_t)offsetof(fhd_act_args, reserved) - 1;
        snprintf(what, sizeof what, "act struct_size %u", a.struct_size);
        expect(api->act(gL, &a), FHD_ERR_STRUCT_SIZE, "struct_size", what);
        fhd_transitions t = {0, REL_E, obs, act, rew, obs, flags, flags, NULL, NULL, NULL};
        t.struct_size = i < 2 ? bad[i] : FHD_TRANSITIONS_SIZE_V1_0 - 1;
        snprintf(what, sizeof what, "observe struct_size %u", t.struct_size);
        expect(api->observe(gL, &t), FHD_ERR_STRUCT_SIZE, "struct_size", what);
        fhd_batch b = {0, 8, obs, act, rew, obs, flags, NULL, NULL, NULL, NULL, NULL, NULL};
        b.struct_size = i < 2 ? bad[i] : FHD_BATCH_SIZE_V1_0 - 1;
        snprintf(what, sizeof what, "train_batch struct_size %u", b.struct_size);
        expect(api->train_batch(gL, &b, NULL), FHD_ERR_STRUCT_SIZE, "struct_size", what);
        fhd_step_args s = FHD_STEP_ARGS_INIT;
        s.num_envs = REL_E;
        s.obs = obs;
        s.actions = act;
        s.struct_size = i < 2 ? bad[i] : FHD_STEP_ARGS_SIZE_V1_0 - 1;
        snprintf(what, sizeof what, "step struct_size %u", s.struct_size);
        expect(api->step(gL, &s), FHD_ERR_STRUCT_SIZE, "struct_size", what);
        fhd_train_stats st = FHD_TRAIN_STATS_INIT;
        st.struct_size = i < 2 ? bad[i] : (uint32_t)offsetof(fhd_train_stats, loss) - 1;
        snprintf(what, sizeof what, "train stats struct_size %u", st.struct_size);
        expect(api->train(gL, 0, &st), FHD_ERR_STRUCT_SIZE, "struct_size", what);
        fhd_batch ok = {sizeof ok, 8, obs, act, rew, obs, flags, NULL, NULL, NULL, NULL, NULL, NULL};
        snprintf(what, sizeof what, "train_batch stats struct_size %u", st.struct_size);
        expect(api->train_batch(gL, &ok, &st), FHD_ERR_STRUCT_SIZE, "struct_size", what);
        fhd_step_args s2 = FHD_STEP_ARGS_INIT;
        s2.num_envs = REL_E;
        s2.obs = obs;
        s2.actions = act;
        s2.stats = &st;
        snprintf(what, sizeof what, "step stats struct_size %u", st.struct_size);
        expect(api->step(gL, &s2), FHD_ERR_STRUCT_SIZE, "struct_size", what);
        fhd_tensor_info ti = FHD_TENSOR_INFO_INIT;
        ti.struct_size = i < 2 ? bad[i] : (uint32_t)sizeof ti - 1;
        snprintf(what, sizeof what, "tensor_info struct_size %u", ti.struct_size);
        expect(api->tensor_info(gL, 0, &ti), FHD_ERR_STRUCT_SIZE, "struct_size", what);
    }
    /* an older, shorter stats struct is accepted and written only within its size */
    unsigned char raw[sizeof(fhd_train_stats) + 8];
    memset(raw, 0xCD, sizeof raw);
    uint32_t short_size = offsetof(fhd_train_stats, loss);
    memcpy(raw, &short_size, 4);
    CHECK(api->train(gL, 0, (fhd_train_stats *)raw) == FHD_OK, "train(0) with a %u-byte stats",
          short_size);
    int clean = 1;
    for (size_t j = short_size; j < sizeof raw; j++)
        clean &= raw[j] == 0xCD;
    CHECK(clean, "train wrote past stats.struct_size %u", short_size);
    CHECK(rel_fingerprint(api, gL) == g_state, "train(0) changed the learner");
}

static void test_pointers_and_counts(void) {
    float obs[8 * REL_S], rew[8], f[64];
    int32_t act[8 * REL_D];
    uint8_t flags[8] = {0};
    memset(obs, 0, sizeof obs);
    memset(rew, 0, sizeof rew);
    memset(act, 0, sizeof act);
    /* act */
    fhd_act_args a = FHD_ACT_ARGS_INIT;
    a.obs = obs;
    a.actions = act;
    a.num_obs = UINT32_MAX;
    expect(api->act(gL, &a), FHD_ERR_INVALID_ARGUMENT, "num_obs", "act num_obs UINT32_MAX");
    a.num_obs = (1u << 24) + 1;
    expect(api->act(gL, &a), FHD_ERR_INVALID_ARGUMENT, "16777216", "act num_obs 2^24 + 1");
    a.num_obs = 1;
    a.explore = UINT32_MAX;
    expect(api->act(gL, &a), FHD_ERR_INVALID_ARGUMENT, "explore", "act explore UINT32_MAX");
    a.explore = 0;
    const float bad_values[] = {NAN, INFINITY, -INFINITY};
    const char *bad_names[] = {"NaN", "Inf", "Inf"};
    for (int k = 0; k < 3; k++) {
        obs[2] = bad_values[k];
        expect(api->act(gL, &a), FHD_ERR_NONFINITE, bad_names[k], "act obs non-finite");
    }
    obs[2] = 0.0f;
    /* observe: every array NULL, counts, extreme actions, every non-finite input */
    fhd_transitions t = {sizeof t, REL_E, obs, act, rew, obs, flags, flags, NULL, NULL, NULL};
    const char *names[] = {"obs", "actions", "rewards", "next_obs", "terminated"};
    for (int k = 0; k < 5; k++) {
        fhd_transitions u = t;
        const void **field = k == 0   ? (const void **)&u.obs
                             : k == 1 ? (const void **)&u.actions
                             : k == 2 ? (const void **)&u.rewards
                             : k == 3 ? (const void **)&u.next_obs
                                      : (const void **)&u.terminated;
        *field = NULL;
        char what[64];
        snprintf(what, sizeof what, "observe %s NULL", names[k]);
        expect(api->observe(gL, &u), FHD_ERR_NULL_POINTER, names[k], what);
    }
    fhd_transitions u = t;
    u.num_envs = UINT32_MAX;
    expect(api->observe(gL, &u), FHD_ERR_SIZE_MISMATCH, "num_envs", "observe UINT32_MAX envs");
    u.num_envs = 0;
    expect(api->observe(gL, &u), FHD_ERR_SIZE_MISMATCH, "num_envs", "observe 0 envs");
    const int32_t extreme[] = {INT32_MIN, INT32_MAX, 3, -1};
    for (int k = 0; k < 4; k++) {
        act[1] = extreme[k]; /* env 0, branch 1 (3 actions) */
        expect(api->observe(gL, &t), FHD_ERR_ACTION_RANGE, "branch 1", "observe extreme action");
    }
    act[1] = 0;
    for (int k = 0; k < 3; k++) {
        rew[1] = bad_values[k];
        expect(api->observe(gL, &t), FHD_ERR_NONFINITE, "rewards[1]", "observe reward");
        rew[1] = 0;
        obs[REL_S + 2] = bad_values[k];
        expect(api->observe(gL, &t), FHD_ERR_NONFINITE, "obs[1][2]", "observe obs (and next_obs)");
        obs[REL_S + 2] = 0;
    }
    flags[1] = 255;
    expect(api->observe(gL, &t), FHD_ERR_INVALID_ARGUMENT, "terminated[1] = 255", "observe flag");
    flags[1] = 0;
    /* train */
    expect(api->train(gL, UINT32_MAX, NULL), FHD_ERR_INVALID_ARGUMENT, "num_updates",
           "train UINT32_MAX updates");
    expect(api->train(gL, 1000001, NULL), FHD_ERR_INVALID_ARGUMENT, "1000000",
           "train 1000001 updates");
    /* train_batch */
    fhd_batch b = {sizeof b, 8, obs, act, rew, obs, flags, NULL, NULL, NULL, NULL, NULL, NULL};
    fhd_batch c = b;
    c.batch_size = UINT32_MAX;
    expect(api->train_batch(gL, &c, NULL), FHD_ERR_SIZE_MISMATCH, "batch_size",
           "train_batch UINT32_MAX rows");
    c = b;
    c.obs = NULL;
    expect(api->train_batch(gL, &c, NULL), FHD_ERR_NULL_POINTER, "obs", "train_batch obs NULL");
    c = b;
    c.actions = NULL;
    expect(api->train_batch(gL, &c, NULL), FHD_ERR_NULL_POINTER, "actions",
           "train_batch actions NULL");
    c = b;
    c.rewards = NULL;
    expect(api->train_batch(gL, &c, NULL), FHD_ERR_NULL_POINTER, "rewards",
           "train_batch rewards NULL");
    c = b;
    c.terminated = NULL;
    expect(api->train_batch(gL, &c, NULL), FHD_ERR_NULL_POINTER, "terminated",
           "train_batch terminated NULL");
    expect(api->train_batch(gL, NULL, NULL), FHD_ERR_NULL_POINTER, "batch", "train_batch NULL");
    float disc[8], w[8];
    for (int i = 0; i < 8; i++)
        disc[i] = w[i] = 0.5f;
    c = b;
    c.discounts = disc;
    c.weights = w;
    for (int k = 0; k < 3; k++) {
        disc[4] = bad_values[k];
        expect(api->train_batch(gL, &c, NULL), FHD_ERR_NONFINITE, "discounts[4]",
               "train_batch discount");
        disc[4] = 0.5f;
        w[6] = bad_values[k];
        expect(api->train_batch(gL, &c, NULL), FHD_ERR_NONFINITE, "weights[6]",
               "train_batch weight");
        w[6] = 0.5f;
    }
    disc[0] = -0.0f; /* allowed: the range is [0, 1] and -0 == 0 */
    act[2 * 7 + 1] = INT32_MIN;
    expect(api->train_batch(gL, &c, NULL), FHD_ERR_ACTION_RANGE, "actions[7][1]",
           "train_batch INT32_MIN action");
    act[2 * 7 + 1] = 0;
    /* step: first call with NULL obs/actions, UINT32_MAX envs, NULL flags with rewards */
    fhd_step_args s = FHD_STEP_ARGS_INIT;
    s.num_envs = REL_E;
    s.actions = act;
    expect(api->step(gL, &s), FHD_ERR_NULL_POINTER, "obs", "step obs NULL");
    s.obs = obs;
    s.actions = NULL;
    expect(api->step(gL, &s), FHD_ERR_NULL_POINTER, "actions", "step actions NULL");
    s.actions = act;
    s.num_envs = UINT32_MAX;
    expect(api->step(gL, &s), FHD_ERR_SIZE_MISMATCH, "num_envs", "step UINT32_MAX envs");
    s.num_envs = REL_E;
    expect(api->step(gL, NULL), FHD_ERR_NULL_POINTER, "args", "step NULL");
    /* the learner has a previous step from the fixture: rewards with terminated NULL */
    s.rewards = rew;
    s.truncated = flags;
    expect(api->step(gL, &s), FHD_ERR_NULL_POINTER, "terminated", "step terminated NULL");
    s.terminated = flags;
    obs[0] = NAN;
    expect(api->step(gL, &s), FHD_ERR_NONFINITE, "obs[0][0]", "step obs NaN");
    obs[0] = 0;
    /* metrics: NULL needed (with and without a buffer), cap 0 with a buffer */
    char mbuf[8] = "unused";
    size_t need = 0;
    expect(api->metrics(gL, mbuf, sizeof mbuf, NULL), FHD_ERR_NULL_POINTER, "needed",
           "metrics needed NULL");
    expect(api->metrics(gL, mbuf, 0, &need), FHD_ERR_BUFFER_TOO_SMALL, "0 bytes", "metrics cap 0");
    CHECK(need > 100 && strcmp(mbuf, "unused") == 0, "cap 0: size %zu, buffer untouched", need);
    expect(api->metrics(gL, mbuf, sizeof mbuf, &need), FHD_ERR_BUFFER_TOO_SMALL, "8 bytes",
           "metrics cap 8");
    CHECK(strcmp(mbuf, "unused") == 0, "a too-small buffer is not written");
    CHECK(api->metrics(gL, NULL, SIZE_MAX, &need) == FHD_OK && need > 100,
          "size query with a NULL buffer ignores cap");
    /* tensors */
    fhd_tensor_info ti = FHD_TENSOR_INFO_INIT;
    expect(api->tensor_info(gL, 0, NULL), FHD_ERR_NULL_POINTER, "info", "tensor_info NULL");
    expect(api->tensor_info(gL, UINT32_MAX, &ti), FHD_ERR_NOT_FOUND, "index",
           "tensor_info UINT32_MAX");
    expect(api->tensor_read(gL, NULL, f, 16), FHD_ERR_NULL_POINTER, "name", "tensor_read name");
    expect(api->tensor_read(gL, "online.torso.0.bias", NULL, 16), FHD_ERR_NULL_POINTER, "dst",
           "tensor_read dst NULL");
    expect(api->tensor_read(gL, "online.torso.0.bias", f, UINT64_MAX), FHD_ERR_SIZE_MISMATCH,
           "16 elements", "tensor_read UINT64_MAX");
    expect(api->tensor_read(gL, "online.torso.0.bias", f, 0), FHD_ERR_SIZE_MISMATCH, "16 elements",
           "tensor_read 0");
    expect(api->tensor_read(gL, "", f, 16), FHD_ERR_NOT_FOUND, "no tensor", "tensor_read \"\"");
    char *long_name = malloc(100000);
    memset(long_name, 'x', 99999);
    long_name[99999] = '\0';
    expect(api->tensor_read(gL, long_name, f, 16), FHD_ERR_NOT_FOUND, "no tensor",
           "tensor_read 100 kB name");
    free(long_name);
    expect(api->tensor_write(gL, "online.torso.0.bias", NULL, 16), FHD_ERR_NULL_POINTER, "src",
           "tensor_write src NULL");
    expect(api->tensor_write(gL, NULL, f, 16), FHD_ERR_NULL_POINTER, "name", "tensor_write name");
    for (int i = 0; i < 16; i++)
        f[i] = 0.25f;
    for (int k = 0; k < 3; k++) {
        f[9] = bad_values[k];
        expect(api->tensor_write(gL, "target.torso.0.bias", f, 16), FHD_ERR_NONFINITE, bad_names[k],
               "tensor_write non-finite");
    }
    f[9] = 0.25f;
    expect(api->tensor_write(gL, "adam.m.torso.0.bias", f, 16), FHD_ERR_INVALID_ARGUMENT,
           "not writable", "tensor_write adam.m");
    expect(api->tensor_write(gL, "online.torso.0.bias", f, UINT64_MAX), FHD_ERR_SIZE_MISMATCH,
           "16 elements", "tensor_write UINT64_MAX");
}

static void test_paths(const char *scratch) {
    fhd_learner *probe = fhd_test_create(api, REL_CONFIG);
    char ok[600];
    snprintf(ok, sizeof ok, "%s/misuse_ok.safetensors", scratch);
    int32_t rc = api->checkpoint_save(probe, ok, 0);
    api->destroy(probe);
    if (rc == FHD_ERR_NOT_IMPLEMENTED) {
        printf("SKIP checkpoint paths: checkpoints are not implemented in this build\n");
        return;
    }
    expect(api->checkpoint_save(gL, NULL, 0), FHD_ERR_NULL_POINTER, "path", "save path NULL");
    expect(api->checkpoint_load(gL, NULL, 0), FHD_ERR_NULL_POINTER, "path", "load path NULL");
    expect(api->checkpoint_save(gL, "", 0), FHD_ERR_INVALID_ARGUMENT, "empty", "save path \"\"");
    expect(api->checkpoint_load(gL, "", 0), FHD_ERR_INVALID_ARGUMENT, "empty", "load path \"\"");
    const uint32_t bad_flags[] = {2, 0x80000000u, UINT32_MAX};
    for (int k = 0; k < 3; k++) {
        expect(api->checkpoint_save(gL, ok, bad_flags[k]), FHD_ERR_INVALID_ARGUMENT, "flags",
               "save flags");
        expect(api->checkpoint_load(gL, ok, bad_flags[k]), FHD_ERR_INVALID_ARGUMENT, "flags",
               "load flags");
    }
    /* loading things that are not checkpoint files */
    char fifo[600], missing[600];
    snprintf(fifo, sizeof fifo, "%s/a_fifo", scratch);
    snprintf(missing, sizeof missing, "%s/missing.safetensors", scratch);
    mkfifo(fifo, 0644);
    /* in a child: a load that blocks on the FIFO (no writer) fails the test, not hangs it */
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        fhd_t_pass = fhd_t_fail = 0;
        expect(api->checkpoint_load(gL, fifo, 0), FHD_ERR_IO, "regular file", "load a FIFO");
        fflush(stdout);
        _exit(fhd_t_fail ? 1 : 0);
    }
    int status = -1, waited = 0;
    while (waitpid(pid, &status, WNOHANG) == 0 && waited < 100) {
        usleep(100000);
        waited++;
    }
    if (waited >= 100) {
        kill(pid, SIGKILL);
        waitpid(pid, &status, 0);
        CHECK(0, "checkpoint_load of a FIFO without a writer blocked for 10 s");
    } else {
        CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0, "load a FIFO (child status %d)",
              status);
    }
    expect(api->checkpoint_load(gL, scratch, 0), FHD_ERR_IO, "", "load a directory");
    expect(api->checkpoint_load(gL, "/dev/null", 0), FHD_ERR_IO, "regular file", "load /dev/null");
    expect(api->checkpoint_load(gL, missing, 0), FHD_ERR_IO, "No such file", "load missing");
    expect(api->checkpoint_load(gL, "/proc/self/status", 0), FHD_ERR_CHECKPOINT_CORRUPT, "",
           "load /proc/self/status");
    char *long_path = malloc(8192);
    memset(long_path, 'b', 8191);
    long_path[0] = '/';
    long_path[8191] = '\0';
    expect(api->checkpoint_load(gL, long_path, 0), FHD_ERR_IO, "checkpoint_load",
           "load an 8 kB path");
    expect(api->checkpoint_save(gL, long_path, 0), FHD_ERR_IO, "checkpoint_save",
           "save an 8 kB path");
    free(long_path);
    /* a checkpoint of another architecture, and a valid one */
    char other[1024];
    snprintf(other, sizeof other, "%s", REL_CONFIG);
    memcpy(strstr(other, "\"obs_dim\": 3"), "\"obs_dim\": 4", 12);
    fhd_learner *O = fhd_test_create(api, other);
    char opath[600];
    snprintf(opath, sizeof opath, "%s/other.safetensors", scratch);
    CHECK(api->checkpoint_save(O, opath, 0) == FHD_OK, "save other: %s", api->last_error(O));
    api->destroy(O);
    expect(api->checkpoint_load(gL, opath, 0), FHD_ERR_CHECKPOINT_MISMATCH, "obs_dim",
           "load another architecture");
    expect(api->checkpoint_load(gL, ok, FHD_CKPT_INCLUDE_REPLAY), FHD_ERR_CHECKPOINT_MISMATCH,
           "replay", "load replay from a file without one");
    unlink(fifo);
    unlink(opath);
    unlink(ok);
}

/* Learners are independent: destroying one leaves another fully usable. */
static void test_after_destroy(void) {
    fhd_learner *A = fhd_test_create(api, REL_CONFIG), *B = fhd_test_create(api, REL_CONFIG),
                *C = fhd_test_create(api, REL_CONFIG);
    for (int s = 0; s < 30; s++) {
        CHECK(rel_observe(api, A, s) == FHD_OK, "A observe");
        CHECK(rel_observe(api, B, s) == FHD_OK, "B observe");
    }
    CHECK(api->train(A, 3, NULL) == FHD_OK, "A trains");
    api->destroy(A);
    api->destroy(C);
    /* B does everything after A and C are gone, and matches a learner that never saw them */
    CHECK(api->train(B, 3, NULL) == FHD_OK, "B trains after A was destroyed: %s",
          api->last_error(B));
    fhd_learner *D = fhd_test_create(api, REL_CONFIG);
    for (int s = 0; s < 30; s++)
        rel_observe(api, D, s);
    CHECK(api->train(D, 3, NULL) == FHD_OK, "D trains");
    CHECK(rel_fingerprint(api, B) == rel_fingerprint(api, D),
          "B after other learners were destroyed equals a learner created alone");
    float obs[REL_S] = {0.1f, 0.2f, 0.3f};
    int32_t act[REL_D];
    fhd_act_args a = FHD_ACT_ARGS_INIT;
    a.num_obs = 1;
    a.obs = obs;
    a.actions = act;
    CHECK(api->act(B, &a) == FHD_OK, "B acts");
    size_t need;
    CHECK(api->metrics(B, NULL, 0, &need) == FHD_OK, "B metrics");
    fhd_tensor_info ti = FHD_TENSOR_INFO_INIT;
    CHECK(api->tensor_info(B, 0, &ti) == FHD_OK, "B tensor_info");
    api->destroy(B);
    api->destroy(D);
}

int main(int argc, char **argv) {
    if (argc < 3) {
        printf("usage: test_misuse LIBRARY SCRATCH_DIR\n");
        return 2;
    }
    void *lib = NULL;
    api = fhd_test_load(argv[1], &lib);
    char scratch[512];
    mkdir(argv[2], 0755);
    snprintf(scratch, sizeof scratch, "%s/misuse.XXXXXX", argv[2]);
    if (!mkdtemp(scratch)) {
        printf("FAIL cannot create a directory under %s\n", argv[2]);
        return 1;
    }
    test_table_and_statics(lib);
    test_init();
    test_null_learner();
    /* the fixture: a learner with history and a previous step */
    gL = fhd_test_create(api, REL_CONFIG);
    for (int s = 0; s < 30; s++)
        CHECK(rel_observe(api, gL, s) == FHD_OK, "observe");
    CHECK(api->train(gL, 3, NULL) == FHD_OK, "train");
    float obs[REL_E * REL_S] = {0};
    int32_t act[REL_E * REL_D];
    fhd_step_args s = FHD_STEP_ARGS_INIT;
    s.num_envs = REL_E;
    s.obs = obs;
    s.actions = act;
    CHECK(api->step(gL, &s) == FHD_OK, "first step");
    g_state = rel_fingerprint(api, gL);
    test_struct_sizes();
    test_pointers_and_counts();
    test_paths(scratch);
    api->destroy(gL);
    test_after_destroy();
    printf("%d rejected calls checked: status, message, learner unchanged\n", g_calls);
    rmdir(scratch);
    return fhd_test_finish();
}
