/* test_cuda_frames.c - image observations on the CUDA backend against the CPU reference, for
 * configs without conv layers (an MLP on flattened images; uint8 and float32; frame_stack 1
 * and 4; flat uint8 and scaled float rows).
 *
 * Each variant feeds one CPU and one CUDA learner the same observe calls: several envs with
 * stacked frames (padded at an episode's start, shifted by one frame per step), terminations,
 * truncations, NEXT_STEP calls (valid = 0) and one env kept invalid for many calls (its hint
 * outlives the CUDA host cache: the read-back path), with a replay small enough that both the
 * frame ring and the slots wrap and transitions are killed. Checked, in phases (feed, train,
 * feed more, train):
 *   - every frame state kind, counters, scalars and priorities identical after observe (exact);
 *   - check_invariants clean on both;
 *   - identical sampled indices and IS weights for each update (prioritized: the CPU's
 *     priorities copied into the CUDA learner after each update, as test_cuda_parity does);
 *   - parameters within the parity tolerance after the updates;
 *   - act (uint8 or float rows) Q values within tolerance;
 *   - train_batch with the learner's dtype: TD errors and targets within tolerance;
 *   - a CPU checkpoint with the frame replay loads into CUDA exactly, both go on observing and
 *     training identically, and the CUDA checkpoint loads back into a fresh CPU learner exactly.
 * Exit 77 without a GPU. */
#define _POSIX_C_SOURCE 200809L
#include <unistd.h>

#include "cuda_test.h"

typedef struct variant {
    const char *name;
    const char *json;  /* config keys besides the common ones */
    int u8, frames;    /* obs dtype uint8; frame-once replay (obs_shape) */
    uint32_t C, HW, k; /* channels, pixels per channel (H W), frame_stack; S = C HW */
    int away;          /* calls env 0 sits out at a time: its hint then outlives the CUDA host
                        * cache (C = min(M, 2 k num_envs (n_step + 1) + 1) frames) but not the
                        * ring (M), and the frames it still uses kill transitions once overwritten */
} variant;

#define COMMON                                                                                     \
    "\"hidden\": [24], \"actions\": [3], \"batch_size\": 16, \"num_envs\": 3, \"seed\": 5, "       \
    "\"lr\": 0.001, \"learning_starts\": 0, \"target_update_interval\": 4, "

static const variant variants[] = {
    {"u8-stack4-per",
     "\"obs_shape\": [4, 3, 4], \"obs_dtype\": \"uint8\", \"frame_stack\": 4, "
     "\"replay\": \"prioritized\", \"replay_capacity\": 40, \"n_step\": 2",
     1, 1, 4, 12, 4, 40},
    {"u8-stack1-uniform",
     "\"obs_shape\": [2, 3, 3], \"obs_dtype\": \"uint8\", "
     "\"replay\": \"uniform\", \"replay_capacity\": 32, \"n_step\": 1",
     1, 1, 2, 9, 1, 14},
    {"f32-stack4-uniform-scaled",
     "\"obs_shape\": [4, 2, 3], \"obs_scale\": 0.25, "
     "\"frame_stack\": 4, \"replay\": \"uniform\", \"replay_capacity\": 36, \"n_step\": 3",
     0, 1, 4, 6, 4, 54},
    {"f32-stack2-per",
     "\"obs_shape\": [4, 2, 2], \"frame_stack\": 2, "
     "\"replay\": \"prioritized\", \"replay_capacity\": 48, \"n_step\": 1",
     0, 1, 4, 4, 2, 30},
    {"u8-flat-per",
     "\"obs_dim\": 20, \"obs_dtype\": \"uint8\", \"replay\": \"prioritized\", "
     "\"replay_capacity\": 48, \"n_step\": 2",
     1, 0, 1, 20, 1, 10},
    {"f32-flat-scaled-uniform",
     "\"obs_dim\": 10, \"obs_scale\": 0.5, \"replay\": \"uniform\", "
     "\"replay_capacity\": 40, \"n_step\": 1",
     0, 0, 1, 10, 1, 10},
};

#define E 3
#define TOL_FWD 1e-5
#define TOL_PARAM 2e-4

/* The envs: each holds a stack of k frames of fe values (small integers, so that frames
 * repeat and compare equal as bytes and floats). */
typedef struct feeder {
    const variant *v;
    uint32_t S, fe;
    uint64_t rng;
    float *stack[E];  /* (S) the env's current observation */
    int ended[E];     /* NEXT_STEP: the next call is its reset (valid = 0) */
    int away;         /* calls env 0 stays invalid (an old hint) */
    int calls;        /* observe calls so far */
    uint64_t away_f0; /* frames added when env 0 left */
    int old_hints;    /* returns of env 0 with its frames past the cache, still stored */
    int kills;        /* calls after which frames had killed live transitions */
    float *obs, *next;
    uint8_t *obs8, *next8;
} feeder;

static void new_frame(feeder *f, float *dst) {
    const uint64_t pick = ct_rng(&f->rng) % 8;
    for (uint32_t i = 0; i < f->fe; i++) /* pick 0: an all-zero frame, which repeats */
        dst[i] = pick == 0 ? 0.0f : (float)(ct_rng(&f->rng) % 200);
}

/* The stack of a new episode: k copies of one frame. */
static void reset_stack(feeder *f, float *s) {
    new_frame(f, s);
    for (uint32_t j = 1; j < f->v->k; j++)
        memcpy(s + j * f->fe, s, sizeof(float) * f->fe);
}

/* The stack moved on by one new frame (without frames: a fresh row). */
static void shift_stack(feeder *f, const float *s, float *out) {
    const uint32_t k = f->v->k;
    memmove(out, s + f->fe, sizeof(float) * f->fe * (k - 1));
    new_frame(f, out + (k - 1) * f->fe);
}

static void feeder_init(feeder *f, const variant *v, uint64_t seed) {
    memset(f, 0, sizeof *f);
    f->v = v;
    f->S = v->C * v->HW;
    f->fe = f->S / v->k;
    f->rng = seed;
    for (int e = 0; e < E; e++) {
        f->stack[e] = (float *)malloc(sizeof(float) * f->S);
        reset_stack(f, f->stack[e]);
    }
    f->obs = (float *)malloc(sizeof(float) * E * f->S);
    f->next = (float *)malloc(sizeof(float) * E * f->S);
    f->obs8 = (uint8_t *)malloc((size_t)E * f->S);
    f->next8 = (uint8_t *)malloc((size_t)E * f->S);
}

static void feeder_free(feeder *f) {
    for (int e = 0; e < E; e++)
        free(f->stack[e]);
    free(f->obs);
    free(f->next);
    free(f->obs8);
    free(f->next8);
}

/* `calls` observe calls, the same to every learner in Ls. */
static int feed(feeder *f, fhd_learner **Ls, int nl, int calls) {
    const uint32_t S = f->S;
    float rew[E];
    int32_t act[E];
    uint8_t term[E], trunc[E], valid[E];
    for (int c = 0; c < calls; c++) {
        uint64_t fc[3] = {0, 0, 0};
        if (f->v->frames)
            ct_read(Ls[0], FHD_STATE_FRAME_COUNTERS, 0, 3, fc);
        if (f->away == 0 && (ct_rng(&f->rng) % 60 == 0 || ++f->calls == 70)) {
            f->away = f->v->away; /* env 0 sits out: the others add frames meanwhile */
            f->away_f0 = fc[0];
        }
        if (f->away == 1 && f->v->frames) { /* env 0 returns in this call */
            const uint64_t k = f->v->k, M = fhd__config_frame_capacity(&Ls[0]->cfg);
            uint64_t C = 2 * k * E * (Ls[0]->cfg.n_step + 1) + 1;
            C = C < M ? C : M;
            if (fc[0] - f->away_f0 > C && fc[0] - f->away_f0 + k < M)
                f->old_hints++;
        }
        for (int e = 0; e < E; e++) {
            float *o = f->obs + (size_t)e * S, *n = f->next + (size_t)e * S;
            memcpy(o, f->stack[e], sizeof(float) * S);
            rew[e] = (float)(ct_rng(&f->rng) % 5) - 2.0f;
            act[e] = (int32_t)(ct_rng(&f->rng) % 3);
            term[e] = trunc[e] = 0;
            valid[e] = 1;
            if (e == 0 && f->away > 0) {
                f->away--;
                valid[e] = 0;
                memcpy(n, o, sizeof(float) * S);
                continue;
            }
            if (f->ended[e]) { /* NEXT_STEP: the call that carries the reset */
                f->ended[e] = 0;
                valid[e] = 0;
                memcpy(n, o, sizeof(float) * S);
                reset_stack(f, f->stack[e]);
                continue;
            }
            if (f->v->frames)
                shift_stack(f, o, n);
            else
                for (uint32_t i = 0; i < S; i++)
                    n[i] = (float)(ct_rng(&f->rng) % 200);
            const uint64_t r = ct_rng(&f->rng) % 16;
            term[e] = r < 1;
            trunc[e] = r == 1;
            if (term[e] || trunc[e]) {
                if (ct_rng(&f->rng) % 2)
                    f->ended[e] = 1; /* NEXT_STEP: the next call sits out */
                else
                    reset_stack(f, f->stack[e]); /* same-step autoreset */
            } else {
                memcpy(f->stack[e], n, sizeof(float) * S);
            }
        }
        for (uint32_t i = 0; i < E * S; i++) {
            f->obs8[i] = (uint8_t)f->obs[i];
            f->next8[i] = (uint8_t)f->next[i];
        }
        fhd_transitions tr = FHD_TRANSITIONS_INIT;
        tr.num_envs = E;
        if (f->v->u8) {
            tr.obs_u8 = f->obs8;
            tr.next_obs_u8 = f->next8;
        } else {
            tr.obs = f->obs;
            tr.next_obs = f->next;
        }
        tr.actions = act;
        tr.rewards = rew;
        tr.terminated = term;
        tr.truncated = trunc;
        tr.valid = valid;
        for (int l = 0; l < nl; l++)
            if (fhd__learner_observe(Ls[l], &tr) != FHD_OK) {
                ct_check(0, "%s: observe call %d on %s: %s", f->v->name, c, Ls[l]->ops->name,
                         Ls[l]->err);
                return 0;
            }
        if (f->v->frames) {
            const uint64_t N = Ls[0]->cfg.replay_capacity;
            ct_read(Ls[0], FHD_STATE_FRAME_COUNTERS, 0, 3, fc);
            f->kills += fc[2] > (fc[1] > N ? fc[1] - N : 0);
        }
    }
    return 1;
}

/* Elements of a state kind for this learner (0: the kind does not apply). */
static uint64_t kind_count(fhd_learner *L, int kind) {
    const uint64_t N = L->cfg.replay_capacity, S = L->lo.S;
    const uint64_t k = L->cfg.frame_stack ? L->cfg.frame_stack : 1;
    const int u8 = L->cfg.obs_dtype == FHD_OBS_UINT8, frames = L->cfg.num_obs_shape > 0;
    switch (kind) {
    case FHD_STATE_REPLAY_OBS:
    case FHD_STATE_REPLAY_NEXT_OBS:
        return !frames && !u8 ? N * S : 0;
    case FHD_STATE_REPLAY_OBS_U8:
    case FHD_STATE_REPLAY_NEXT_OBS_U8:
        return !frames && u8 ? N * S : 0;
    case FHD_STATE_REPLAY_ACTIONS:
        return N * L->lo.D;
    case FHD_STATE_REPLAY_RETURNS:
    case FHD_STATE_REPLAY_DISC:
        return N;
    case FHD_STATE_REPLAY_PRIORITY:
        return L->cfg.replay == FHD_REPLAY_PRIORITIZED ? N : 0;
    case FHD_STATE_FRAMES:
        return frames && !u8 ? fhd__config_frame_capacity(&L->cfg) * (S / k) : 0;
    case FHD_STATE_FRAMES_U8:
        return frames && u8 ? fhd__config_frame_capacity(&L->cfg) * (S / k) : 0;
    case FHD_STATE_FRAME_REFS:
        return frames ? fhd__config_frame_capacity(&L->cfg) : 0;
    case FHD_STATE_REPLAY_OBS_ID:
    case FHD_STATE_REPLAY_NEXT_ID:
        return frames ? N * k : 0;
    case FHD_STATE_FRAME_COUNTERS:
        return frames ? 3 : 0;
    default:
        return 0;
    }
}

static const int replay_kinds[] = {
    FHD_STATE_REPLAY_OBS,         FHD_STATE_REPLAY_NEXT_OBS, FHD_STATE_REPLAY_OBS_U8,
    FHD_STATE_REPLAY_NEXT_OBS_U8, FHD_STATE_REPLAY_ACTIONS,  FHD_STATE_REPLAY_RETURNS,
    FHD_STATE_REPLAY_DISC,        FHD_STATE_REPLAY_PRIORITY, FHD_STATE_FRAMES,
    FHD_STATE_FRAMES_U8,          FHD_STATE_FRAME_REFS,      FHD_STATE_REPLAY_OBS_ID,
    FHD_STATE_REPLAY_NEXT_ID,     FHD_STATE_FRAME_COUNTERS};

/* Every replay kind and the scalars equal, byte for byte; prints the first difference. */
static int same_replay(const char *name, const char *when, fhd_learner *A, fhd_learner *Bl) {
    int ok = 1;
    for (size_t i = 0; i < sizeof replay_kinds / sizeof replay_kinds[0]; i++) {
        const int kind = replay_kinds[i];
        const uint64_t n = kind_count(A, kind);
        if (!n)
            continue;
        const size_t es = fhd__state_elem_size(kind);
        unsigned char *a = (unsigned char *)malloc(n * es), *b = (unsigned char *)malloc(n * es);
        ct_read(A, kind, 0, n, a);
        ct_read(Bl, kind, 0, n, b);
        for (uint64_t j = 0; j < n; j++)
            if (memcmp(a + j * es, b + j * es, es) != 0) {
                uint64_t va = 0, vb = 0;
                memcpy(&va, a + j * es, es);
                memcpy(&vb, b + j * es, es);
                printf("       %s %s: state kind %d element %llu of %llu: %s 0x%llx, %s 0x%llx\n",
                       name, when, kind, (unsigned long long)j, (unsigned long long)n, A->ops->name,
                       (unsigned long long)va, Bl->ops->name, (unsigned long long)vb);
                ok = 0;
                break;
            }
        free(a);
        free(b);
    }
    fhd__backend_scalars sa, sb;
    A->ops->get_scalars(A->be, &sa);
    Bl->ops->get_scalars(Bl->be, &sb);
    if (sa.updates != sb.updates || sa.replay_pos != sb.replay_pos ||
        sa.replay_size != sb.replay_size || sa.max_priority_q != sb.max_priority_q) {
        printf("       %s %s: scalars updates %llu/%llu pos %llu/%llu size %llu/%llu max_q "
               "%llu/%llu\n",
               name, when, (unsigned long long)sa.updates, (unsigned long long)sb.updates,
               (unsigned long long)sa.replay_pos, (unsigned long long)sb.replay_pos,
               (unsigned long long)sa.replay_size, (unsigned long long)sb.replay_size,
               (unsigned long long)sa.max_priority_q, (unsigned long long)sb.max_priority_q);
        ok = 0;
    }
    return ok;
}

static void check_inv(const char *name, const char *when, fhd_learner *L) {
    char msg[512] = "";
    int32_t rc = L->ops->check_invariants(L->be, msg, sizeof msg);
    ct_check(rc == FHD_OK, "%s %s: %s invariants (%s)", name, when, L->ops->name,
             rc == FHD_OK ? "clean" : (msg[0] ? msg : L->ops->error(L->be)));
}

static int feed(feeder *f, fhd_learner **Ls, int nl, int calls);

/* n updates on both: identical indices and weights for each (first more calls of f while
 * kills left fewer than a batch of live transitions). */
static void train_both(feeder *f, const char *name, const char *when, fhd_learner *Lc,
                       fhd_learner *Lg, int n) {
    const uint32_t B = Lc->cfg.batch_size;
    fhd_learner *both[2] = {Lc, Lg};
    for (int c = 0; c < 50; c++) {
        fhd__backend_scalars sc;
        Lc->ops->get_scalars(Lc->be, &sc);
        if (sc.replay_size >= B || !feed(f, both, 2, 1))
            break;
    }
    const int per = Lc->cfg.replay == FHD_REPLAY_PRIORITIZED;
    uint32_t *ic = (uint32_t *)malloc(4 * B), *ig = (uint32_t *)malloc(4 * B);
    float *wc = (float *)malloc(4 * B), *wg = (float *)malloc(4 * B);
    int idx_ok = 1, w_ok = 1, rc_ok = 1;
    for (int u = 0; u < n; u++) {
        fhd_train_stats st = FHD_TRAIN_STATS_INIT;
        int32_t r1 = fhd__learner_train(Lc, 1, &st), r2 = fhd__learner_train(Lg, 1, &st);
        if (r1 != FHD_OK || r2 != FHD_OK) {
            printf("       %s %s update %d: cpu %d (%s), cuda %d (%s)\n", name, when, u, r1,
                   Lc->err, r2, Lg->err);
            rc_ok = 0;
            break;
        }
        ct_read(Lc, FHD_STATE_LAST_INDICES, 0, B, ic);
        ct_read(Lg, FHD_STATE_LAST_INDICES, 0, B, ig);
        ct_read(Lc, FHD_STATE_LAST_WEIGHTS, 0, B, wc);
        ct_read(Lg, FHD_STATE_LAST_WEIGHTS, 0, B, wg);
        for (uint32_t j = 0; j < B && idx_ok; j++)
            if (ic[j] != ig[j]) {
                printf("       %s %s update %d: sample %u is slot %u on cpu, %u on cuda\n", name,
                       when, u, j, ic[j], ig[j]);
                idx_ok = 0;
            }
        for (uint32_t j = 0; j < B && w_ok && per; j++)
            if (memcmp(&wc[j], &wg[j], 4) != 0) {
                printf("       %s %s update %d: weight %u is %.9g on cpu, %.9g on cuda\n", name,
                       when, u, j, wc[j], wg[j]);
                w_ok = 0;
            }
        if (per)
            ct_copy_priorities(Lc, Lg);
    }
    ct_check(rc_ok, "%s %s: %d updates on both", name, when, n);
    ct_check(idx_ok, "%s %s: identical sampled indices", name, when);
    if (per)
        ct_check(w_ok, "%s %s: identical IS weights (bitwise)", name, when);
    const uint64_t P = Lc->lo.num_params;
    float *a = ct_read_floats(Lg, FHD_STATE_PARAMS, 2 * P),
          *b = ct_read_floats(Lc, FHD_STATE_PARAMS, 2 * P);
    double mx, e = ct_relerr(a, b, 2 * P, &mx);
    ct_check(e <= TOL_PARAM,
             "%s %s: parameters (online and target) rel %.2e (max abs %.2e, tol "
             "%.0e)",
             name, when, e, mx, TOL_PARAM);
    free(a);
    free(b);
    free(ic);
    free(ig);
    free(wc);
    free(wg);
}

static void check_act(const variant *v, fhd_learner *Lc, fhd_learner *Lg) {
    const uint32_t n = 40, S = Lc->lo.S, KT = Lc->lo.KT;
    float *obs = (float *)malloc(sizeof(float) * n * S);
    uint8_t *obs8 = (uint8_t *)malloc((size_t)n * S);
    float *qc = (float *)malloc(sizeof(float) * n * KT),
          *qg = (float *)malloc(sizeof(float) * n * KT);
    int32_t *ac = (int32_t *)malloc(sizeof(int32_t) * n),
            *ag = (int32_t *)malloc(sizeof(int32_t) * n);
    uint64_t s = 77;
    for (uint32_t i = 0; i < n * S; i++) {
        obs8[i] = (uint8_t)(ct_rng(&s) % 256);
        obs[i] = (float)obs8[i];
    }
    fhd_act_args a = FHD_ACT_ARGS_INIT;
    a.num_obs = n;
    if (v->u8)
        a.obs_u8 = obs8;
    else
        a.obs = obs;
    a.actions = ac;
    a.q_values = qc;
    int32_t rc = fhd__learner_act(Lc, &a);
    a.actions = ag;
    a.q_values = qg;
    int32_t rg = fhd__learner_act(Lg, &a);
    ct_check(rc == FHD_OK && rg == FHD_OK, "%s act (%s rows): both succeed (%s)", v->name,
             v->u8 ? "uint8" : "float32", rg == FHD_OK ? "" : Lg->err);
    double mx, e = ct_relerr(qg, qc, (uint64_t)n * KT, &mx);
    ct_check(e <= TOL_FWD, "%s act: Q values rel %.2e (max abs %.2e, tol %.0e)", v->name, e, mx,
             TOL_FWD);
    free(obs);
    free(obs8);
    free(qc);
    free(qg);
    free(ac);
    free(ag);
}

static void check_train_batch(const variant *v, fhd_learner *Lc, fhd_learner *Lg) {
    const uint32_t B = Lc->cfg.batch_size, S = Lc->lo.S;
    float *o = (float *)malloc(sizeof(float) * B * S), *nx = (float *)malloc(sizeof(float) * B * S);
    uint8_t *o8 = (uint8_t *)malloc((size_t)B * S), *n8 = (uint8_t *)malloc((size_t)B * S);
    float rew[64], tdc[64], tdg[64], yc[64], yg[64];
    int32_t act[64];
    uint8_t term[64];
    uint64_t s = 123;
    for (uint32_t i = 0; i < B * S; i++) {
        o8[i] = (uint8_t)(ct_rng(&s) % 256);
        n8[i] = (uint8_t)(ct_rng(&s) % 256);
        o[i] = (float)o8[i];
        nx[i] = (float)n8[i];
    }
    for (uint32_t j = 0; j < B; j++) {
        rew[j] = ct_normal(&s);
        act[j] = (int32_t)(ct_rng(&s) % 3);
        term[j] = ct_rng(&s) % 5 == 0;
    }
    fhd_batch b = FHD_BATCH_INIT;
    b.batch_size = B;
    if (v->u8) {
        b.obs_u8 = o8;
        b.next_obs_u8 = n8;
    } else {
        b.obs = o;
        b.next_obs = nx;
    }
    b.actions = act;
    b.rewards = rew;
    b.terminated = term;
    b.td_errors = tdc;
    b.targets = yc;
    fhd_train_stats st = FHD_TRAIN_STATS_INIT;
    int32_t rc = fhd__learner_train_batch(Lc, &b, &st);
    b.td_errors = tdg;
    b.targets = yg;
    int32_t rg = fhd__learner_train_batch(Lg, &b, &st);
    ct_check(rc == FHD_OK && rg == FHD_OK, "%s train_batch (%s rows): both succeed (%s)", v->name,
             v->u8 ? "uint8" : "float32", rg == FHD_OK ? "" : Lg->err);
    double mx, e = ct_relerr(tdg, tdc, B, &mx);
    ct_check(e <= TOL_FWD, "%s train_batch: TD errors rel %.2e (max abs %.2e)", v->name, e, mx);
    e = ct_relerr(yg, yc, B, &mx);
    ct_check(e <= TOL_FWD, "%s train_batch: targets rel %.2e (max abs %.2e)", v->name, e, mx);
    const uint64_t P = Lc->lo.num_params;
    float *pa = ct_read_floats(Lg, FHD_STATE_PARAMS, 2 * P),
          *pb = ct_read_floats(Lc, FHD_STATE_PARAMS, 2 * P);
    e = ct_relerr(pa, pb, 2 * P, &mx);
    ct_check(e <= TOL_PARAM, "%s train_batch: parameters rel %.2e (max abs %.2e)", v->name, e, mx);
    free(pa);
    free(pb);
    free(o);
    free(nx);
    free(o8);
    free(n8);
}

static void make_json(char *buf, size_t cap, const variant *v, const char *backend) {
    snprintf(buf, cap, "{" COMMON "%s, \"backend\": \"%s\"}", v->json, backend);
}

static void checkpoint_round_trip(const variant *v, feeder *f, fhd_learner *Lc, fhd_learner *Lg) {
    char pa[256], pb[256], jc[1024];
    snprintf(pa, sizeof pa, "/tmp/fhd_frames_cpu_%d.safetensors", (int)getpid());
    snprintf(pb, sizeof pb, "/tmp/fhd_frames_cuda_%d.safetensors", (int)getpid());
    int32_t rc = fhd__checkpoint_save(Lc, pa, FHD_CKPT_INCLUDE_REPLAY);
    ct_check(rc == FHD_OK, "%s: cpu checkpoint_save (%s)", v->name, rc == FHD_OK ? "" : Lc->err);
    rc = fhd__checkpoint_load(Lg, pa, FHD_CKPT_INCLUDE_REPLAY);
    ct_check(rc == FHD_OK, "%s: cuda checkpoint_load of the cpu file (%s)", v->name,
             rc == FHD_OK ? "" : Lg->err);
    ct_check(same_replay(v->name, "cpu -> cuda", Lc, Lg),
             "%s: the replay (frames, ids, refs, counters) equal after cpu -> cuda", v->name);
    {
        const uint64_t P = Lc->lo.num_params;
        float *a = ct_read_floats(Lg, FHD_STATE_PARAMS, 2 * P),
              *b = ct_read_floats(Lc, FHD_STATE_PARAMS, 2 * P);
        ct_check(memcmp(a, b, 8 * P) == 0, "%s: parameters equal after cpu -> cuda", v->name);
        free(a);
        free(b);
    }
    check_inv(v->name, "after the load", Lg);
    /* both go on: the CUDA host cache was rebuilt from the loaded frames (the hints compare
     * against it) */
    fhd_learner *both[2] = {Lc, Lg};
    if (feed(f, both, 2, 30))
        ct_check(same_replay(v->name, "fed after the load", Lc, Lg),
                 "%s: the replay equal after 30 more calls on the loaded learner", v->name);
    train_both(f, v->name, "after the load", Lc, Lg, 4);
    rc = fhd__checkpoint_save(Lg, pb, FHD_CKPT_INCLUDE_REPLAY);
    ct_check(rc == FHD_OK, "%s: cuda checkpoint_save (%s)", v->name, rc == FHD_OK ? "" : Lg->err);
    make_json(jc, sizeof jc, v, "cpu");
    fhd_learner *Lc2 = ct_create(jc, NULL);
    rc = Lc2 ? fhd__checkpoint_load(Lc2, pb, FHD_CKPT_INCLUDE_REPLAY) : FHD_ERR_INTERNAL;
    ct_check(rc == FHD_OK, "%s: cpu checkpoint_load of the cuda file (%s)", v->name,
             rc == FHD_OK ? "" : Lc2->err);
    if (rc == FHD_OK) {
        ct_check(same_replay(v->name, "cuda -> cpu", Lg, Lc2),
                 "%s: the replay equal after cuda -> cpu", v->name);
        const uint64_t P = Lc->lo.num_params;
        float *a = ct_read_floats(Lg, FHD_STATE_PARAMS, 2 * P),
              *b = ct_read_floats(Lc2, FHD_STATE_PARAMS, 2 * P);
        ct_check(memcmp(a, b, 8 * P) == 0, "%s: parameters equal after cuda -> cpu", v->name);
        free(a);
        free(b);
        check_inv(v->name, "cuda -> cpu", Lc2);
    }
    if (Lc2)
        fhd__learner_destroy(Lc2);
    remove(pa);
    remove(pb);
}

static void run_variant(const variant *v) {
    char jc[1024], jg[1024];
    make_json(jc, sizeof jc, v, "cpu");
    make_json(jg, sizeof jg, v, "cuda");
    fhd_learner *Lc = ct_create(jc, NULL);
    if (!Lc) {
        ct_check(0, "%s: cpu learner", v->name);
        return;
    }
#ifdef FHD_FRAMES_SELFTEST /* the harness alone: a second CPU learner in the CUDA one's place */
    fhd_learner *Lg = ct_create(jc, NULL);
#else
    fhd_learner *Lg = ct_create_cuda(jg);
    ct_check(strcmp(Lg->ops->name, "cuda") == 0, "%s: the learner runs on cuda (%s)", v->name,
             Lg->ops->name);
#endif
    printf("-- %s on %s\n", v->name, Lg->ops->device_name(Lg->be));
    feeder f;
    feeder_init(&f, v, 1000 + (uint64_t)v->HW);
    fhd_learner *both[2] = {Lc, Lg};
    /* phase 1: fill past both rings' wraps */
    if (feed(&f, both, 2, 60)) {
        ct_check(same_replay(v->name, "phase 1", Lc, Lg),
                 "%s phase 1: replay state kinds, counters, priorities identical", v->name);
        check_inv(v->name, "phase 1", Lc);
        check_inv(v->name, "phase 1", Lg);
        train_both(&f, v->name, "phase 1", Lc, Lg, 6);
    }
    /* phase 2: more calls (kills of sampled-from transitions, an absent env's old hint) */
    if (feed(&f, both, 2, 90)) {
        ct_check(same_replay(v->name, "phase 2", Lc, Lg),
                 "%s phase 2: replay state kinds, counters, priorities identical", v->name);
        check_inv(v->name, "phase 2", Lc);
        check_inv(v->name, "phase 2", Lg);
        train_both(&f, v->name, "phase 2", Lc, Lg, 6);
        check_inv(v->name, "phase 2 trained", Lg);
        /* the feed's own coverage: both rings wrapped and frames killed live transitions */
        if (v->frames) {
            uint64_t fc[3];
            ct_read(Lc, FHD_STATE_FRAME_COUNTERS, 0, 3, fc);
            const uint64_t M = fhd__config_frame_capacity(&Lc->cfg), N = Lc->cfg.replay_capacity;
            ct_check(fc[0] > 2 * M && fc[1] > 2 * N && f.kills > 0 && f.old_hints > 0,
                     "%s: the feed wrapped the frame ring (%llu frames, ring %llu) and the slots "
                     "(%llu transitions, capacity %llu); frames killed live transitions after %d "
                     "calls; an absent env came back with frames past the CUDA cache %d times",
                     v->name, (unsigned long long)fc[0], (unsigned long long)M,
                     (unsigned long long)fc[1], (unsigned long long)N, f.kills, f.old_hints);
        }
    }
    check_act(v, Lc, Lg);
    check_train_batch(v, Lc, Lg);
    checkpoint_round_trip(v, &f, Lc, Lg);
    feeder_free(&f);
    fhd__learner_destroy(Lc);
    fhd__learner_destroy(Lg);
}

int main(int argc, char **argv) {
#ifndef FHD_FRAMES_SELFTEST
    ct_require_gpu();
#endif
    for (size_t i = 0; i < sizeof variants / sizeof variants[0]; i++)
        if (argc < 2 || strstr(variants[i].name, argv[1]))
            run_variant(&variants[i]);
    return ct_finish();
}
