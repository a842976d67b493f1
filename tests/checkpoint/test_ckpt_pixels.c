/* test_ckpt_pixels.c - a pixel learner's checkpoint loads back into a new learner, through the
 * public ABI: a Nature-CNN torso on uint8 [4, 84, 84] observations with spectral norm on every
 * layer, dueling, two branches and the frame replay with frame_stack 4, saved after a few
 * updates with and without the replay. The loaded learner has every named tensor of the saved
 * one bit for bit and gives the same Q-values; with the replay it trains on to the same state
 * as the original. (The checkpoint header's bound is derived from the learner's config, so a
 * config with conv layers and frame tensors must fit it.)
 * usage: test_ckpt_pixels LIBRARY SCRATCH_DIR */
#include "ckpt_common.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fhd_test.h"

#define E 2
#define S (4 * 84 * 84)
#define D 2
#define KT 9

static const fhd_api_v1 *api;

static const char *cfg =
    "{\"obs_shape\": [4, 84, 84], \"obs_dtype\": \"uint8\", \"frame_stack\": 4, "
    "\"torso\": \"nature\", \"actions\": [6, 3], \"dueling\": true, \"spectral_norm\": \"all\", "
    "\"double_dqn\": true, \"batch_size\": 4, \"replay_capacity\": 64, \"learning_starts\": 8, "
    "\"num_envs\": 2, \"n_step\": 2, \"seed\": 11}";

/* Frame t of env e: a deterministic 84x84 picture. */
static void frame(uint8_t *dst, int e, int t) {
    for (int i = 0; i < 84 * 84; i++)
        dst[i] = (uint8_t)((i * 7 + e * 31 + t * 13) & 0xff);
}

/* The stack of frames t-3..t of env e (channel-first, oldest first). */
static void stack(uint8_t *dst, int e, int t) {
    for (int j = 0; j < 4; j++)
        frame(dst + j * 84 * 84, e, t - 3 + j);
}

static int32_t observe_steps(fhd_learner *L, int t0, int steps) {
    static uint8_t obs[E * S], next[E * S];
    int32_t act[E * D];
    float rew[E];
    uint8_t term[E] = {0, 0}, trunc[E] = {0, 0};
    for (int t = t0; t < t0 + steps; t++) {
        for (int e = 0; e < E; e++) {
            stack(obs + e * S, e, t);
            stack(next + e * S, e, t + 1);
            act[e * D] = (t + e) % 6;
            act[e * D + 1] = (t * 2 + e) % 3;
            rew[e] = (float)((t + e) % 3) - 1.0f;
        }
        fhd_transitions tr = FHD_TRANSITIONS_INIT;
        tr.num_envs = E;
        tr.obs_u8 = obs;
        tr.next_obs_u8 = next;
        tr.actions = act;
        tr.rewards = rew;
        tr.terminated = term;
        tr.truncated = trunc;
        int32_t rc = api->observe(L, &tr);
        if (rc != FHD_OK)
            return rc;
    }
    return FHD_OK;
}

/* Every named tensor of a and b but grad.* (the last update's gradient, which checkpoints do
 * not keep) equal bit for bit; returns the number compared. */
static int same_tensors(fhd_learner *a, fhd_learner *b, const char *what) {
    int n = 0;
    for (uint32_t i = 0;; i++) {
        fhd_tensor_info info = FHD_TENSOR_INFO_INIT;
        if (api->tensor_info(a, i, &info) != FHD_OK)
            break;
        if (strncmp(info.name, "grad.", 5) == 0)
            continue;
        float *x = malloc(sizeof(float) * info.count), *y = malloc(sizeof(float) * info.count);
        CHECK(x && y && api->tensor_read(a, info.name, x, info.count) == FHD_OK &&
                  api->tensor_read(b, info.name, y, info.count) == FHD_OK,
              "%s: read %s: %s", what, info.name, api->last_error(b));
        CHECK(x && y && memcmp(x, y, sizeof(float) * info.count) == 0, "%s: %s differs", what,
              info.name);
        free(x);
        free(y);
        n++;
    }
    return n;
}

static void q_values(fhd_learner *L, float *q) {
    static uint8_t obs[S];
    stack(obs, 1, 100);
    int32_t act[D];
    fhd_act_args a = FHD_ACT_ARGS_INIT;
    a.num_obs = 1;
    a.obs_u8 = obs;
    a.actions = act;
    a.q_values = q;
    CHECK(api->act(L, &a) == FHD_OK, "act: %s", api->last_error(L));
}

static void round_trip(const char *dir, uint32_t flags) {
    char path[512];
    snprintf(path, sizeof path, "%s/pixels_%u.safetensors", dir, flags);
    fhd_learner *L = fhd_test_create(api, cfg), *R = fhd_test_create(api, cfg);
    CHECK(observe_steps(L, 3, 12) == FHD_OK, "observe: %s", api->last_error(L));
    fhd_train_stats st = FHD_TRAIN_STATS_INIT;
    CHECK(api->train(L, 3, &st) == FHD_OK && st.updates_done == 3, "train: %s",
          api->last_error(L));
    CHECK(api->checkpoint_save(L, path, flags) == FHD_OK, "save (flags %u): %s", flags,
          api->last_error(L));
    CHECK(api->checkpoint_load(R, path, flags) == FHD_OK, "load (flags %u): %s", flags,
          api->last_error(R));
    CHECK(same_tensors(L, R, flags ? "loaded with replay" : "loaded") > 10,
          "the Nature learner has its conv, linear, head, Adam and SN tensors");
    float qa[KT], qb[KT];
    q_values(L, qa);
    q_values(R, qb);
    CHECK(memcmp(qa, qb, sizeof qa) == 0, "flags %u: Q-values differ (%g vs %g)", flags,
          (double)qa[0], (double)qb[0]);
    if (flags & FHD_CKPT_INCLUDE_REPLAY) { /* the same replay: the same next updates */
        CHECK(api->train(L, 2, NULL) == FHD_OK && api->train(R, 2, NULL) == FHD_OK,
              "train after the load: %s / %s", api->last_error(L), api->last_error(R));
        same_tensors(L, R, "trained on after the load");
    }
    api->destroy(L);
    api->destroy(R);
}

int main(int argc, char **argv) {
    char dir[512];
    const int rc = ckpt_start(argc, argv, &api, dir, sizeof dir);
    if (rc >= 0)
        return rc;
    if (!FHD_API_HAS(api, obs_info)) {
        printf("FAIL the library has no ABI minor 1 (obs_info)\n");
        return 1;
    }
    round_trip(dir, 0);
    round_trip(dir, FHD_CKPT_INCLUDE_REPLAY);
    return fhd_test_finish();
}
