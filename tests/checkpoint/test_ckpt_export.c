/* test_ckpt_export.c - writes checkpoints of three architectures and, for each, the learner's
 * Q-values and greedy actions on 64 observations (act with q_values), for ckpt_torch.py to
 * compare with a PyTorch module loaded from the file by the `safetensors` package.
 *   dueling_sn_all: dueling, 2 branches (3, 4), spectral norm on every torso layer, replay;
 *   plain:          no dueling, 1 branch (5), no spectral norm, uniform replay, no replay saved;
 *   branch3_sn_last: dueling, 3 branches (2, 2, 2), 3 torso layers, spectral norm last.
 * Usage: test_ckpt_export <libfoxhunt_dqn.so> <output dir>
 */
#include "ckpt_common.h"

static const fhd_api_v1 *api;
static const char *lib_version = "";

static uint64_t rs = 0x243F6A8885A308D3ull;
static float frand(void) { /* [-1, 1) */
    rs ^= rs << 13;
    rs ^= rs >> 7;
    rs ^= rs << 17;
    return (float)((rs >> 40) & 0xFFFFFF) / 8388608.0f - 1.0f;
}

static void export_one(const char *outdir, const char *name, const char *cfg, uint32_t S,
                       const uint32_t *K, uint32_t D, uint32_t flags) {
    fhd_learner *L = fhd_test_create(api, cfg);
    enum { E = 2, N = 64 };
    float obs[E * 16], next[E * 16], rew[E];
    int32_t act[E * 8];
    uint8_t term[E], trunc[E] = {0, 0};
    for (int step = 0; step < 200; step++) { /* random transitions, then updates */
        for (uint32_t i = 0; i < E * S; i++) {
            obs[i] = frand();
            next[i] = frand();
        }
        for (uint32_t e = 0; e < E; e++) {
            rew[e] = frand();
            term[e] = frand() > 0.8f;
            for (uint32_t d = 0; d < D; d++)
                act[e * D + d] = (int32_t)((frand() + 1.0f) * 0.5f * (float)K[d]) % (int32_t)K[d];
        }
        fhd_transitions t = {sizeof(fhd_transitions), E, obs, act, rew, next, term, trunc, NULL, NULL, NULL};
        CHECK(api->observe(L, &t) == FHD_OK, "%s: observe: %s", name, api->last_error(L));
    }
    CHECK(api->train(L, 150, NULL) == FHD_OK, "%s: train: %s", name, api->last_error(L));
    uint32_t KT = 0;
    for (uint32_t d = 0; d < D; d++)
        KT += K[d];
    float *x = malloc(sizeof(float) * N * S), *q = malloc(sizeof(float) * N * KT);
    int32_t *g = malloc(sizeof(int32_t) * N * D);
    for (uint32_t i = 0; i < N * S; i++)
        x[i] = 2.0f * frand();
    fhd_act_args a = FHD_ACT_ARGS_INIT;
    a.num_obs = N;
    a.obs = x;
    a.actions = g;
    a.q_values = q;
    CHECK(api->act(L, &a) == FHD_OK, "%s: act: %s", name, api->last_error(L));
    char path[1024];
    snprintf(path, sizeof path, "%s/%s.safetensors", outdir, name);
    CHECK(api->checkpoint_save(L, path, flags) == FHD_OK, "%s: save: %s", name, api->last_error(L));
    json_t *o = json_object(), *jo = json_array(), *jq = json_array(), *jg = json_array();
    for (uint32_t i = 0; i < N; i++) {
        json_t *r = json_array(), *rq = json_array(), *rg = json_array();
        for (uint32_t k = 0; k < S; k++)
            json_array_append_new(r, json_real(x[i * S + k]));
        for (uint32_t k = 0; k < KT; k++)
            json_array_append_new(rq, json_real(q[i * KT + k]));
        for (uint32_t d = 0; d < D; d++)
            json_array_append_new(rg, json_integer(g[i * D + d]));
        json_array_append_new(jo, r);
        json_array_append_new(jq, rq);
        json_array_append_new(jg, rg);
    }
    char buf[8192];
    size_t need = 0;
    api->metrics(L, buf, sizeof buf, &need);
    json_object_set_new(o, "metrics", json_loads(buf, 0, NULL));
    json_object_set_new(o, "obs", jo);
    json_object_set_new(o, "q", jq);
    json_object_set_new(o, "greedy", jg);
    json_object_set_new(o, "includes_replay", json_boolean(flags & FHD_CKPT_INCLUDE_REPLAY));
    json_object_set_new(o, "library_version", json_string(lib_version));
    snprintf(path, sizeof path, "%s/%s.json", outdir, name);
    /* floats are written with 9 significant digits: they read back as the same float32 */
    CHECK(json_dump_file(o, path, JSON_REAL_PRECISION(9) | JSON_COMPACT) == 0, "write %s", path);
    json_decref(o);
    free(x);
    free(q);
    free(g);
    api->destroy(L);
}

int main(int argc, char **argv) {
    if (argc < 3) {
        printf("usage: %s <libfoxhunt_dqn.so> <output dir>\n", argv[0]);
        return 2;
    }
    void *h = NULL;
    api = fhd_test_load(argv[1], &h);
    fhd_get_api_base_fn entry = (fhd_get_api_base_fn)dlsym(h, FHD_ENTRY_SYMBOL);
    lib_version = entry()->version;
    if (make_dirs(argv[2]) != 0) {
        printf("FAIL cannot create %s\n", argv[2]);
        return 1;
    }
    const uint32_t k1[2] = {3, 4}, k2[1] = {5}, k3[3] = {2, 2, 2};
    export_one(argv[2], "dueling_sn_all",
               "{\"obs_dim\": 6, \"actions\": [3, 4], \"hidden\": [12, 10], \"dueling\": true, "
               "\"spectral_norm\": \"all\", \"replay\": \"prioritized\", \"replay_capacity\": 256, "
               "\"num_envs\": 2, \"n_step\": 3, \"batch_size\": 16, \"lr\": 0.003, \"seed\": 5}",
               6, k1, 2, FHD_CKPT_INCLUDE_REPLAY);
    export_one(argv[2], "plain",
               "{\"obs_dim\": 5, \"actions\": [5], \"hidden\": [7], \"dueling\": false, "
               "\"replay_capacity\": 512, \"num_envs\": 2, \"batch_size\": 8, \"lr\": 0.003, "
               "\"seed\": 6}",
               5, k2, 1, 0);
    export_one(argv[2], "branch3_sn_last",
               "{\"obs_dim\": 4, \"actions\": [2, 2, 2], \"hidden\": [6, 5, 4], \"dueling\": true, "
               "\"spectral_norm\": \"last\", \"replay_capacity\": 128, \"num_envs\": 2, "
               "\"n_step\": 2, \"batch_size\": 8, \"lr\": 0.003, \"seed\": 9}",
               4, k3, 3, FHD_CKPT_INCLUDE_REPLAY);
    return fhd_test_finish();
}
