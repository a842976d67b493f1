/* envs_api.c - tests of the registry and the vector wrapper's API and semantics: specs and
 * bounds, create errors, reset distributions, determinism and flags over random steps, seeds,
 * rejected arguments, same-step auto-reset and the ASCII rendering. */
#include "envs_test.h"

/* ---- small RNG for actions ------------------------------------------------------------------- */

static uint64_t t_rng_next(uint64_t *s) {
    uint64_t z = (*s += UINT64_C(0x9E3779B97F4A7C15));
    z = (z ^ (z >> 30)) * UINT64_C(0xBF58476D1CE4E5B9);
    z = (z ^ (z >> 27)) * UINT64_C(0x94D049BB133111EB);
    return z ^ (z >> 31);
}

static int32_t t_rng_action(uint64_t *s, int n) {
    return (int32_t)(t_rng_next(s) % (uint64_t)n);
}

/* ---- API and semantics tests ----------------------------------------------------------------- */

void test_registry(void) {
    tcase tc;
    tc_begin(&tc, "registry and specs");
    const char *const *ids = fhd_env_ids();
    int count = 0;
    for (; ids && ids[count]; count++)
        CHECK(&tc, fhd_env_find(ids[count]) != NULL, "listed id %s not found", ids[count]);
    CHECK(&tc, count == 3, "%d ids listed", count);
    struct {
        const char *id;
        int od, na, max, sd;
        double thr;
    } want[] = {{"CartPole-v1", 4, 2, 500, 4, 475.0},
                {"Acrobot-v1", 6, 3, 500, 4, -100.0},
                {"MountainCar-v0", 2, 3, 200, 2, -110.0}};
    for (int k = 0; k < 3; k++) {
        const fhd_env_spec *s = fhd_env_find(want[k].id);
        CHECK(&tc, s != NULL, "%s missing", want[k].id);
        if (!s)
            continue;
        CHECK(&tc,
              strcmp(s->id, want[k].id) == 0 && s->obs_dim == want[k].od &&
                  s->num_actions == want[k].na && s->max_episode_steps == want[k].max &&
                  s->reward_threshold == want[k].thr && fhd_env_state_dim(s) == want[k].sd,
              "%s: wrong spec", want[k].id);
        for (int j = 0; j < s->obs_dim; j++)
            CHECK(&tc, s->obs_low[j] == -s->obs_high[j] || strcmp(s->id, "MountainCar-v0") == 0,
                  "%s: asymmetric bound %d", s->id, j);
    }
    const fhd_env_spec *cp = fhd_env_find("CartPole-v1");
    const fhd_env_spec *ab = fhd_env_find("Acrobot-v1");
    const fhd_env_spec *mc = fhd_env_find("MountainCar-v0");
    if (cp && ab && mc) {
        /* float32 values of Gymnasium's bounds */
        CHECK(&tc,
              cp->obs_high[0] == 4.8f && isinf(cp->obs_high[1]) && cp->obs_high[2] == 0.41887903f &&
                  isinf(cp->obs_high[3]),
              "CartPole bounds");
        CHECK(&tc,
              ab->obs_high[3] == 1.0f && ab->obs_high[4] == 12.566371f &&
                  ab->obs_high[5] == 28.274334f,
              "Acrobot bounds");
        CHECK(&tc,
              mc->obs_low[0] == -1.2f && mc->obs_low[1] == -0.07f && mc->obs_high[0] == 0.6f &&
                  mc->obs_high[1] == 0.07f,
              "MountainCar bounds");
    }
    CHECK(&tc, fhd_env_find("Pendulum-v1") == NULL && fhd_env_find(NULL) == NULL,
          "unknown id found");
    CHECK(&tc, fhd_env_state_dim(NULL) == 0, "state_dim(NULL)");
    tc_end(&tc, NULL);

    tc_begin(&tc, "create errors");
    char err[128] = "";
    CHECK(&tc, fhd_venv_create("Pong-v5", 4, 0, err, sizeof err) == NULL && err[0] != '\0',
          "unknown id accepted");
    err[0] = '\0';
    CHECK(&tc, fhd_venv_create("CartPole-v1", 0, 0, err, sizeof err) == NULL && err[0] != '\0',
          "num_envs 0 accepted");
    CHECK(&tc, fhd_venv_create(NULL, 1, 0, NULL, 0) == NULL, "NULL id accepted");
    fhd_venv_destroy(NULL);
    CHECK(&tc, fhd_venv_spec(NULL) == NULL && fhd_venv_num_envs(NULL) == 0, "NULL accessors");
    tc_end(&tc, NULL);
}

static int in_bounds(const fhd_env_spec *s, const float *o) {
    for (int j = 0; j < s->obs_dim; j++)
        if (!(o[j] >= s->obs_low[j] && o[j] <= s->obs_high[j]))
            return 0;
    return 1;
}

void test_reset(const char *id) {
    tcase tc;
    tc_begin(&tc, "%s: reset distribution and bounds", id);
    enum { N = 256 };
    fhd_venv *v = fhd_venv_create(id, N, 123, NULL, 0);
    CHECK(&tc, v != NULL, "create failed");
    if (!v) {
        tc_end(&tc, NULL);
        return;
    }
    const fhd_env_spec *s = fhd_venv_spec(v);
    CHECK(&tc, fhd_venv_num_envs(v) == N && s == fhd_env_find(id), "accessors");
    float obs[N * FHD_ENV_MAX_OBS_DIM];
    double lo[FHD_ENV_MAX_STATE_DIM], hi[FHD_ENV_MAX_STATE_DIM];
    for (int j = 0; j < FHD_ENV_MAX_STATE_DIM; j++) {
        lo[j] = INFINITY;
        hi[j] = -INFINITY;
    }
    const int sd = fhd_env_state_dim(s);
    for (int rep = 0; rep < 4; rep++) {
        fhd_venv_reset(v, obs);
        for (int i = 0; i < N; i++) {
            const float *o = obs + (size_t)i * s->obs_dim;
            CHECK(&tc, in_bounds(s, o), "reset obs of copy %d out of bounds", i);
            CHECK(&tc, fhd_venv_elapsed_steps(v, i) == 0, "elapsed after reset");
            float o2[FHD_ENV_MAX_OBS_DIM];
            fhd_venv_observe(v, i, o2);
            CHECK(&tc, memcmp(o, o2, (size_t)s->obs_dim * sizeof(float)) == 0,
                  "observe differs from reset obs");
            double st[FHD_ENV_MAX_STATE_DIM];
            CHECK(&tc, fhd_venv_get_state(v, i, st) == 0, "get_state");
            for (int j = 0; j < sd; j++) {
                lo[j] = fmin(lo[j], st[j]);
                hi[j] = fmax(hi[j], st[j]);
                if (strcmp(id, "Acrobot-v1") == 0)
                    CHECK(&tc, st[j] == (double)(float)st[j], "Acrobot reset state not float32");
            }
        }
    }
    /* Gymnasium's reset ranges, and the draws must spread over them */
    double rlo[FHD_ENV_MAX_STATE_DIM] = {-0.05, -0.05, -0.05, -0.05};
    double rhi[FHD_ENV_MAX_STATE_DIM] = {0.05, 0.05, 0.05, 0.05};
    if (strcmp(id, "Acrobot-v1") == 0)
        for (int j = 0; j < 4; j++) {
            rlo[j] = -0.1;
            rhi[j] = 0.1;
        }
    if (strcmp(id, "MountainCar-v0") == 0) {
        rlo[0] = -0.6;
        rhi[0] = -0.4;
        rlo[1] = rhi[1] = 0.0;
    }
    for (int j = 0; j < sd; j++) {
        CHECK(&tc, lo[j] >= rlo[j] && hi[j] <= rhi[j], "state %d outside [%g, %g]: [%g, %g]", j,
              rlo[j], rhi[j], lo[j], hi[j]);
        const double span = rhi[j] - rlo[j];
        CHECK(&tc, span == 0.0 || (hi[j] - lo[j] > 0.95 * span), "state %d spread [%g, %g]", j,
              lo[j], hi[j]);
    }
    fhd_venv_destroy(v);
    tc_end(&tc, NULL);
}

/* Random actions for `steps` steps on two venvs with the same seed (and one with another
   seed); checks determinism, bounds and the flags' bookkeeping. */
void test_determinism(const char *id) {
    tcase tc;
    tc_begin(&tc, "%s: determinism and flags over 2000 random steps", id);
    enum { N = 16, STEPS = 2000 };
    fhd_venv *a = fhd_venv_create(id, N, 42, NULL, 0);
    fhd_venv *b = fhd_venv_create(id, N, 42, NULL, 0);
    fhd_venv *c = fhd_venv_create(id, N, 43, NULL, 0);
    if (!a || !b || !c) {
        tc_fail(&tc, "create failed");
        goto out;
    }
    const fhd_env_spec *s = fhd_venv_spec(a);
    const int od = s->obs_dim, max_steps = s->max_episode_steps;
    const size_t osz = (size_t)N * od * sizeof(float);
    float oa[N * FHD_ENV_MAX_OBS_DIM], ob[N * FHD_ENV_MAX_OBS_DIM], oc[N * FHD_ENV_MAX_OBS_DIM];
    float fa[N * FHD_ENV_MAX_OBS_DIM], fb[N * FHD_ENV_MAX_OBS_DIM], fc[N * FHD_ENV_MAX_OBS_DIM];
    float ra[N], rb[N], rc[N];
    uint8_t ta[N], tb[N], tcf[N], ua[N], ub[N], uc[N];
    int32_t act[N];
    int len[N] = {0}, episodes = 0, terms = 0, truncs = 0, differs = 0;
    fhd_venv_reset(a, oa);
    fhd_venv_reset(b, ob);
    fhd_venv_reset(c, oc);
    CHECK(&tc, memcmp(oa, ob, osz) == 0, "same seed: different reset obs");
    differs += memcmp(oa, oc, osz) != 0;
    uint64_t rng = 99;
    for (int t = 0; t < STEPS; t++) {
        for (int i = 0; i < N; i++)
            act[i] = t_rng_action(&rng, s->num_actions);
        int r1 = fhd_venv_step(a, act, oa, fa, ra, ta, ua);
        int r2 = fhd_venv_step(b, act, ob, fb, rb, tb, ub);
        int r3 = fhd_venv_step(c, act, oc, fc, rc, tcf, uc);
        CHECK(&tc, r1 == 0 && r2 == 0 && r3 == 0, "step failed");
        CHECK(&tc,
              memcmp(oa, ob, osz) == 0 && memcmp(fa, fb, osz) == 0 &&
                  memcmp(ra, rb, sizeof ra) == 0 && memcmp(ta, tb, sizeof ta) == 0 &&
                  memcmp(ua, ub, sizeof ua) == 0,
              "same seed diverged at step %d", t);
        differs += memcmp(oa, oc, osz) != 0;
        for (int i = 0; i < N; i++) {
            const float *o = oa + (size_t)i * od, *fo = fa + (size_t)i * od;
            len[i]++;
            CHECK(&tc, in_bounds(s, o) && in_bounds(s, fo), "obs out of bounds (copy %d step %d)",
                  i, t);
            CHECK(&tc, ua[i] == (len[i] >= max_steps), "truncated %d at episode length %d", ua[i],
                  len[i]);
            if (strcmp(id, "CartPole-v1") == 0)
                CHECK(&tc, ra[i] == 1.0f, "reward %g", (double)ra[i]);
            else if (strcmp(id, "Acrobot-v1") == 0)
                CHECK(&tc, ra[i] == (ta[i] ? 0.0f : -1.0f), "reward %g", (double)ra[i]);
            else
                CHECK(&tc, ra[i] == -1.0f, "reward %g", (double)ra[i]);
            if (ta[i] || ua[i]) {
                episodes++;
                terms += ta[i];
                truncs += ua[i];
                len[i] = 0;
                CHECK(&tc, fhd_venv_elapsed_steps(a, i) == 0, "elapsed not reset");
            } else {
                CHECK(&tc, memcmp(o, fo, (size_t)od * sizeof(float)) == 0,
                      "final_obs != obs without an episode end");
                CHECK(&tc, fhd_venv_elapsed_steps(a, i) == len[i], "elapsed %d vs %d",
                      fhd_venv_elapsed_steps(a, i), len[i]);
            }
        }
    }
    CHECK(&tc, differs > STEPS / 2, "different seeds gave the same observations");
    CHECK(&tc, episodes > 0, "no episode ended");
    char detail[128];
    snprintf(detail, sizeof detail, "(%d episodes ended: %d terminated, %d truncated)", episodes,
             terms, truncs);
out:
    fhd_venv_destroy(a);
    fhd_venv_destroy(b);
    fhd_venv_destroy(c);
    tc_end(&tc, tc.failures ? NULL : detail);
}

void test_seeds_differ(void) {
    tcase tc;
    tc_begin(&tc, "seeds and copies differ");
    const char *const *ids = fhd_env_ids();
    for (int k = 0; ids[k]; k++) {
        enum { N = 8 };
        fhd_venv *a = fhd_venv_create(ids[k], N, 1, NULL, 0);
        fhd_venv *b = fhd_venv_create(ids[k], N, 2, NULL, 0);
        if (!a || !b) {
            tc_fail(&tc, "create failed");
        } else {
            float oa[N * FHD_ENV_MAX_OBS_DIM], ob[N * FHD_ENV_MAX_OBS_DIM];
            const int od = fhd_venv_spec(a)->obs_dim;
            fhd_venv_reset(a, oa);
            fhd_venv_reset(b, ob);
            for (int i = 0; i < N; i++)
                CHECK(&tc, memcmp(oa + i * od, ob + i * od, (size_t)od * sizeof(float)) != 0,
                      "%s copy %d: seeds 1 and 2 give the same reset", ids[k], i);
            for (int i = 1; i < N; i++)
                CHECK(&tc, memcmp(oa, oa + i * od, (size_t)od * sizeof(float)) != 0,
                      "%s: copies 0 and %d start alike", ids[k], i);
            /* successive resets of one copy differ */
            float o1[FHD_ENV_MAX_OBS_DIM], o2[FHD_ENV_MAX_OBS_DIM];
            fhd_venv_reset_one(a, 3, o1);
            fhd_venv_reset_one(a, 3, o2);
            CHECK(&tc, memcmp(o1, o2, (size_t)od * sizeof(float)) != 0, "%s: resets repeat",
                  ids[k]);
        }
        fhd_venv_destroy(a);
        fhd_venv_destroy(b);
    }
    tc_end(&tc, NULL);
}

void test_bad_args(const char *id) {
    tcase tc;
    tc_begin(&tc, "%s: out-of-range actions and bad arguments", id);
    enum { N = 4 };
    fhd_venv *v = fhd_venv_create(id, N, 5, NULL, 0);
    if (!v) {
        tc_fail(&tc, "create failed");
        tc_end(&tc, NULL);
        return;
    }
    const fhd_env_spec *s = fhd_venv_spec(v);
    const int sd = fhd_env_state_dim(s);
    int32_t act[N] = {0, 1, 0, 1};
    float obs[N * FHD_ENV_MAX_OBS_DIM];
    CHECK(&tc, fhd_venv_step(v, act, obs, NULL, NULL, NULL, NULL) == 0, "valid step failed");
    double before[N][FHD_ENV_MAX_STATE_DIM], after[N][FHD_ENV_MAX_STATE_DIM];
    int el_before[N];
    for (int i = 0; i < N; i++) {
        fhd_venv_get_state(v, i, before[i]);
        el_before[i] = fhd_venv_elapsed_steps(v, i);
    }
    const int32_t bad_values[3] = {-1, (int32_t)s->num_actions, 1000};
    for (int b = 0; b < 3; b++) {
        act[2] = bad_values[b];
        float rew[N] = {9, 9, 9, 9};
        CHECK(&tc, fhd_venv_step(v, act, obs, obs, rew, NULL, NULL) == -1, "action %d accepted",
              (int)bad_values[b]);
        CHECK(&tc, rew[0] == 9 && rew[3] == 9, "outputs written on a rejected step");
        for (int i = 0; i < N; i++) {
            fhd_venv_get_state(v, i, after[i]);
            CHECK(&tc,
                  memcmp(before[i], after[i], (size_t)sd * sizeof(double)) == 0 &&
                      fhd_venv_elapsed_steps(v, i) == el_before[i],
                  "copy %d changed by a rejected step", i);
        }
    }
    CHECK(&tc, fhd_venv_step(v, NULL, obs, NULL, NULL, NULL, NULL) == -1, "NULL actions");
    double st[FHD_ENV_MAX_STATE_DIM] = {0};
    CHECK(&tc, fhd_venv_set_state(v, N, st, 0) == -1 && fhd_venv_set_state(v, -1, st, 0) == -1,
          "set_state: bad index accepted");
    CHECK(&tc,
          fhd_venv_set_state(v, 0, st, s->max_episode_steps) == -1 &&
              fhd_venv_set_state(v, 0, st, -1) == -1,
          "set_state: bad elapsed accepted");
    CHECK(&tc, fhd_venv_set_state(v, 0, NULL, 0) == -1, "set_state: NULL state accepted");
    CHECK(&tc, fhd_venv_get_state(v, N, st) == -1 && fhd_venv_elapsed_steps(v, N) == -1,
          "get_state: bad index accepted");
    CHECK(&tc, fhd_venv_reset_one(v, N, NULL) == -1, "reset_one: bad index accepted");
    fhd_venv_destroy(v);
    tc_end(&tc, NULL);
}

/* Same-step auto-reset: copy 0 terminates, copy 1 continues, copy 2 is truncated. */
void test_autoreset(const char *id) {
    tcase tc;
    tc_begin(&tc, "%s: same-step auto-reset", id);
    enum { N = 3 };
    fhd_venv *v = fhd_venv_create(id, N, 11, NULL, 0);
    if (!v) {
        tc_fail(&tc, "create failed");
        tc_end(&tc, NULL);
        return;
    }
    const fhd_env_spec *s = fhd_venv_spec(v);
    const int od = s->obs_dim, sd = fhd_env_state_dim(s);
    step_fn stepf = pure_step(id);
    observe_fn obsf = pure_observe(id);
    double near_end[4], calm[4];
    int32_t act[N];
    if (strcmp(id, "CartPole-v1") == 0) {
        const double a[4] = {2.399, 1.0, 0.0, 0.0}, b[4] = {0.0, 0.0, 0.01, 0.0};
        memcpy(near_end, a, sizeof a);
        memcpy(calm, b, sizeof b);
        act[0] = 1;
        act[1] = act[2] = 0;
    } else if (strcmp(id, "Acrobot-v1") == 0) {
        const double a[4] = {3.141592653589793, 0.0, 0.0, 0.0}, b[4] = {0.05, -0.02, 0.0, 0.0};
        memcpy(near_end, a, sizeof a);
        memcpy(calm, b, sizeof b);
        act[0] = 1;
        act[1] = act[2] = 2;
    } else {
        const double a[4] = {0.49, 0.05, 0, 0}, b[4] = {-0.5, 0.0, 0, 0};
        memcpy(near_end, a, sizeof a);
        memcpy(calm, b, sizeof b);
        act[0] = 2;
        act[1] = act[2] = 1;
    }
    const int max_steps = s->max_episode_steps;
    CHECK(&tc, fhd_venv_set_state(v, 0, near_end, 3) == 0, "set_state 0");
    CHECK(&tc, fhd_venv_set_state(v, 1, calm, 0) == 0, "set_state 1");
    CHECK(&tc, fhd_venv_set_state(v, 2, calm, max_steps - 1) == 0, "set_state 2");
    double got[FHD_ENV_MAX_STATE_DIM];
    fhd_venv_get_state(v, 0, got);
    CHECK(&tc, memcmp(got, near_end, (size_t)sd * sizeof(double)) == 0, "get_state != set_state");

    /* expected outcome from the single-state functions */
    double e0[4], e1[4];
    memcpy(e0, near_end, sizeof e0);
    memcpy(e1, calm, sizeof e1);
    int t0 = 0, t1 = 0;
    const double r0 = stepf(e0, act[0], &t0), r1 = stepf(e1, act[1], &t1);
    float x0[FHD_ENV_MAX_OBS_DIM], x1[FHD_ENV_MAX_OBS_DIM];
    obsf(e0, x0);
    obsf(e1, x1);
    CHECK(&tc, t0 == 1 && t1 == 0, "test states do not behave as intended (%d %d)", t0, t1);

    float obs[N * FHD_ENV_MAX_OBS_DIM], fin[N * FHD_ENV_MAX_OBS_DIM], rew[N];
    uint8_t term[N], trunc[N];
    CHECK(&tc, fhd_venv_step(v, act, obs, fin, rew, term, trunc) == 0, "step failed");
    /* copy 0: terminated */
    CHECK(&tc, term[0] == 1 && trunc[0] == 0 && rew[0] == (float)r0, "copy 0 flags/reward");
    CHECK(&tc, memcmp(fin, x0, (size_t)od * sizeof(float)) == 0, "copy 0 final_obs");
    float cur[FHD_ENV_MAX_OBS_DIM];
    fhd_venv_observe(v, 0, cur);
    CHECK(&tc, memcmp(obs, cur, (size_t)od * sizeof(float)) == 0, "copy 0 obs is not its state");
    CHECK(&tc, memcmp(obs, fin, (size_t)od * sizeof(float)) != 0, "copy 0 not reset");
    CHECK(&tc, fhd_venv_elapsed_steps(v, 0) == 0 && in_bounds(s, obs), "copy 0 new episode");
    /* copy 1: continues */
    CHECK(&tc, term[1] == 0 && trunc[1] == 0 && rew[1] == (float)r1, "copy 1 flags/reward");
    CHECK(&tc,
          memcmp(fin + od, x1, (size_t)od * sizeof(float)) == 0 &&
              memcmp(obs + od, x1, (size_t)od * sizeof(float)) == 0,
          "copy 1 obs/final_obs");
    CHECK(&tc, fhd_venv_elapsed_steps(v, 1) == 1, "copy 1 elapsed");
    /* copy 2: truncated by the time limit, not terminated */
    CHECK(&tc, term[2] == 0 && trunc[2] == 1, "copy 2 flags %d %d", term[2], trunc[2]);
    CHECK(&tc, memcmp(fin + 2 * od, x1, (size_t)od * sizeof(float)) == 0, "copy 2 final_obs");
    CHECK(&tc,
          memcmp(obs + 2 * od, x1, (size_t)od * sizeof(float)) != 0 &&
              fhd_venv_elapsed_steps(v, 2) == 0,
          "copy 2 not reset");
    fhd_venv_destroy(v);
    tc_end(&tc, NULL);
}

void test_render(const char *id) {
    tcase tc;
    tc_begin(&tc, "%s: ASCII rendering", id);
    fhd_venv *v = fhd_venv_create(id, 2, 3, NULL, 0);
    char buf[FHD_ENV_RENDER_CAP];
    if (!v) {
        tc_fail(&tc, "create failed");
        tc_end(&tc, NULL);
        return;
    }
    int32_t act[2] = {1, 0};
    for (int t = 0; t < 5; t++)
        fhd_venv_step(v, act, NULL, NULL, NULL, NULL, NULL);
    const int k = fhd_venv_render_ascii(v, 1, buf, sizeof buf);
    CHECK(&tc, k > 0 && (size_t)k == strlen(buf) && buf[k - 1] == '\n', "render returned %d", k);
    CHECK(&tc, strstr(buf, id) != NULL && strstr(buf, "step 5/") != NULL, "status line missing");
    if (g_verbose && k > 0)
        printf("%s", buf);
    char small[16];
    CHECK(&tc,
          fhd_venv_render_ascii(v, 1, small, sizeof small) == -1 && strlen(small) < sizeof small,
          "small buffer not reported");
    CHECK(&tc, fhd_venv_render_ascii(v, 2, buf, sizeof buf) == -1, "bad index accepted");
    /* extreme states render without trouble */
    const double wild[4] = {1e9, -1e9, 1e300, -1e300};
    fhd_venv_set_state(v, 0, wild, 0);
    CHECK(&tc, fhd_venv_render_ascii(v, 0, buf, sizeof buf) > 0, "wild state");
    fhd_venv_destroy(v);
    tc_end(&tc, NULL);
}
