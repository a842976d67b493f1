/* test_abi.c - version negotiation, struct_size rules, status table, NULL safety, backend
 * selection and the embedded manifest, all through dlopen as a host sees them.
 * usage: test_abi LIBRARY MANIFEST_JSON */
#include <math.h>
#include <stddef.h>
#include <stdint.h>

#include "fhd_test.h"

static const char *small_cfg =
    "{\"obs_dim\": 3, \"actions\": [2], \"hidden\": [8], \"batch_size\": 4, "
    "\"replay_capacity\": 32, \"learning_starts\": 0}";

static char *read_all(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *s = malloc((size_t)n + 1);
    if (s && fread(s, 1, (size_t)n, f) != (size_t)n) {
        free(s);
        s = NULL;
    }
    if (s)
        s[n] = '\0';
    fclose(f);
    return s;
}

static void test_negotiation(void *h) {
    fhd_get_api_base_fn entry = (fhd_get_api_base_fn)dlsym(h, FHD_ENTRY_SYMBOL);
    const fhd_api_base *base = entry();
    CHECK(base->struct_size == sizeof(fhd_api_base), "base struct_size %u", base->struct_size);
    CHECK(base->abi_major == 1, "abi_major %u", base->abi_major);
    CHECK(base->version && strlen(base->version) >= 5, "version string");
    fhd_error err = FHD_ERROR_INIT;
    const fhd_api_v1 *api = base->get_api(1, &err);
    CHECK(api != NULL && err.code == FHD_OK, "get_api(1)");
    CHECK(api->struct_size == sizeof(fhd_api_v1), "table size %u", api->struct_size);
    CHECK(api->abi_major == 1 && api->abi_minor == FHD_ABI_MINOR, "table version");
    /* unknown majors: NULL and a message, never a crash */
    uint32_t bad[] = {0, 2, 3, 1000, UINT32_MAX};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        fhd_error e = FHD_ERROR_INIT;
        CHECK(base->get_api(bad[i], &e) == NULL, "get_api(%u) must be NULL", bad[i]);
        CHECK(e.code == FHD_ERR_UNSUPPORTED_VERSION, "code %d", e.code);
        CHECK(strstr(e.message, "major") && strstr(e.message, "provides major 1"), "msg: %s",
              e.message);
    }
    CHECK(base->get_api(7, NULL) == NULL, "NULL err is allowed");
    /* a host built against an older minor (a shorter table) only calls what lies inside the
     * library's struct_size; a library with a shorter table than the host knows is detected */
    fhd_api_v1 shorter = *api;
    shorter.struct_size = (uint32_t)offsetof(fhd_api_v1, tensor_info);
    CHECK(FHD_API_HAS(&shorter, checkpoint_load), "older-minor table still has checkpoint_load");
    CHECK(!FHD_API_HAS(&shorter, tensor_info), "older-minor table lacks tensor_info");
    CHECK(FHD_API_HAS(api, tensor_write), "this library has every minor-0 member");
}

static void test_status_table(const fhd_api_v1 *api) {
    int codes[] = {
#define X(name, value, msg) value,
        FHD_STATUS_MAP(X)
#undef X
    };
    size_t n = sizeof codes / sizeof codes[0];
    for (size_t i = 0; i < n; i++) {
        const char *nm = api->status_name(codes[i]);
        CHECK(strncmp(nm, "FHD_", 4) == 0 && strcmp(nm, "FHD_UNKNOWN_STATUS") != 0, "name of %d",
              codes[i]);
        CHECK(strlen(api->status_message(codes[i])) > 3, "message of %d", codes[i]);
        CHECK(codes[i] <= 0, "status codes are 0 or negative");
        for (size_t j = 0; j < i; j++)
            CHECK(codes[i] != codes[j] && strcmp(nm, api->status_name(codes[j])) != 0,
                  "distinct %d", codes[i]);
    }
    CHECK(strcmp(api->status_name(FHD_ERR_CONFIG_RANGE), "FHD_ERR_CONFIG_RANGE") == 0, "name");
    CHECK(strcmp(api->status_name(12345), "FHD_UNKNOWN_STATUS") == 0, "unknown code");
    CHECK(strcmp(api->status_name(-999), "FHD_UNKNOWN_STATUS") == 0, "unknown code");
}

static void test_null_safety(const fhd_api_v1 *api) {
    api->destroy(NULL); /* harmless */
    CHECK(strlen(api->last_error(NULL)) > 0, "last_error(NULL) gives a message");
    fhd_learner *L = (fhd_learner *)0x1;
    fhd_error err = FHD_ERROR_INIT;
    CHECK(api->init(NULL, 10, &L, &err) == FHD_ERR_NULL_POINTER && L == NULL, "init NULL json");
    CHECK(api->init("{}", 2, NULL, &err) == FHD_ERR_NULL_POINTER, "init NULL out");
    CHECK(api->act(NULL, NULL) == FHD_ERR_NULL_POINTER, "act NULL learner");
    CHECK(api->observe(NULL, NULL) == FHD_ERR_NULL_POINTER, "observe NULL learner");
    CHECK(api->train(NULL, 1, NULL) == FHD_ERR_NULL_POINTER, "train NULL learner");
    CHECK(api->train_batch(NULL, NULL, NULL) == FHD_ERR_NULL_POINTER, "train_batch NULL");
    CHECK(api->step(NULL, NULL) == FHD_ERR_NULL_POINTER, "step NULL learner");
    size_t need = 0;
    CHECK(api->metrics(NULL, NULL, 0, &need) == FHD_ERR_NULL_POINTER, "metrics NULL");
    CHECK(api->checkpoint_save(NULL, "x", 0) == FHD_ERR_NULL_POINTER, "save NULL");
    CHECK(api->checkpoint_load(NULL, "x", 0) == FHD_ERR_NULL_POINTER, "load NULL");
    CHECK(api->tensor_info(NULL, 0, NULL) == FHD_ERR_NULL_POINTER, "tensor_info NULL");
    CHECK(api->tensor_read(NULL, "x", NULL, 0) == FHD_ERR_NULL_POINTER, "tensor_read NULL");
    CHECK(api->tensor_write(NULL, "x", NULL, 0) == FHD_ERR_NULL_POINTER, "tensor_write NULL");
    /* a syntax error with err == NULL is still just a status */
    CHECK(api->init("{", 1, &L, NULL) == FHD_ERR_CONFIG_SYNTAX && L == NULL, "init NULL err");
}

static void test_struct_size(const fhd_api_v1 *api) {
    fhd_learner *L = fhd_test_create(api, small_cfg);
    float obs[3] = {0.1f, 0.2f, 0.3f};
    int32_t act = -7;
    /* too small: rejected with FHD_ERR_STRUCT_SIZE */
    fhd_act_args a = FHD_ACT_ARGS_INIT;
    a.num_obs = 1;
    a.obs = obs;
    a.actions = &act;
    a.struct_size = 8;
    CHECK(api->act(L, &a) == FHD_ERR_STRUCT_SIZE, "small act args");
    CHECK(strstr(api->last_error(L), "struct_size"), "msg: %s", api->last_error(L));
    /* larger (a newer host's struct with trailing fields): accepted, extra fields ignored */
    struct {
        fhd_act_args a;
        uint64_t future[4];
    } big;
    memset(&big, 0xAB, sizeof big);
    big.a = a;
    big.a.struct_size = sizeof big;
    big.a.q_values = NULL;
    big.a.explore = 0;
    CHECK(api->act(L, &big.a) == FHD_OK, "larger act args: %s", api->last_error(L));
    CHECK(act == 0 || act == 1, "action %d", act);
    /* output struct of an older, shorter version: written only up to its struct_size */
    for (int i = 0; i < 8; i++) {
        int32_t a1 = i % 2;
        float r = 1.0f;
        uint8_t t = 0, tr = 0;
        fhd_transitions tx = {sizeof tx, 1, obs, &a1, &r, obs, &t, &tr, NULL, NULL, NULL};
        CHECK(api->observe(L, &tx) == FHD_OK, "observe: %s", api->last_error(L));
    }
    fhd_train_stats st;
    memset(&st, 0x5A, sizeof st);
    st.struct_size = (uint32_t)offsetof(fhd_train_stats, loss);
    CHECK(api->train(L, 1, &st) == FHD_OK, "train: %s", api->last_error(L));
    CHECK(st.updates_done == 1 && st.update_index == 1, "stats head written");
    unsigned char *tail = (unsigned char *)&st + offsetof(fhd_train_stats, loss);
    int untouched = 1;
    for (size_t i = 0; i < sizeof st - offsetof(fhd_train_stats, loss); i++)
        untouched &= tail[i] == 0x5A;
    CHECK(untouched, "fields past struct_size must not be written");
    /* fhd_error of a shorter version: only the code is written */
    struct {
        fhd_error e;
    } short_err;
    memset(&short_err, 0x11, sizeof short_err);
    short_err.e.struct_size = (uint32_t)(offsetof(fhd_error, code) + sizeof(int32_t));
    fhd_learner *L2 = NULL;
    CHECK(api->init("{\"obs_dim\": 0}", 14, &L2, &short_err.e) == FHD_ERR_CONFIG_RANGE, "range");
    CHECK(short_err.e.code == FHD_ERR_CONFIG_RANGE, "code written");
    CHECK((unsigned char)short_err.e.message[0] == 0x11, "message not written past struct_size");
    api->destroy(L);
}

static void test_backends(const fhd_api_v1 *api) {
    /* cuda without a usable GPU: FHD_ERR_BACKEND_UNAVAILABLE saying why */
    fhd_error err = FHD_ERROR_INIT;
    fhd_learner *L = NULL;
    const char *cuda = "{\"backend\": \"cuda\", \"obs_dim\": 3, \"actions\": [2], \"hidden\": [8], "
                       "\"batch_size\": 4, \"replay_capacity\": 32}";
    int32_t rc = api->init(cuda, strlen(cuda), &L, &err);
    if (rc == FHD_OK) {
        printf("note: a CUDA device is usable here; skipping the unavailable-backend checks\n");
        api->destroy(L);
    } else {
        CHECK(rc == FHD_ERR_BACKEND_UNAVAILABLE, "cuda -> %s", api->status_name(rc));
        CHECK(strstr(err.message, "unavailable") &&
                  (strstr(err.message, "module") || strstr(err.message, "driver") ||
                   strstr(err.message, "device")),
              "reason: %s", err.message);
        CHECK(strcmp(err.path, "$.backend") == 0, "path %s", err.path);
        printf("cuda unavailable: %s\n", err.message);
        const char *autocfg = "{\"backend\": \"auto\", \"obs_dim\": 3, \"actions\": [2], "
                              "\"hidden\": [8], \"batch_size\": 4, \"replay_capacity\": 32}";
        L = fhd_test_create(api, autocfg);
        char buf[4096];
        size_t need = 0;
        CHECK(api->metrics(L, buf, sizeof buf, &need) == FHD_OK, "metrics");
        CHECK(strstr(buf, "\"backend\":\"cpu\"") && strstr(buf, "\"backend_requested\":\"auto\""),
              "auto falls back to cpu: %s", buf);
        CHECK(strstr(buf, "\"backend_fallback_reason\":\"\"") == NULL, "fallback reason given");
        api->destroy(L);
    }
}

static void test_metrics_size_query(const fhd_api_v1 *api) {
    fhd_learner *L = fhd_test_create(api, small_cfg);
    size_t need = 0;
    CHECK(api->metrics(L, NULL, 0, &need) == FHD_OK && need > 10, "size query %zu", need);
    char small[8];
    size_t need2 = 0;
    CHECK(api->metrics(L, small, sizeof small, &need2) == FHD_ERR_BUFFER_TOO_SMALL, "too small");
    CHECK(need2 >= need - 8 && need2 > sizeof small, "needed reported %zu", need2);
    char *buf = malloc(need2 + 64);
    CHECK(api->metrics(L, buf, need2 + 64, &need) == FHD_OK && strlen(buf) + 1 == need, "fits");
    CHECK(api->metrics(L, buf, 10, NULL) == FHD_ERR_NULL_POINTER, "needed must not be NULL");
    free(buf);
    api->destroy(L);
}

/* What a minor-1 host does before it uses uint8 observations: 1 when the table has obs_info
 * (then the library reads the minor-1 fields), else 0 and `why` says what is missing. */
static int host_can_use_minor1(const fhd_api_v1 *api, char *why, size_t cap) {
    if (FHD_API_HAS(api, obs_info))
        return 1;
    snprintf(why, cap, "the library provides ABI 1.%u (table of %u bytes): uint8 observations "
                       "need 1.1 (obs_info)", api->abi_minor, api->struct_size);
    return 0;
}

/* A minor-1 host against a minor-0 table, and the library against minor-0-sized structs. */
static void test_minor1_against_minor0(const fhd_api_v1 *api) {
    char why[160] = "";
    fhd_api_v1 old;
    memset(&old, 0, sizeof old);
    memcpy(&old, api, FHD_API_V1_SIZE_MINOR_0); /* what a 1.0 library hands out */
    old.struct_size = FHD_API_V1_SIZE_MINOR_0;
    old.abi_minor = 0;
    CHECK(host_can_use_minor1(api, why, sizeof why) == 1, "this library has obs_info");
    CHECK(host_can_use_minor1(&old, why, sizeof why) == 0 && strstr(why, "ABI 1.0") &&
              strstr(why, "obs_info"),
          "refused cleanly against a minor-0 table: %s", why);
    CHECK(FHD_API_HAS(&old, tensor_write) && !FHD_API_HAS(&old, obs_info),
          "FHD_API_HAS stops at the table's struct_size");

    fhd_learner *L = fhd_test_create(
        api, "{\"obs_shape\": [2, 3, 3], \"obs_dtype\": \"uint8\", \"actions\": [3], "
             "\"hidden\": [4], \"batch_size\": 2, \"replay_capacity\": 8}");
    fhd_obs_info info = FHD_OBS_INFO_INIT;
    CHECK(api->obs_info(L, &info) == FHD_OK && info.dtype == FHD_OBS_DTYPE_UINT8 &&
              info.rank == 3 && info.shape[0] == 2 && info.shape[1] == 3 && info.shape[2] == 3 &&
              info.size == 18 && info.frame_stack == 1 && fabsf(info.scale - 1.0f / 255) < 1e-9f,
          "obs_info: dtype %u rank %u size %u scale %g", info.dtype, info.rank, info.size,
          (double)info.scale);
    uint8_t px[18];
    int32_t act[1];
    float q[3];
    for (int i = 0; i < 18; i++)
        px[i] = (uint8_t)(14 * i);
    fhd_act_args a = FHD_ACT_ARGS_INIT;
    a.num_obs = 1;
    a.obs_u8 = px;
    a.actions = act;
    a.q_values = q;
    CHECK(api->act(L, &a) == FHD_OK && act[0] >= 0 && act[0] < 3, "uint8 act: %s",
          api->last_error(L));
    CHECK(act[0] == (q[1] > q[0] ? (q[2] > q[1] ? 2 : 1) : (q[2] > q[0] ? 2 : 0)),
          "greedy action matches its Q-values");
    /* a struct_size of minor 0 hides obs_u8: the library sees no observations */
    a.struct_size = FHD_ACT_ARGS_SIZE_V1_0;
    CHECK(api->act(L, &a) == FHD_ERR_NULL_POINTER && strstr(api->last_error(L), "obs_u8"),
          "minor-0 struct_size: obs_u8 unread: %s", api->last_error(L));
    /* and both pointers at once are refused, naming both */
    float f[18] = {0};
    a.struct_size = sizeof a;
    a.obs = f;
    CHECK(api->act(L, &a) == FHD_ERR_INVALID_ARGUMENT && strstr(api->last_error(L), "`obs`") &&
              strstr(api->last_error(L), "`obs_u8`"),
          "both pointers: %s", api->last_error(L));
    api->destroy(L);

    /* spectral norm on conv layers is CPU-only for now: "cuda" refuses it before any module
     * is asked, "auto" takes the CPU and says why in metrics (conv torsos without it, and
     * uint8 images, are not refused by the loader: the CUDA module takes them) */
    const char *cu = "{\"obs_shape\": [2, 3, 3], \"obs_dtype\": \"uint8\", \"actions\": [3], "
                     "\"conv\": [{\"out\": 3, \"kernel\": 2, \"stride\": 1, \"padding\": 1}], "
                     "\"spectral_norm\": \"all\", \"backend\": \"cuda\"}";
    fhd_error err = FHD_ERROR_INIT;
    L = NULL;
    CHECK(api->init(cu, strlen(cu), &L, &err) == FHD_ERR_BACKEND_UNAVAILABLE && L == NULL &&
              strcmp(err.path, "$.spectral_norm") == 0 && strstr(err.message, "cpu backend only"),
          "cuda + conv + spectral norm: %s %s", err.path, err.message);
    const char *au = "{\"obs_shape\": [2, 3, 3], \"obs_dtype\": \"uint8\", \"actions\": [3], "
                     "\"conv\": [{\"out\": 3, \"kernel\": 2, \"stride\": 1, \"padding\": 1}], "
                     "\"spectral_norm\": \"all\", \"backend\": \"auto\"}";
    L = fhd_test_create(api, au);
    char m[8192];
    size_t need = 0;
    CHECK(api->metrics(L, m, sizeof m, &need) == FHD_OK && strstr(m, "\"backend\":\"cpu\"") &&
              strstr(m, "spectral norm on conv layers") && strstr(m, "cpu-only"),
          "auto + conv + spectral norm falls back to cpu and says so: %.300s", m);
    api->destroy(L);
    /* the diversity term and detailed_metrics run on both backends: "cuda" is never refused
     * at their paths (it is created where a device is, else refused at $.backend), and "auto"
     * never falls back for them */
    const char *const both[2][3] = {
        {"{\"obs_dim\": 3, \"actions\": [3], \"backend\": \"%s\", \"diversity_coef\": 0.1}",
         "diversity", "\"diversity_entropy\":null"},
        {"{\"obs_dim\": 3, \"actions\": [3], \"backend\": \"%s\", \"detailed_metrics\": true}",
         "detailed_metrics", "\"q_delta\":null"}};
    for (int i = 0; i < 2; i++) {
        char js[256];
        snprintf(js, sizeof js, both[i][0], "cuda");
        fhd_error e2 = FHD_ERROR_INIT;
        L = NULL;
        const int32_t rc = api->init(js, strlen(js), &L, &e2);
        CHECK(rc == FHD_OK ||
                  (rc == FHD_ERR_BACKEND_UNAVAILABLE && L == NULL &&
                   strcmp(e2.path, "$.backend") == 0 && !strstr(e2.message, both[i][1])),
              "cuda + %s: not refused for it (%d %s %s)", both[i][1], rc, e2.path, e2.message);
        api->destroy(L);
        snprintf(js, sizeof js, both[i][0], "auto");
        L = fhd_test_create(api, js);
        CHECK(api->metrics(L, m, sizeof m, &need) == FHD_OK && strstr(m, both[i][2]) &&
                  !strstr(m, "does not support"),
              "auto + %s: no fallback for it: %.300s", both[i][1], m);
        api->destroy(L);
    }
}

int main(int argc, char **argv) {
    if (argc < 3) {
        printf("usage: test_abi LIBRARY MANIFEST\n");
        return 2;
    }
    void *h = NULL;
    const fhd_api_v1 *api = fhd_test_load(argv[1], &h);
    test_negotiation(h);
    test_status_table(api);
    test_null_safety(api);
    test_struct_size(api);
    test_backends(api);
    test_metrics_size_query(api);
    test_minor1_against_minor0(api);
    char *file = read_all(argv[2]);
    CHECK(file && strcmp(file, api->manifest()) == 0, "embedded manifest == %s", argv[2]);
    CHECK(api->manifest() == api->manifest(), "static lifetime");
    free(file);
    dlclose(h);
    return fhd_test_finish();
}
