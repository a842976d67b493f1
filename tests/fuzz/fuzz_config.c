/* fuzz_config.c - fuzz target: config parsing and learner creation through the v1 ABI.
 *
 * The input is config JSON text (any bytes, not NUL-terminated). Every input goes through the
 * config parser (fhd__config_parse: the whole parser, whatever sizes the config names). Inputs
 * that parse are then created through the table's init when the learner they describe fits a
 * fuzzing process (estimated memory <= 48 MiB, <= 2^20 parameters: the schema allows
 * terabyte-sized replays, which would only measure the machine), then metrics (size query,
 * exact buffer, too-small buffer), one greedy act on a zero observation, and destroy.
 *
 * Properties checked on every input:
 *   - the status is FHD_OK or a code of the table; on failure err.code equals it, the message
 *     is NUL-terminated and not empty, out is NULL;
 *   - init agrees with the parser (a config the parser accepts is not rejected as a config
 *     error by init, and the reverse);
 *   - metrics is NUL-terminated JSON text of the announced size; a buffer one byte too small
 *     gives FHD_ERR_BUFFER_TOO_SMALL and the size;
 *   - greedy actions lie in [0, K_d) for each branch.
 */
#define _POSIX_C_SOURCE 200809L
#include <math.h>

#include "config.h"
#include "fuzz_common.h"
#include "layout.h"

#define BUDGET_BYTES ((uint64_t)48 << 20)
#define BUDGET_PARAMS ((uint64_t)1 << 20)

static const fhd_api_v1 *api;

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc;
    (void)argv;
    fuzz_no_cuda_module();
    return 0;
}

/* Bytes the learner front and the CPU backend allocate for `cfg` (layout `lo`), roughly. */
static uint64_t estimate_bytes(const fhd__config *c, const fhd__layout *lo) {
    const uint64_t P = lo->num_params, S = lo->S, D = lo->D, KT = lo->KT, W = lo->max_width;
    const uint64_t B = c->batch_size, N = c->replay_capacity, E = c->num_envs, n = c->n_step;
    uint64_t floats = 5 * P + 2 * lo->sn_size + 2 * P /* init params */;
    floats += N * (2 * S + 2 + D); /* replay ring */
    floats += 2 * N;               /* sum tree (uint64) */
    floats += B * (6 * W + 4 * KT + 2 * S + 8 + 3 * D);
    for (uint32_t l = 0; l <= lo->L; l++)
        floats += B * lo->layers[l].out;
    floats += E * n * (3 * S + 2 * D + 4) + E * (S + D + 8);
    return 4 * floats;
}

static int32_t config_class(int32_t rc) {
    return rc >= FHD_ERR_CONFIG_MISSING && rc <= FHD_ERR_CONFIG_SYNTAX;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (!api) {
        fuzz_no_cuda_module();
        api = (const fhd_api_v1 *)fhd_get_api_base()->get_api(1, NULL);
    }
    const char *text = (const char *)data;
    fhd__config cfg;
    fhd_error err = FHD_ERROR_INIT;
    int32_t rc = fhd__config_parse(text, size, &cfg, &err);
    FUZZ_REQUIRE(fuzz_status_known(rc), "parse status %d", rc);
    if (rc != FHD_OK) {
        FUZZ_REQUIRE(err.code == rc, "err.code %d, status %d", err.code, rc);
        FUZZ_REQUIRE(fuzz_message_ok(err.message, sizeof err.message), "empty message");
        FUZZ_REQUIRE(memchr(err.path, '\0', sizeof err.path) != NULL, "path not terminated");
        /* init must reject it the same way (cheap: it stops at the same point) */
        fhd_learner *L = (fhd_learner *)1;
        fhd_error e2 = FHD_ERROR_INIT;
        int32_t rc2 = api->init(text, size, &L, &e2);
        FUZZ_REQUIRE(rc2 == rc && L == NULL, "init gave %d after parse gave %d", rc2, rc);
        FUZZ_REQUIRE(strcmp(e2.message, err.message) == 0, "messages differ");
        return 0;
    }
    FUZZ_REQUIRE(err.code == FHD_OK, "err.code %d on success", err.code);
    fhd__layout lo;
    if (fhd__layout_init(&lo, &cfg) != 0)
        return 0; /* init reports CONFIG_INCONSISTENT; the parser's limits make this unreachable */
    if (lo.num_params > BUDGET_PARAMS || estimate_bytes(&cfg, &lo) > BUDGET_BYTES)
        return 0;

    fhd_learner *L = NULL;
    err = (fhd_error)FHD_ERROR_INIT;
    rc = api->init(text, size, &L, &err);
    FUZZ_REQUIRE(fuzz_status_known(rc), "init status %d", rc);
    if (rc != FHD_OK) {
        /* only the environment may refuse a valid config: no CUDA here, or no memory */
        FUZZ_REQUIRE(rc == FHD_ERR_BACKEND_UNAVAILABLE || rc == FHD_ERR_OUT_OF_MEMORY,
                     "init rejected a parsed config with %s: %s", api->status_name(rc),
                     err.message);
        FUZZ_REQUIRE(!config_class(rc), "config error after a successful parse");
        FUZZ_REQUIRE(L == NULL && err.code == rc, "out %p, err.code %d", (void *)L, err.code);
        FUZZ_REQUIRE(fuzz_message_ok(err.message, sizeof err.message), "empty message");
        return 0;
    }
    FUZZ_REQUIRE(L != NULL, "init succeeded without a learner");

    /* metrics: size query, then a buffer with room to spare (uptime may add digits) */
    size_t need = 0;
    rc = api->metrics(L, NULL, 0, &need);
    FUZZ_REQUIRE(rc == FHD_OK && need > 2, "metrics size query: %d, %zu", rc, need);
    size_t cap = need + 64, got = 0;
    char *buf = malloc(cap);
    FUZZ_REQUIRE(buf != NULL, "out of memory in the harness");
    rc = api->metrics(L, buf, cap, &got);
    FUZZ_REQUIRE(rc == FHD_OK, "metrics: %s", api->last_error(L));
    FUZZ_REQUIRE(got >= 3 && got <= cap && strlen(buf) + 1 == got, "metrics size %zu", got);
    FUZZ_REQUIRE(buf[0] == '{' && buf[got - 2] == '}', "metrics is not an object: %s", buf);
    FUZZ_REQUIRE(strstr(buf, "\"env_steps\":0") != NULL, "fresh learner counters: %s", buf);
    size_t need2 = 0;
    rc = api->metrics(L, buf, 2, &need2);
    FUZZ_REQUIRE(rc == FHD_ERR_BUFFER_TOO_SMALL && need2 > 2, "small buffer: %d", rc);
    FUZZ_REQUIRE(fuzz_message_ok(api->last_error(L), 1024), "no message");
    free(buf);

    /* one greedy action on a zero observation */
    float *obs = calloc(cfg.obs_dim, sizeof(float));
    int32_t *act = calloc(cfg.num_branches, sizeof(int32_t));
    FUZZ_REQUIRE(obs && act, "out of memory in the harness");
    fhd_act_args a = FHD_ACT_ARGS_INIT;
    a.num_obs = 1;
    a.obs = obs;
    a.actions = act;
    rc = api->act(L, &a);
    FUZZ_REQUIRE(rc == FHD_OK, "act: %s", api->last_error(L));
    for (uint32_t d = 0; d < cfg.num_branches; d++)
        FUZZ_REQUIRE(act[d] >= 0 && (uint32_t)act[d] < cfg.actions[d], "action %d of branch %u",
                     act[d], d);
    free(obs);
    free(act);
    api->destroy(L);
    return 0;
}
