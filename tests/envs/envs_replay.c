/* envs_replay.c - replays the trajectories recorded from Gymnasium (DATA_DIR/ID.txt, written
 * by tools/gen_env_trajectories.py): the reference file's parser, the observation tolerance,
 * and replay_file, which steps every episode of a file through the vector API and again
 * through the single-state functions. */
#include "envs_test.h"

/* ---- reference data -------------------------------------------------------------------------- */

typedef struct ref_step {
    int action;
    double reward;
    int term, trunc;
    float obs[FHD_ENV_MAX_OBS_DIM];
} ref_step;

typedef struct ref_episode {
    char name[64];
    int elapsed0, nsteps;
    double state[FHD_ENV_MAX_STATE_DIM];
    int has_reset;
    float reset_obs[FHD_ENV_MAX_OBS_DIM];
    double final_state[FHD_ENV_MAX_STATE_DIM];
    ref_step *steps;
} ref_episode;

typedef struct ref_file {
    char id[64];
    int state_dim, obs_dim;
    int n;
    ref_episode eps[32];
} ref_file;

static void free_ref(ref_file *rf) {
    for (int e = 0; e < rf->n; e++)
        free(rf->eps[e].steps);
    rf->n = 0;
}

/* parse `count` doubles from *p; 0 on success */
static int parse_doubles(char **p, int count, double *out) {
    for (int j = 0; j < count; j++) {
        char *end;
        out[j] = strtod(*p, &end);
        if (end == *p)
            return -1;
        *p = end;
    }
    return 0;
}

static int parse_floats(char **p, int count, float *out) {
    for (int j = 0; j < count; j++) {
        char *end;
        out[j] = strtof(*p, &end);
        if (end == *p)
            return -1;
        *p = end;
    }
    return 0;
}

/* Returns 0 and fills rf, or -1 with a message printed. */
static int load_ref(const char *path, ref_file *rf) {
    memset(rf, 0, sizeof *rf);
    FILE *f = fopen(path, "r");
    if (!f) {
        printf("  cannot open %s\n", path);
        return -1;
    }
    char line[1024];
    int lineno = 0, step = 0, err = 0;
    ref_episode *ep = NULL;
    while (!err && fgets(line, sizeof line, f)) {
        lineno++;
        char *p = line;
        if (line[0] == '#' || line[0] == '\n')
            continue;
        if (strncmp(p, "env ", 4) == 0) {
            if (sscanf(p + 4, "%63s %d %d", rf->id, &rf->state_dim, &rf->obs_dim) != 3 ||
                rf->state_dim < 1 || rf->state_dim > FHD_ENV_MAX_STATE_DIM || rf->obs_dim < 1 ||
                rf->obs_dim > FHD_ENV_MAX_OBS_DIM)
                err = 1;
        } else if (strncmp(p, "episode ", 8) == 0) {
            if (rf->n >= (int)(sizeof rf->eps / sizeof rf->eps[0]) || rf->obs_dim == 0) {
                err = 1;
                break;
            }
            ep = &rf->eps[rf->n++];
            if (sscanf(p + 8, "%63s %d %d", ep->name, &ep->elapsed0, &ep->nsteps) != 3 ||
                ep->nsteps < 1 || ep->nsteps > 100000) {
                err = 1;
                break;
            }
            ep->steps = calloc((size_t)ep->nsteps, sizeof *ep->steps);
            if (!ep->steps)
                err = 1;
            step = 0;
        } else if (!ep) {
            err = 1;
        } else if (strncmp(p, "state ", 6) == 0) {
            p += 6;
            err = parse_doubles(&p, rf->state_dim, ep->state) != 0;
        } else if (strncmp(p, "final ", 6) == 0) {
            p += 6;
            err = parse_doubles(&p, rf->state_dim, ep->final_state) != 0;
        } else if (strncmp(p, "reset ", 6) == 0) {
            p += 6;
            while (*p == ' ')
                p++;
            ep->has_reset = *p != '-';
            if (ep->has_reset)
                err = parse_floats(&p, rf->obs_dim, ep->reset_obs) != 0;
        } else if (strncmp(p, "s ", 2) == 0) {
            if (step >= ep->nsteps) {
                err = 1;
                break;
            }
            ref_step *s = &ep->steps[step++];
            p += 2;
            char *end;
            s->action = (int)strtol(p, &end, 10);
            p = end;
            double flags[2] = {0.0, 0.0};
            if (parse_doubles(&p, 1, &s->reward) != 0 || parse_doubles(&p, 2, flags) != 0 ||
                parse_floats(&p, rf->obs_dim, s->obs) != 0)
                err = 1;
            s->term = flags[0] != 0.0;
            s->trunc = flags[1] != 0.0;
        } else if (strncmp(p, "end", 3) == 0) {
            if (step != ep->nsteps)
                err = 1;
            ep = NULL;
        } else {
            err = 1;
        }
    }
    fclose(f);
    if (err || ep || rf->n == 0) {
        printf("  %s: parse error near line %d\n", path, lineno);
        free_ref(rf);
        return -1;
    }
    return 0;
}

/* ---- comparisons ----------------------------------------------------------------------------- */

static double obs_tol(double ref) {
    return fmax(1e-6, 1e-6 * fabs(ref));
}

/* max |a - b| over n floats; sets *bad if any exceeds the tolerance against ref b */
static double cmp_obs(const float *a, const float *b, int n, int *bad) {
    double m = 0.0;
    for (int j = 0; j < n; j++) {
        const double d = fabs((double)a[j] - (double)b[j]);
        if (!(d <= obs_tol(b[j])))
            *bad = 1;
        if (d > m || d != d)
            m = d;
    }
    return m;
}

static void fmt_vec(char *buf, size_t cap, const float *v, int n) {
    size_t len = 0;
    buf[0] = '\0';
    for (int j = 0; j < n && len < cap; j++) {
        const int k = snprintf(buf + len, cap - len, "%s%.9g", j ? " " : "", (double)v[j]);
        if (k < 0)
            break;
        len += (size_t)k;
    }
}

/* ---- replay of the Gymnasium trajectories ---------------------------------------------------- */

void replay_file(const char *dir, const char *id) {
    char path[1024];
    snprintf(path, sizeof path, "%s/%s.txt", dir, id);
    ref_file *rf = calloc(1, sizeof *rf);
    tcase tc;
    if (!rf || load_ref(path, rf) != 0) {
        tc_begin(&tc, "%s: load %s", id, path);
        tc_fail(&tc, "cannot load reference data");
        tc_end(&tc, NULL);
        free(rf);
        return;
    }
    tc_begin(&tc, "%s: reference file", id);
    const fhd_env_spec *spec = fhd_env_find(id);
    CHECK(&tc, spec != NULL, "unknown id");
    CHECK(&tc, strcmp(rf->id, id) == 0, "file is for %s", rf->id);
    if (spec) {
        CHECK(&tc, rf->obs_dim == spec->obs_dim, "obs_dim %d vs %d", rf->obs_dim, spec->obs_dim);
        CHECK(&tc, rf->state_dim == fhd_env_state_dim(spec), "state_dim %d vs %d", rf->state_dim,
              fhd_env_state_dim(spec));
    }
    if (!tc_end(&tc, NULL)) {
        free_ref(rf);
        free(rf);
        return;
    }
    const int od = rf->obs_dim, sd = rf->state_dim, n = rf->n;

    /* All episodes of the file are stepped together, one copy each, through the vector API:
       this checks the dynamics and the flags, and the auto-reset bookkeeping (an ended episode's
       last observation must come back in final_obs). Copies whose episode is over keep being
       stepped with action 0; their outputs are ignored. */
    char err[256];
    fhd_venv *v = fhd_venv_create(id, n, 7, err, sizeof err);
    float *obs = calloc((size_t)n * od, sizeof(float));
    float *fin = calloc((size_t)n * od, sizeof(float));
    float *rew = calloc((size_t)n, sizeof(float));
    uint8_t *term = calloc((size_t)n, 1), *trunc = calloc((size_t)n, 1);
    int32_t *act = calloc((size_t)n, sizeof(int32_t));
    int *ep_fail = calloc((size_t)n, sizeof(int));
    double *ep_maxerr = calloc((size_t)n, sizeof(double));
    if (!v || !obs || !fin || !rew || !term || !trunc || !act || !ep_fail || !ep_maxerr) {
        printf("  setup failed: %s\n", v ? "out of memory" : err);
        g_failed++;
        goto done;
    }
    int max_len = 0;
    for (int e = 0; e < n; e++) {
        const ref_episode *ep = &rf->eps[e];
        if (ep->nsteps > max_len)
            max_len = ep->nsteps;
        if (fhd_venv_set_state(v, e, ep->state, ep->elapsed0) != 0) {
            ep_fail[e]++;
            printf("    %s/%s: set_state failed\n", id, ep->name);
        }
        if (ep->has_reset) {
            float o[FHD_ENV_MAX_OBS_DIM];
            int bad = 0;
            fhd_venv_observe(v, e, o);
            const double d = cmp_obs(o, ep->reset_obs, od, &bad);
            if (d > ep_maxerr[e])
                ep_maxerr[e] = d;
            if (bad) {
                ep_fail[e]++;
                printf("    %s/%s: reset observation differs (max %.3g)\n", id, ep->name, d);
            }
        }
    }
    for (int t = 0; t < max_len; t++) {
        for (int e = 0; e < n; e++)
            act[e] = t < rf->eps[e].nsteps ? rf->eps[e].steps[t].action : 0;
        if (fhd_venv_step(v, act, obs, fin, rew, term, trunc) != 0) {
            printf("    %s: fhd_venv_step rejected the actions at step %d\n", id, t);
            for (int e = 0; e < n; e++)
                ep_fail[e]++;
            break;
        }
        for (int e = 0; e < n; e++) {
            const ref_episode *ep = &rf->eps[e];
            if (t >= ep->nsteps)
                continue;
            const ref_step *rs = &ep->steps[t];
            const float *o = obs + (size_t)e * od, *fo = fin + (size_t)e * od;
            int bad = 0;
            const double d = cmp_obs(fo, rs->obs, od, &bad);
            if (d > ep_maxerr[e] || d != d)
                ep_maxerr[e] = d;
            const int ended = rs->term || rs->trunc;
            const int same = memcmp(o, fo, (size_t)od * sizeof(float)) == 0;
            const int flags_ok =
                rew[e] == (float)rs->reward && term[e] == rs->term && trunc[e] == rs->trunc;
            const int reset_ok = ended
                                     ? fhd_venv_elapsed_steps(v, e) == 0 && !same
                                     : fhd_venv_elapsed_steps(v, e) == ep->elapsed0 + t + 1 && same;
            if (bad || !flags_ok || !reset_ok) {
                if (ep_fail[e]++ < 3) {
                    char got[256], want[256];
                    fmt_vec(got, sizeof got, fo, od);
                    fmt_vec(want, sizeof want, rs->obs, od);
                    printf("    %s/%s step %d: obs [%s] want [%s]; reward %g/%g term %d/%d "
                           "trunc %d/%d%s\n",
                           id, ep->name, t + 1, got, want, (double)rew[e], rs->reward, term[e],
                           rs->term, trunc[e], rs->trunc,
                           reset_ok ? "" : "; auto-reset bookkeeping wrong");
                }
            }
        }
    }

    /* the same episodes through the single-state functions, comparing the float64 state
       reached at the end with Gymnasium's */
    step_fn stepf = pure_step(id);
    int exact = 0;
    double max_obs_err = 0.0, max_state_err = 0.0;
    long total_steps = 0;
    for (int e = 0; e < n; e++) {
        const ref_episode *ep = &rf->eps[e];
        double s[FHD_ENV_MAX_STATE_DIM];
        memcpy(s, ep->state, sizeof s);
        for (int t = 0; t < ep->nsteps; t++) {
            int tm = 0;
            stepf(s, ep->steps[t].action, &tm);
        }
        int state_bad = 0, bits = 1;
        double sd_max = 0.0;
        for (int j = 0; j < sd; j++) {
            const double d = fabs(s[j] - ep->final_state[j]);
            if (!(d <= obs_tol(ep->final_state[j])))
                state_bad = 1;
            if (d > sd_max || d != d)
                sd_max = d;
            if (memcmp(&s[j], &ep->final_state[j], sizeof(double)) != 0)
                bits = 0;
        }
        exact += bits;
        if (sd_max > max_state_err)
            max_state_err = sd_max;
        if (ep_maxerr[e] > max_obs_err)
            max_obs_err = ep_maxerr[e];
        total_steps += ep->nsteps;

        tc_begin(&tc, "%s/%s", id, ep->name);
        if (ep_fail[e])
            tc_fail(&tc, "%d mismatching steps", ep_fail[e]);
        CHECK(&tc, !state_bad, "final internal state differs by %.3g", sd_max);
        const ref_step *last = &ep->steps[ep->nsteps - 1];
        char detail[160];
        snprintf(detail, sizeof detail,
                 "(%d steps from elapsed %d, ends %s%s%s, max |obs-ref| %.2g%s)", ep->nsteps,
                 ep->elapsed0, last->term ? "terminated" : "", last->term && last->trunc ? "+" : "",
                 last->trunc ? "truncated" : "", ep_maxerr[e], bits ? ", state bit-exact" : "");
        tc_end(&tc, detail);
    }
    printf("  %s summary: %d episodes, %ld steps, max |obs - ref| %.3g, final float64 state "
           "bit-exact in %d/%d episodes (max diff %.3g)\n",
           id, n, total_steps, max_obs_err, exact, n, max_state_err);

done:
    fhd_venv_destroy(v);
    free(obs);
    free(fin);
    free(rew);
    free(term);
    free(trunc);
    free(act);
    free(ep_fail);
    free(ep_maxerr);
    free_ref(rf);
    free(rf);
}
