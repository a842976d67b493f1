#include "cuda_test.h"
static void one(const char *extra) {
    char jc[1024], jg[1024];
    snprintf(jc, sizeof jc, "{\"backend\": \"cpu\", \"seed\": 3, \"num_envs\": 1, \"batch_size\": 4, \"replay_capacity\": 64, %s}", extra);
    snprintf(jg, sizeof jg, "{\"backend\": \"cuda\", \"seed\": 3, \"num_envs\": 1, \"batch_size\": 4, \"replay_capacity\": 64, %s}", extra);
    fhd_learner *Lc = ct_create(jc, NULL), *Lg = ct_create_cuda(jg);
    if (!Lc || !Lg) return;
    const uint32_t n = 3, S = Lc->lo.S, KT = Lc->lo.KT;
    float *obs = malloc(4 * n * S), qc[64], qg[64];
    int32_t ac[16], ag[16];
    for (uint32_t i = 0; i < n * S; i++) obs[i] = (float)((i * 37) % 11) / 10.0f;
    fhd_act_args a = FHD_ACT_ARGS_INIT;
    a.num_obs = n; a.obs = obs; a.actions = ac; a.q_values = qc;
    fhd__learner_act(Lc, &a);
    a.actions = ag; a.q_values = qg;
    int rg = fhd__learner_act(Lg, &a);
    printf("%s\n rc %d:", extra, rg);
    for (uint32_t i = 0; i < n * KT; i++) printf(" %.5f/%.5f", qc[i], qg[i]);
    printf("\n");
    fhd__learner_destroy(Lc); fhd__learner_destroy(Lg);
}
int main(void) {
    ct_require_gpu();
    one("\"obs_shape\": [1, 3, 3], \"conv\": [{\"out\": 1, \"kernel\": 1, \"stride\": 1, \"padding\": 0}], \"hidden\": [2], \"actions\": [2], \"dueling\": false");
    one("\"obs_shape\": [1, 3, 3], \"conv\": [{\"out\": 2, \"kernel\": 1, \"stride\": 1, \"padding\": 0}], \"hidden\": [2], \"actions\": [2], \"dueling\": false");
    one("\"obs_shape\": [2, 3, 3], \"conv\": [{\"out\": 1, \"kernel\": 1, \"stride\": 1, \"padding\": 0}], \"hidden\": [2], \"actions\": [2], \"dueling\": false");
    one("\"obs_shape\": [1, 3, 3], \"conv\": [{\"out\": 1, \"kernel\": 2, \"stride\": 1, \"padding\": 0}], \"hidden\": [2], \"actions\": [2], \"dueling\": false");
    one("\"obs_shape\": [1, 4, 4], \"conv\": [{\"out\": 1, \"kernel\": 2, \"stride\": 2, \"padding\": 0}], \"hidden\": [2], \"actions\": [2], \"dueling\": false");
    one("\"obs_shape\": [1, 3, 3], \"conv\": [{\"out\": 1, \"kernel\": 3, \"stride\": 1, \"padding\": 1}], \"hidden\": [2], \"actions\": [2], \"dueling\": false");
    one("\"obs_shape\": [1, 3, 3], \"conv\": [{\"out\": 2, \"kernel\": 1, \"stride\": 1, \"padding\": 0}, {\"out\": 1, \"kernel\": 1, \"stride\": 1, \"padding\": 0}], \"hidden\": [2], \"actions\": [2], \"dueling\": false");
    one("\"obs_shape\": [1, 3, 3], \"conv\": [{\"out\": 1, \"kernel\": 1, \"stride\": 1, \"padding\": 0}], \"hidden\": [2], \"actions\": [2], \"dueling\": true");
    return 0;
}
