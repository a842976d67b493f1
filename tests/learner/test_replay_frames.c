/* test_replay_frames.c - the frame-once replay of image observations (white-box through the
 * core objects): every live transition's obs and next_obs are the right frames, through ring
 * wraps of both rings, n-step windows, terminations, truncations with true final
 * observations and NEXT_STEP steps (valid = 0); sampling returns live slots only; a learner
 * with frames trains bitwise as one with the row replay while neither has wrapped; the ring's
 * size; a checkpoint with the frames resumes exactly. */
#include <math.h>

#include "fhd_test.h"
#include "learner.h"

#define E 2
#define NSTEP 3
#define MAXT 4096

/* The model: what the front must emit, in order. An observation's value is its identity. */
typedef struct {
    float obs, next, ret, disc;
} tr_t;
static tr_t want[MAXT];
static int nwant;

typedef struct {
    float obs[NSTEP], rew[NSTEP];
    int len;
} stage_t;

static void model_step(stage_t *st, float obs, float rew, float next, int term, int trunc,
                       double gamma) {
    st->obs[st->len] = obs;
    st->rew[st->len] = rew;
    st->len++;
    int done = term || trunc, from = 0, to = 0;
    if (done) {
        to = st->len;
    } else if (st->len == NSTEP) {
        to = 1;
    }
    for (int j = from; j < to; j++) {
        double R = 0.0, g = 1.0;
        for (int k = j; k < st->len; k++) {
            R += g * (double)st->rew[k];
            g *= gamma;
        }
        want[nwant++] = (tr_t){st->obs[j], next, (float)R, term ? 0.0f : (float)g};
    }
    if (done) {
        st->len = 0;
    } else if (st->len == NSTEP) {
        memmove(st->obs, st->obs + 1, sizeof(float) * (NSTEP - 1));
        memmove(st->rew, st->rew + 1, sizeof(float) * (NSTEP - 1));
        st->len--;
    }
}

static fhd_learner *make(const char *cfg) {
    fhd_learner *L = NULL;
    fhd_error err = FHD_ERROR_INIT;
    if (fhd__learner_init(cfg, strlen(cfg), &L, &err) != FHD_OK) {
        printf("FAIL init %s: %s\n", cfg, err.message);
        exit(1);
    }
    return L;
}

static uint32_t lcg(uint32_t *s) {
    *s = *s * 1664525u + 1013904223u;
    return *s >> 8;
}

/* Drive L through step() for `calls` calls of random episodes; after each call check every
 * live transition against the model and that a training update samples live slots only. */
static void run_wrap(const char *cfg, const char *what, int expect_frame_kills) {
    fhd_learner *L = make(cfg);
    const uint64_t N = L->cfg.replay_capacity, M = fhd__config_frame_capacity(&L->cfg);
    stage_t st[E] = {{{0}, {0}, 0}};
    float obs[E], fin[E], rew[E], next_id = 1.0f;
    uint8_t term[E], trunc[E], valid[E], ended[E] = {0, 0};
    int32_t act[E];
    uint32_t rng = 7;
    int ok_all = 1, min_live = (int)N, bad_samples = 0, frame_kills = 0, saved_killed = 0;
    uint64_t *oid = malloc(sizeof(uint64_t) * N), *nid = malloc(sizeof(uint64_t) * N);
    float *frames = malloc(sizeof(float) * M), *ret = malloc(sizeof(float) * N);
    float *disc = malloc(sizeof(float) * N);
    nwant = 0;
    for (int e = 0; e < E; e++)
        obs[e] = next_id++;
    fhd_step_args a = FHD_STEP_ARGS_INIT;
    a.num_envs = E;
    a.obs = obs;
    a.actions = act;
    CHECK(fhd__learner_step(L, &a) == FHD_OK, "%s: first step: %s", what, L->err);
    a.rewards = rew;
    a.terminated = term;
    a.truncated = trunc;
    a.final_obs = fin;
    a.valid = valid;
    float prev[E];
    for (int call = 0; call < 400 && nwant < MAXT - 16; call++) {
        memcpy(prev, obs, sizeof prev);
        for (int e = 0; e < E; e++) {
            const uint32_t r = lcg(&rng) % 12;
            valid[e] = !ended[e];
            term[e] = trunc[e] = 0;
            rew[e] = (float)(lcg(&rng) % 5) - 2.0f;
            if (ended[e]) { /* NEXT_STEP: this call carries the reset observation only */
                ended[e] = 0;
                obs[e] = next_id++;
                continue;
            }
            if (r < 2) { /* terminated, auto-reset in the same call: final_obs */
                term[e] = 1;
                fin[e] = -(next_id++);
                obs[e] = next_id++;
                model_step(&st[e], prev[e], rew[e], fin[e], 1, 0, L->cfg.gamma);
            } else if (r < 3) { /* truncated: bootstraps from its true final observation */
                trunc[e] = 1;
                fin[e] = -(next_id++);
                obs[e] = next_id++;
                model_step(&st[e], prev[e], rew[e], fin[e], 0, 1, L->cfg.gamma);
            } else if (r < 4) { /* terminated, NEXT_STEP: obs is the final one */
                term[e] = 1;
                obs[e] = next_id++;
                fin[e] = obs[e];
                ended[e] = 1;
                model_step(&st[e], prev[e], rew[e], obs[e], 1, 0, L->cfg.gamma);
            } else {
                obs[e] = next_id++;
                model_step(&st[e], prev[e], rew[e], obs[e], 0, 0, L->cfg.gamma);
            }
        }
        if (fhd__learner_step(L, &a) != FHD_OK) {
            CHECK(0, "%s: step %d: %s", what, call, L->err);
            break;
        }
        char msg[256] = "";
        if (L->ops->check_invariants(L->be, msg, sizeof msg) != FHD_OK) {
            CHECK(0, "%s: call %d: %s", what, call, msg);
            ok_all = 0;
            break;
        }
        uint64_t fc[3];
        L->ops->read(L->be, FHD_STATE_FRAME_COUNTERS, 0, 3, fc);
        L->ops->read(L->be, FHD_STATE_FRAMES, 0, M, frames);
        L->ops->read(L->be, FHD_STATE_REPLAY_OBS_ID, 0, N, oid);
        L->ops->read(L->be, FHD_STATE_REPLAY_NEXT_ID, 0, N, nid);
        L->ops->read(L->be, FHD_STATE_REPLAY_RETURNS, 0, N, ret);
        L->ops->read(L->be, FHD_STATE_REPLAY_DISC, 0, N, disc);
        if (fc[1] != (uint64_t)nwant) {
            CHECK(0, "%s: call %d: %llu transitions stored, the model has %d", what, call,
                  (unsigned long long)fc[1], nwant);
            ok_all = 0;
            break;
        }
        for (uint64_t t = fc[2]; t < fc[1]; t++) {
            const uint64_t s = t % N;
            const tr_t *w = &want[t];
            const float o = frames[oid[s] % M], nx = frames[nid[s] % M];
            if (o != w->obs || nx != w->next || fabsf(ret[s] - w->ret) > 1e-5f ||
                disc[s] != w->disc) {
                CHECK(0,
                      "%s: call %d, transition %llu: (%g -> %g, R %g, disc %g), want "
                      "(%g -> %g, R %g, disc %g)",
                      what, call, (unsigned long long)t, o, nx, ret[s], disc[s], w->obs, w->next,
                      w->ret, w->disc);
                ok_all = 0;
                break;
            }
        }
        if (!ok_all)
            break;
        const int live = (int)(fc[1] - fc[2]);
        frame_kills += fc[2] > (fc[1] > N ? fc[1] - N : 0); /* lo past the slots' own wrap */
        if (!saved_killed && fc[2] > (fc[1] > N ? fc[1] - N : 0) && fc[1] % N != fc[1] - fc[2]) {
            /* a checkpoint of a ring that kills shrank (pos != size below capacity) loads */
            saved_killed = 1;
            const char *path = "test_replay_frames_killed.safetensors";
            char why[256] = "";
            fhd_learner *R = make(cfg);
            uint64_t rc3[3] = {0, 0, 0};
            CHECK(fhd__checkpoint_save(L, path, FHD_CKPT_INCLUDE_REPLAY) == FHD_OK &&
                      fhd__checkpoint_load(R, path, FHD_CKPT_INCLUDE_REPLAY) == FHD_OK,
                  "%s: a checkpoint with %d live of %llu slots at pos %llu loads: %s", what,
                  live, (unsigned long long)N, (unsigned long long)(fc[1] % N), R->err);
            R->ops->read(R->be, FHD_STATE_FRAME_COUNTERS, 0, 3, rc3);
            CHECK(memcmp(rc3, fc, sizeof rc3) == 0 &&
                      R->ops->check_invariants(R->be, why, sizeof why) == FHD_OK,
                  "%s: the loaded frame replay has the counters and its invariants hold (%s)",
                  what, why);
            fhd__learner_destroy(R);
            remove(path);
        }
        if (fc[1] >= N && live < min_live)
            min_live = live;
        if (live >= (int)L->cfg.batch_size) {
            uint32_t idx[8];
            CHECK(L->ops->train(L->be, 1, NULL) == FHD_OK, "%s: train", what);
            L->ops->read(L->be, FHD_STATE_LAST_INDICES, 0, L->cfg.batch_size, idx);
            for (uint32_t j = 0; j < L->cfg.batch_size; j++) {
                if (idx[j] >= fc[1]) {
                    bad_samples++;
                    continue;
                }
                /* the newest transition number in slot idx[j] */
                const uint64_t t = fc[1] - 1 - ((fc[1] - 1 - idx[j]) % N);
                bad_samples += t < fc[2];
            }
        }
    }
    printf("%s: %d transitions, %llu frames; after the wrap at least %d of %llu slots live; "
           "%d calls saw transitions retired by the frame ring\n",
           what, nwant, (unsigned long long)M, min_live, (unsigned long long)N, frame_kills);
    CHECK(saved_killed == (frame_kills > 0), "%s: a checkpoint taken after a kill", what);
    CHECK(expect_frame_kills ? frame_kills > 0 : frame_kills == 0,
          "%s: the frame ring %s retires live transitions", what,
          expect_frame_kills ? "does" : "never");
    CHECK(ok_all && nwant > 600 && (uint64_t)nwant > 2 * N,
          "%s: %d transitions through rings of %llu slots and %llu frames", what, nwant,
          (unsigned long long)N, (unsigned long long)M);
    CHECK(bad_samples == 0, "%s: %d sampled slots held dead transitions", what, bad_samples);
    CHECK(min_live >= (int)N / 2, "%s: at least half the slots stay live after the wrap (min %d)",
          what, min_live);
    free(oid);
    free(nid);
    free(frames);
    free(ret);
    free(disc);
    fhd__learner_destroy(L);
}

/* frame_stack 4 with the host's own stacks (Gymnasium FrameStack, channel first): each env
 * step draws one new frame of 4 bytes; a reset fills the stack with its first frame. Every
 * live transition's rebuilt obs and next_obs must be the host's stacks, and about one frame
 * is stored per transition (a quarter of the observation bytes). */
#define K 4
#define FB 4
static uint8_t stacks[MAXT * 2][K * FB]; /* the model's observations by index */
static int nstacks;

static float new_stack(const uint8_t *prev, uint32_t frame_id, int reset) {
    uint8_t *st = stacks[nstacks];
    uint8_t f[FB];
    memcpy(f, &frame_id, FB);
    for (int j = 0; j < K; j++)
        memcpy(st + j * FB, reset ? f : (j + 1 < K ? prev + (j + 1) * FB : f), FB);
    return (float)nstacks++;
}

static const char *stack_cfg =
    "{\"obs_shape\": [4, 2, 2], \"obs_dtype\": \"uint8\", \"frame_stack\": 4, \"actions\": [2], "
    "\"hidden\": [4], \"batch_size\": 4, \"replay_capacity\": 64, \"num_envs\": 2, "
    "\"n_step\": 3, \"gamma\": 0.5, \"replay\": \"prioritized\", \"learning_starts\": 4}";

static void test_frame_stack(void) {
    fhd_learner *L = make(stack_cfg);
    const uint64_t N = L->cfg.replay_capacity, M = fhd__config_frame_capacity(&L->cfg);
    stage_t st[E] = {{{0}, {0}, 0}};
    float cur[E], fin_ix[E], rew[E];
    uint8_t obs[E * K * FB], fin[E * K * FB], term[E], trunc[E] = {0, 0};
    int32_t act[E];
    uint32_t rng = 11, next_frame = 1;
    int ok = 1;
    nwant = nstacks = 0;
    for (int e = 0; e < E; e++) {
        cur[e] = new_stack(NULL, next_frame++, 1);
        memcpy(obs + e * K * FB, stacks[(int)cur[e]], K * FB);
    }
    fhd_step_args a = FHD_STEP_ARGS_INIT;
    a.num_envs = E;
    a.obs_u8 = obs;
    a.actions = act;
    CHECK(fhd__learner_step(L, &a) == FHD_OK, "stack: first step: %s", L->err);
    a.rewards = rew;
    a.terminated = term;
    a.truncated = trunc;
    a.final_obs_u8 = fin;
    uint8_t *frames = malloc(M * FB);
    uint64_t *oid = malloc(sizeof(uint64_t) * N * K), *nid = malloc(sizeof(uint64_t) * N * K);
    for (int call = 0; call < 300 && ok; call++) {
        for (int e = 0; e < E; e++) {
            const float prev = cur[e];
            const uint32_t r = lcg(&rng) % 10;
            rew[e] = (float)(r % 3);
            term[e] = r == 0;
            trunc[e] = r == 1;
            if (term[e] || trunc[e]) { /* final stack, then a reset stack in the same call */
                fin_ix[e] = new_stack(stacks[(int)prev], next_frame++, 0);
                memcpy(fin + e * K * FB, stacks[(int)fin_ix[e]], K * FB);
                cur[e] = new_stack(NULL, next_frame++, 1);
                model_step(&st[e], prev, rew[e], fin_ix[e], term[e], trunc[e], L->cfg.gamma);
            } else {
                cur[e] = new_stack(stacks[(int)prev], next_frame++, 0);
                model_step(&st[e], prev, rew[e], cur[e], 0, 0, L->cfg.gamma);
            }
            memcpy(obs + e * K * FB, stacks[(int)cur[e]], K * FB);
        }
        if (fhd__learner_step(L, &a) != FHD_OK) {
            CHECK(0, "stack: step %d: %s", call, L->err);
            break;
        }
        uint64_t fc[3];
        char msg[256] = "";
        ok = L->ops->check_invariants(L->be, msg, sizeof msg) == FHD_OK;
        CHECK(ok, "stack: call %d: %s", call, msg);
        L->ops->read(L->be, FHD_STATE_FRAME_COUNTERS, 0, 3, fc);
        L->ops->read(L->be, FHD_STATE_FRAMES_U8, 0, M * FB, frames);
        L->ops->read(L->be, FHD_STATE_REPLAY_OBS_ID, 0, N * K, oid);
        L->ops->read(L->be, FHD_STATE_REPLAY_NEXT_ID, 0, N * K, nid);
        CHECK(!ok || fc[1] == (uint64_t)nwant, "stack: call %d: %llu transitions, the model %d",
              call, (unsigned long long)fc[1], nwant);
        ok = ok && fc[1] == (uint64_t)nwant;
        for (uint64_t t = fc[2]; ok && t < fc[1]; t++) {
            const uint64_t sl = t % N;
            uint8_t o[K * FB], x[K * FB];
            for (int j = 0; j < K; j++) {
                memcpy(o + j * FB, frames + (oid[sl * K + j] % M) * FB, FB);
                memcpy(x + j * FB, frames + (nid[sl * K + j] % M) * FB, FB);
            }
            ok = memcmp(o, stacks[(int)want[t].obs], sizeof o) == 0 &&
                 memcmp(x, stacks[(int)want[t].next], sizeof x) == 0;
            CHECK(ok, "stack: call %d, transition %llu: rebuilt stacks differ from the host's",
                  call, (unsigned long long)t);
        }
        if (ok && fc[1] - fc[2] >= 4)
            CHECK(L->ops->train(L->be, 1, NULL) == FHD_OK, "stack: train: %s",
                  L->ops->error(L->be));
    }
    uint64_t fc[3];
    L->ops->read(L->be, FHD_STATE_FRAME_COUNTERS, 0, 3, fc);
    const double per = (double)fc[0] / (double)fc[1];
    printf("frame_stack 4: %llu transitions stored %llu single frames (%.2f per transition, "
           "each a quarter of an observation: %.2f x the observation bytes, ids aside)\n",
           (unsigned long long)fc[1], (unsigned long long)fc[0], per, per / K);
    CHECK(ok && fc[1] > 400 && per < 1.4, "stack: %.2f frames per transition (< 1.4)", per);
    /* a checkpoint with the stacked frames resumes exactly */
    const char *path = "test_replay_frames_stack.safetensors";
    CHECK(fhd__checkpoint_save(L, path, FHD_CKPT_INCLUDE_REPLAY) == FHD_OK, "stack: save: %s",
          L->err);
    fhd_learner *R = make(stack_cfg);
    CHECK(fhd__checkpoint_load(R, path, FHD_CKPT_INCLUDE_REPLAY) == FHD_OK, "stack: load: %s",
          R->err);
    fhd_train_stats s1 = FHD_TRAIN_STATS_INIT, s2 = FHD_TRAIN_STATS_INIT;
    CHECK(fhd__learner_train(L, 5, &s1) == FHD_OK && fhd__learner_train(R, 5, &s2) == FHD_OK &&
              s1.loss == s2.loss && s1.update_index == s2.update_index,
          "stack: resumed learner trains alike (loss %g, %g)", (double)s1.loss, (double)s2.loss);
    remove(path);
    fhd__learner_destroy(R);
    free(frames);
    free(oid);
    free(nid);
    fhd__learner_destroy(L);
}

/* Frames and rows: the same learner, the same data, the same updates while nothing wrapped. */
static void test_rows_equivalence(void) {
    const char *common = "\"actions\": [3], \"hidden\": [8], \"batch_size\": 4, "
                         "\"replay_capacity\": 256, \"num_envs\": 2, \"n_step\": 2, "
                         "\"replay\": \"prioritized\", \"learning_starts\": 8, \"seed\": 4}";
    char cf[512], cr[512];
    snprintf(cf, sizeof cf, "{\"obs_shape\": [1, 2, 3], %s", common);
    snprintf(cr, sizeof cr, "{\"obs_dim\": 6, %s", common);
    fhd_learner *F = make(cf), *R = make(cr);
    float obs[12], fin[12], rew[2];
    uint8_t term[2], trunc[2] = {0, 0};
    int32_t aF[2], aR[2];
    uint32_t rng = 3;
    int same = 1;
    for (int i = 0; i < 12; i++)
        obs[i] = (float)(lcg(&rng) % 100) / 50.0f - 1.0f;
    fhd_step_args a = FHD_STEP_ARGS_INIT;
    a.num_envs = 2;
    a.obs = obs;
    for (int call = 0; call < 100 && same; call++) {
        fhd_train_stats sF = FHD_TRAIN_STATS_INIT, sR = FHD_TRAIN_STATS_INIT;
        if (call > 0) {
            a.rewards = rew;
            a.terminated = term;
            a.truncated = trunc;
            a.final_obs = fin;
        }
        a.actions = aF;
        a.stats = &sF;
        same &= fhd__learner_step(F, &a) == FHD_OK;
        a.actions = aR;
        a.stats = &sR;
        same &= fhd__learner_step(R, &a) == FHD_OK;
        same &= aF[0] == aR[0] && aF[1] == aR[1] && sF.loss == sR.loss &&
                sF.updates_done == sR.updates_done;
        for (int e = 0; e < 2; e++) {
            rew[e] = (float)aF[e] - 1.0f;
            term[e] = lcg(&rng) % 9 == 0;
            for (int i = 0; i < 6; i++) {
                fin[6 * e + i] = obs[6 * e + i] + 0.5f;
                obs[6 * e + i] = term[e] ? (float)(lcg(&rng) % 100) / 50.0f - 1.0f
                                         : obs[6 * e + i] * 0.9f + 0.1f * (float)aF[e];
            }
        }
    }
    fhd__backend_scalars s;
    F->ops->get_scalars(F->be, &s);
    CHECK(same && s.replay_size > 150 && s.replay_size < 256,
          "frame replay and row replay train alike (%llu transitions, no wrap)",
          (unsigned long long)s.replay_size);
    /* a checkpoint with the frames resumes exactly: train both, then step both alike */
    const char *path = "test_replay_frames.safetensors";
    CHECK(fhd__checkpoint_save(F, path, FHD_CKPT_INCLUDE_REPLAY) == FHD_OK, "save: %s", F->err);
    fhd_learner *G = make(cf);
    CHECK(fhd__checkpoint_load(G, path, FHD_CKPT_INCLUDE_REPLAY) == FHD_OK, "load: %s", G->err);
    fhd_train_stats s1 = FHD_TRAIN_STATS_INIT, s2 = FHD_TRAIN_STATS_INIT;
    for (int k = 0; k < 20; k++) {
        a.stats = &s1;
        a.actions = aF;
        CHECK(fhd__learner_step(F, &a) == FHD_OK, "step F: %s", F->err);
        a.stats = &s2;
        a.actions = aR;
        CHECK(fhd__learner_step(G, &a) == FHD_OK, "step G: %s", G->err);
        CHECK(s1.loss == s2.loss && aF[0] == aR[0] && aF[1] == aR[1],
              "resumed frame replay: step %d alike (loss %g, %g)", k, (double)s1.loss,
              (double)s2.loss);
    }
    char msg[256] = "";
    CHECK(G->ops->check_invariants(G->be, msg, sizeof msg) == FHD_OK, "resumed: %s", msg);
    remove(path);
    fhd__learner_destroy(G);
    fhd__learner_destroy(F);
    fhd__learner_destroy(R);
}

int main(void) {
    run_wrap("{\"obs_shape\": [1, 1, 1], \"actions\": [2], \"hidden\": [4], \"batch_size\": 4, "
             "\"replay_capacity\": 16, \"num_envs\": 2, \"n_step\": 3, \"gamma\": 0.5, "
             "\"replay\": \"prioritized\", \"learning_starts\": 4}",
             "prioritized, 16 slots", 0);
    /* 256 slots: 273 frames, fewer than short episodes need, so the frame ring retires the
     * oldest transitions before their slots come round */
    run_wrap("{\"obs_shape\": [1, 1, 1], \"actions\": [2], \"hidden\": [4], \"batch_size\": 4, "
             "\"replay_capacity\": 256, \"num_envs\": 2, \"n_step\": 3, \"gamma\": 0.5, "
             "\"replay\": \"prioritized\", \"learning_starts\": 4}",
             "prioritized, 256 slots", 1);
    run_wrap("{\"obs_shape\": [1, 1, 1], \"actions\": [2], \"hidden\": [4], \"batch_size\": 4, "
             "\"replay_capacity\": 16, \"num_envs\": 2, \"n_step\": 3, \"gamma\": 0.5, "
             "\"learning_starts\": 4}",
             "uniform, 16 slots", 0);
    run_wrap("{\"obs_shape\": [1, 1, 1], \"actions\": [2], \"hidden\": [4], \"batch_size\": 4, "
             "\"replay_capacity\": 256, \"num_envs\": 2, \"n_step\": 3, \"gamma\": 0.5, "
             "\"learning_starts\": 4}",
             "uniform, 256 slots", 1);
    test_rows_equivalence();
    test_frame_stack();
    /* the ring's size for A1 (capacity 1M, one env, n-step 1): frames per slot */
    fhd__config c;
    fhd_error err = FHD_ERROR_INIT;
    const char *a1 =
        "{\"obs_shape\": [4, 84, 84], \"obs_dtype\": \"uint8\", \"torso\": \"nature\", "
        "\"actions\": [6], \"replay_capacity\": 1000000}";
    CHECK(fhd__config_parse(a1, strlen(a1), &c, &err) == FHD_OK, "A1 parses: %s", err.message);
    const double ratio = (double)fhd__config_frame_capacity(&c) / c.replay_capacity;
    CHECK(ratio <= 1.05, "A1: %.4f frames per slot (<= 1.05)", ratio);
    printf("A1 frame ring: %.4f frames per slot, %.0f bytes per transition of observations\n",
           ratio, ratio * 28224.0);
    return fhd_test_finish();
}
