/* test_compat.c - a host built against the minor-0 header (tests/abi/compat/foxhunt_dqn_1_0.h,
 * the header as released before ABI 1.1) drives the current library: its smaller argument
 * structs are read as before, and every call it knows gives the same numbers as the same calls
 * through the current header's structs (test_abi.c covers the other direction).
 * usage: test_compat LIBRARY */
#include "compat/foxhunt_dqn_1_0.h" /* first: its include guard keeps the new header out */
#include <math.h>
#include <stdint.h>

#include "fhd_test.h"

_Static_assert(FHD_ABI_MINOR == 0 && sizeof(fhd_transitions) == 56 && sizeof(fhd_batch) == 80 &&
                   sizeof(fhd_step_args) == 64 && sizeof(fhd_act_args) == 40 &&
                   sizeof(fhd_api_v1) == 152,
               "this host is built against the minor-0 layout");

static const char *cfg = "{\"obs_dim\": 3, \"actions\": [2], \"hidden\": [8], \"batch_size\": 4, "
                         "\"replay_capacity\": 64, \"learning_starts\": 0, \"seed\": 5}";

/* 30 step() calls on a fixed observation sequence; returns the sum of the chosen actions. */
static int drive(const fhd_api_v1 *api, fhd_learner *L) {
    float obs[3], rew = 0.5f;
    uint8_t term = 0, trunc = 0;
    int32_t act = 0, sum = 0;
    uint64_t trained = 0;
    fhd_train_stats st = FHD_TRAIN_STATS_INIT;
    for (int t = 0; t < 30; t++) {
        for (int i = 0; i < 3; i++)
            obs[i] = sinf(0.3f * (float)t + (float)i);
        term = (t % 7) == 6;
        fhd_step_args a = FHD_STEP_ARGS_INIT;
        a.num_envs = 1;
        a.obs = obs;
        a.actions = &act;
        a.stats = &st;
        if (t > 0) {
            a.rewards = &rew;
            a.terminated = &term;
            a.truncated = &trunc;
        }
        CHECK(api->step(L, &a) == FHD_OK, "step %d: %s", t, api->last_error(L));
        CHECK(act == 0 || act == 1, "action %d", act);
        CHECK(st.struct_size == sizeof st && (st.updates_done == 0 || isfinite(st.loss)),
              "stats of step %d", t);
        sum += act;
        trained = st.update_index > trained ? st.update_index : trained;
    }
    CHECK(trained > 0, "step trained (%llu updates)", (unsigned long long)trained);
    return sum;
}

int main(int argc, char **argv) {
    if (argc < 2) {
        printf("usage: test_compat LIBRARY\n");
        return 2;
    }
    void *h = NULL;
    const fhd_api_v1 *api = fhd_test_load(argv[1], &h);
    CHECK(api->abi_major == 1 && api->abi_minor >= 1, "library minor %u", api->abi_minor);
    CHECK(api->struct_size > sizeof(fhd_api_v1), "the table grew at its end (%u > %zu)",
          api->struct_size, sizeof(fhd_api_v1));
    CHECK(FHD_API_HAS(api, tensor_write), "every minor-0 member is present");

    fhd_learner *A = fhd_test_create(api, cfg), *B = fhd_test_create(api, cfg);
    int sa = drive(api, A), sb = drive(api, B);
    CHECK(sa == sb, "two learners, same calls: same actions (%d, %d)", sa, sb);

    float obs[12], q[8], qb[8];
    int32_t act[4], acts[4] = {1, 0, 1, 1};
    float rew[4] = {1, -1, 0.5f, 0};
    uint8_t term[4] = {0, 1, 0, 0};
    for (int i = 0; i < 12; i++)
        obs[i] = 0.1f * (float)i - 0.5f;
    /* observe (N = num_envs = 1) and train_batch with the minor-0 structs */
    fhd_transitions t = FHD_TRANSITIONS_INIT;
    t.num_envs = 1;
    t.obs = obs;
    t.actions = acts;
    t.rewards = rew;
    t.next_obs = obs + 3;
    t.terminated = term;
    t.truncated = term + 2;
    CHECK(api->observe(A, &t) == FHD_OK, "observe: %s", api->last_error(A));
    fhd_batch b = FHD_BATCH_INIT;
    float td[4], y[4];
    b.batch_size = 4;
    b.obs = obs;
    b.actions = acts;
    b.rewards = rew;
    b.next_obs = obs;
    b.terminated = term;
    b.td_errors = td;
    b.targets = y;
    fhd_train_stats st = FHD_TRAIN_STATS_INIT;
    CHECK(api->train_batch(A, &b, &st) == FHD_OK, "train_batch: %s", api->last_error(A));
    CHECK(api->train_batch(B, &b, NULL) == FHD_OK, "train_batch B: %s", api->last_error(B));
    CHECK(st.updates_done == 1 && isfinite(st.loss) && st.loss > 0.0f, "stats (loss %g)",
          (double)st.loss);
    for (int i = 0; i < 4; i++)
        CHECK(isfinite(td[i]) && isfinite(y[i]), "td/y row %d", i);
    fhd_act_args a = FHD_ACT_ARGS_INIT;
    a.num_obs = 4;
    a.obs = obs;
    a.actions = act;
    a.q_values = q;
    CHECK(api->act(A, &a) == FHD_OK, "act: %s", api->last_error(A));
    a.q_values = qb;
    CHECK(api->act(B, &a) == FHD_OK, "act B: %s", api->last_error(B));
    CHECK(memcmp(q, qb, sizeof q) == 0, "the same updates give the same Q-values");
    for (int i = 0; i < 4; i++)
        CHECK(act[i] == (q[2 * i + 1] > q[2 * i] ? 1 : 0), "greedy action of row %d", i);

    /* a uint8 learner refuses this host's float observations with a message naming obs_u8 */
    fhd_learner *U = fhd_test_create(
        api, "{\"obs_shape\": [1, 2, 2], \"obs_dtype\": \"uint8\", \"actions\": [2]}");
    a.num_obs = 1;
    a.q_values = NULL;
    CHECK(api->act(U, &a) == FHD_ERR_INVALID_ARGUMENT && strstr(api->last_error(U), "obs_u8") &&
              strstr(api->last_error(U), "uint8"),
          "float obs to a uint8 learner: %s", api->last_error(U));
    api->destroy(U);
    api->destroy(A);
    api->destroy(B);
    dlclose(h);
    return fhd_test_finish();
}
