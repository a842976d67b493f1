/* test_cuda_step_frames.c - step() acting on the frames already in the CUDA frame ring
 * (backend.h q_values_frames): a CPU and a CUDA learner driven by the same step() calls
 * (stacked frames shifted by one a step, episode ends with true final observations, resets,
 * an env sitting out a call with valid = 0, training from the schedule). After every call:
 *   - the CUDA step's greedy actions equal act() on the same rows through the host path
 *     (the same kernels on the same bytes, so exactly);
 *   - both rings hold the same frames, ids and counters (the obs step adds for acting are
 *     added alike on both backends, and the next ingest reuses them);
 * and q_values_frames refuses ids the ring does not hold, leaving the learner usable.
 * Configs: a conv torso on uint8 stacks of 4, an MLP on uint8 stacks of 4, an MLP on scaled
 * float stacks of 2. Exit 77 without a GPU.
 */
#include "cuda_test.h"

#define E 3

typedef struct variant {
    const char *name, *json;
    int u8;
    uint32_t S, k;
} variant;

#define COMMON                                                                                     \
    "\"actions\": [4], \"batch_size\": 8, \"num_envs\": 3, \"seed\": 5, \"lr\": 0.001, "         \
    "\"learning_starts\": 30, \"train_freq\": 2, \"epsilon_start\": 0.0, \"epsilon_end\": 0.0, "  \
    "\"replay\": \"prioritized\", \"replay_capacity\": 64, \"n_step\": 2, "

static const variant variants[] = {
    {"conv-u8-stack4",
     COMMON "\"obs_shape\": [4, 20, 20], \"obs_dtype\": \"uint8\", \"frame_stack\": 4, "
            "\"conv\": [{\"out\": 8, \"kernel\": 4, \"stride\": 2, \"padding\": 0}, "
            "{\"out\": 8, \"kernel\": 3, \"stride\": 1, \"padding\": 1}], \"hidden\": [16]",
     1, 1600, 4},
    {"mlp-u8-stack4",
     COMMON "\"obs_shape\": [4, 3, 4], \"obs_dtype\": \"uint8\", \"frame_stack\": 4, "
            "\"hidden\": [24]",
     1, 48, 4},
    {"mlp-f32-stack2-scaled",
     COMMON "\"obs_shape\": [4, 2, 2], \"obs_scale\": 0.25, \"frame_stack\": 2, "
            "\"hidden\": [24]",
     0, 16, 2},
};

/* env e's current stack (S values, small integers so frames repeat) */
static float stack[E][1600], fin[E][1600];
static uint64_t rng = 77;

static void new_frame(float *dst, uint32_t fe) {
    const uint64_t pick = ct_rng(&rng) % 6;
    for (uint32_t i = 0; i < fe; i++) /* pick 0: an all-zero frame, which repeats */
        dst[i] = pick == 0 ? 0.0f : (float)(ct_rng(&rng) % 200);
}

static void reset_stack(float *s, const variant *v) {
    const uint32_t fe = v->S / v->k;
    new_frame(s, fe);
    for (uint32_t j = 1; j < v->k; j++)
        memcpy(s + j * fe, s, sizeof(float) * fe);
}

static void shift_stack(float *s, const variant *v) {
    const uint32_t fe = v->S / v->k;
    memmove(s, s + fe, sizeof(float) * fe * (v->k - 1));
    new_frame(s + (v->k - 1) * fe, fe);
}

/* rows of the learner's dtype */
static void rows(const variant *v, float src[E][1600], float *f32, uint8_t *u8) {
    for (int e = 0; e < E; e++)
        for (uint32_t i = 0; i < v->S; i++) {
            f32[e * v->S + i] = src[e][i];
            u8[e * v->S + i] = (uint8_t)src[e][i];
        }
}

static int same_kind(fhd_learner *Lc, fhd_learner *Lg, int kind, uint64_t n, size_t esz) {
    unsigned char *a = (unsigned char *)malloc(n * esz), *b = (unsigned char *)malloc(n * esz);
    ct_read(Lc, kind, 0, n, a);
    ct_read(Lg, kind, 0, n, b);
    const int same = memcmp(a, b, n * esz) == 0;
    free(a);
    free(b);
    return same;
}

static void run_variant(const variant *v) {
    char json[2048];
    snprintf(json, sizeof json, "{\"backend\": \"cpu\", %s}", v->json);
    int32_t rc;
    fhd_learner *Lc = ct_create(json, &rc);
    snprintf(json, sizeof json, "{\"backend\": \"cuda\", %s}", v->json);
    fhd_learner *Lg = ct_create_cuda(json);
    ct_check(Lc != NULL, "%s: cpu learner (%d)", v->name, rc);
    if (!Lc)
        return;
    const uint64_t M = fhd__config_frame_capacity(&Lg->cfg), N = Lg->cfg.replay_capacity;
    const uint32_t S = v->S, fe = S / v->k;
    float *obs = (float *)malloc(sizeof(float) * E * S), *fo = (float *)malloc(sizeof(float) * E * S);
    uint8_t *obs8 = (uint8_t *)malloc((size_t)E * S), *fo8 = (uint8_t *)malloc((size_t)E * S);
    float rew[E];
    uint8_t term[E], trunc[E], valid[E];
    int32_t ac[E], ag[E], ah[E];
    for (int e = 0; e < E; e++)
        reset_stack(stack[e], v);
    int ok_act = 1, ok_ring = 1, calls = 0, trained = 0, sat_out = 0;
    for (int call = 0; call < 150 && ok_act && ok_ring; call++, calls++) {
        fhd_step_args a = FHD_STEP_ARGS_INIT;
        a.num_envs = E;
        if (call > 0) {
            for (int e = 0; e < E; e++) {
                const uint64_t r = ct_rng(&rng) % 12;
                rew[e] = (float)(r % 3) - 1.0f;
                term[e] = r == 0;
                trunc[e] = r == 1;
                valid[e] = !(e == 2 && call % 17 == 0); /* env 2 sits out a call now and then */
                sat_out += !valid[e];
                if (!valid[e]) {
                    reset_stack(stack[e], v); /* it comes back with a new episode */
                    term[e] = trunc[e] = 0;
                } else if (term[e] || trunc[e]) {
                    memcpy(fin[e], stack[e], sizeof(float) * S);
                    shift_stack(fin[e], v); /* the true final observation */
                    reset_stack(stack[e], v);
                } else {
                    shift_stack(stack[e], v);
                }
            }
            rows(v, fin, fo, fo8);
            a.rewards = rew;
            a.terminated = term;
            a.truncated = trunc;
            a.valid = valid;
            if (v->u8)
                a.final_obs_u8 = fo8;
            else
                a.final_obs = fo;
        }
        rows(v, stack, obs, obs8);
        if (v->u8)
            a.obs_u8 = obs8;
        else
            a.obs = obs;
        fhd_train_stats sc = FHD_TRAIN_STATS_INIT, sg = FHD_TRAIN_STATS_INIT;
        a.actions = ac;
        a.stats = &sc;
        const int32_t r1 = fhd__learner_step(Lc, &a);
        a.actions = ag;
        a.stats = &sg;
        const int32_t r2 = fhd__learner_step(Lg, &a);
        if (r1 != FHD_OK || r2 != FHD_OK) {
            ct_check(0, "%s: step %d: cpu %s, cuda %s", v->name, call, Lc->err, Lg->err);
            break;
        }
        trained += sg.updates_done > 0;
        /* the host path on the same rows */
        fhd_act_args aa = FHD_ACT_ARGS_INIT;
        aa.num_obs = E;
        aa.actions = ah;
        if (v->u8)
            aa.obs_u8 = obs8;
        else
            aa.obs = obs;
        ct_check(fhd__learner_act(Lg, &aa) == FHD_OK, "%s: act: %s", v->name, Lg->err);
        ok_act = memcmp(ag, ah, sizeof ag) == 0;
        if (!ok_act)
            ct_check(0, "%s: step %d: step's actions %d %d %d, act's on the rows %d %d %d", v->name,
                     call, ag[0], ag[1], ag[2], ah[0], ah[1], ah[2]);
        ok_ring = same_kind(Lc, Lg, FHD_STATE_FRAME_COUNTERS, 3, 8) &&
                  same_kind(Lc, Lg, v->u8 ? FHD_STATE_FRAMES_U8 : FHD_STATE_FRAMES, M * fe,
                            v->u8 ? 1 : 4) &&
                  same_kind(Lc, Lg, FHD_STATE_REPLAY_OBS_ID, N * v->k, 8) &&
                  same_kind(Lc, Lg, FHD_STATE_REPLAY_NEXT_ID, N * v->k, 8);
        if (!ok_ring)
            ct_check(0, "%s: step %d: the rings differ", v->name, call);
    }
    uint64_t fc[3];
    ct_read(Lg, FHD_STATE_FRAME_COUNTERS, 0, 3, fc);
    ct_check(ok_act, "%s: %d steps (%d training, %d env calls sat out): step's actions are act()'s "
             "on the same rows", v->name, calls, trained, sat_out);
    ct_check(ok_ring, "%s: both rings alike after every step (%llu frames, %llu transitions)",
             v->name, (unsigned long long)fc[0], (unsigned long long)fc[1]);
    ct_check(trained > 10 && fc[0] > M, "%s: the schedule trained (%d calls) and the ring wrapped "
             "(%llu frames, M %llu)", v->name, trained, (unsigned long long)fc[0],
             (unsigned long long)M);
    /* ids the ring does not hold: refused, nothing changed */
    uint64_t bad[8], g[8 * 4];
    int32_t greedy[8];
    for (uint32_t j = 0; j < v->k; j++)
        bad[j] = fc[0] + j; /* not added yet */
    ct_check(Lg->ops->q_values_frames(Lg->be, 1, bad, NULL, greedy) == FHD_ERR_INVALID_ARGUMENT,
             "%s: a frame id not yet added is refused (%s)", v->name, Lg->ops->error(Lg->be));
    for (uint32_t j = 0; j < v->k; j++)
        bad[j] = fc[0] - M - 1; /* overwritten */
    ct_check(Lg->ops->q_values_frames(Lg->be, 1, bad, NULL, greedy) == FHD_ERR_INVALID_ARGUMENT,
             "%s: an overwritten frame id is refused (%s)", v->name, Lg->ops->error(Lg->be));
    for (uint32_t j = 0; j < v->k * 2; j++)
        g[j] = fc[0] - 1 - j % v->k; /* two rows of stored frames */
    ct_check(Lg->ops->q_values_frames(Lg->be, 2, g, NULL, greedy) == FHD_OK,
             "%s: stored ids still act after the refusals (%s)", v->name, Lg->ops->error(Lg->be));
    free(obs);
    free(fo);
    free(obs8);
    free(fo8);
    fhd__learner_destroy(Lc);
    fhd__learner_destroy(Lg);
}

int main(void) {
    ct_require_gpu();
    for (size_t i = 0; i < sizeof variants / sizeof variants[0]; i++)
        run_variant(&variants[i]);
    return ct_finish();
}
