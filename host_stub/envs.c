/* envs.c - registry, vector wrapper (time limit, same-step auto-reset, per-copy RNG) and ASCII
 * rendering of the classic-control environments. The dynamics live in env_<name>.c.
 */
#include "envs.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define ENV_PI 3.141592653589793

/* ---- registry -------------------------------------------------------------------------------- */

typedef struct env_def {
    fhd_env_spec spec;
    int state_dim;
    int num_draws; /* uniform draws per reset */
    double (*step)(double *state, int action, int *terminated);
    void (*observe)(const double *state, float *obs);
    void (*init_state)(double *state, const double *u01);
    int (*render)(const double *state, char *buf, size_t cap);
} env_def;

/* Observation bounds: Gymnasium builds them in float64 and stores them as float32. */
static const float cartpole_high[4] = {(float)(2.4 * 2), INFINITY,
                                       (float)(12 * 2 * ENV_PI / 360 * 2), INFINITY};
static const float cartpole_low[4] = {-(float)(2.4 * 2), -INFINITY,
                                      -(float)(12 * 2 * ENV_PI / 360 * 2), -INFINITY};
static const float acrobot_high[6] = {
    1.0f, 1.0f, 1.0f, 1.0f, (float)(4 * ENV_PI), (float)(9 * ENV_PI)};
static const float acrobot_low[6] = {
    -1.0f, -1.0f, -1.0f, -1.0f, -(float)(4 * ENV_PI), -(float)(9 * ENV_PI)};
static const float mountaincar_low[2] = {(float)-1.2, (float)-0.07};
static const float mountaincar_high[2] = {(float)0.6, (float)0.07};

static const env_def env_defs[] = {
    {{"CartPole-v1", 4, 2, 500, 475.0, cartpole_low, cartpole_high},
     4,
     4,
     fhd_cartpole_step,
     fhd_cartpole_observe,
     fhd_cartpole_init_state,
     fhd_cartpole_render_ascii},
    {{"Acrobot-v1", 6, 3, 500, -100.0, acrobot_low, acrobot_high},
     4,
     4,
     fhd_acrobot_step,
     fhd_acrobot_observe,
     fhd_acrobot_init_state,
     fhd_acrobot_render_ascii},
    {{"MountainCar-v0", 2, 3, 200, -110.0, mountaincar_low, mountaincar_high},
     2,
     1,
     fhd_mountaincar_step,
     fhd_mountaincar_observe,
     fhd_mountaincar_init_state,
     fhd_mountaincar_render_ascii},
};
#define NUM_ENVS ((int)(sizeof env_defs / sizeof env_defs[0]))

static const char *const env_id_list[] = {"CartPole-v1", "Acrobot-v1", "MountainCar-v0", NULL};

static const env_def *find_def(const char *id) {
    if (!id)
        return NULL;
    for (int k = 0; k < NUM_ENVS; k++)
        if (strcmp(env_defs[k].spec.id, id) == 0)
            return &env_defs[k];
    return NULL;
}

const fhd_env_spec *fhd_env_find(const char *id) {
    const env_def *d = find_def(id);
    return d ? &d->spec : NULL;
}

const char *const *fhd_env_ids(void) {
    return env_id_list;
}

int fhd_env_state_dim(const fhd_env_spec *spec) {
    for (int k = 0; k < NUM_ENVS; k++)
        if (spec == &env_defs[k].spec)
            return env_defs[k].state_dim;
    return 0;
}

/* ---- RNG: splitmix64 ------------------------------------------------------------------------- */

#define GOLDEN_GAMMA UINT64_C(0x9E3779B97F4A7C15)

static uint64_t mix64(uint64_t z) {
    z = (z ^ (z >> 30)) * UINT64_C(0xBF58476D1CE4E5B9);
    z = (z ^ (z >> 27)) * UINT64_C(0x94D049BB133111EB);
    return z ^ (z >> 31);
}

static uint64_t rng_next(uint64_t *s) {
    *s += GOLDEN_GAMMA;
    return mix64(*s);
}

/* uniform in [0, 1) with 53 random bits */
static double rng_uniform(uint64_t *s) {
    return (double)(rng_next(s) >> 11) * (1.0 / 9007199254740992.0);
}

/* ---- vector env ------------------------------------------------------------------------------ */

struct fhd_venv {
    const env_def *def;
    int n;
    double *state; /* (n, FHD_ENV_MAX_STATE_DIM) */
    int *elapsed;  /* steps taken in the current episode */
    uint64_t *rng; /* per-copy splitmix64 state */
};

static double *copy_state(const fhd_venv *v, int i) {
    return v->state + (size_t)i * FHD_ENV_MAX_STATE_DIM;
}

static void reset_copy(fhd_venv *v, int i) {
    double u[FHD_ENV_MAX_STATE_DIM];
    for (int j = 0; j < v->def->num_draws; j++)
        u[j] = rng_uniform(&v->rng[i]);
    double *s = copy_state(v, i);
    for (int j = 0; j < FHD_ENV_MAX_STATE_DIM; j++)
        s[j] = 0.0;
    v->def->init_state(s, u);
    v->elapsed[i] = 0;
}

static void set_err(char *err, size_t errlen, const char *fmt, ...) {
    if (!err || errlen == 0)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
}

fhd_venv *fhd_venv_create(const char *id, int num_envs, uint64_t seed, char *err, size_t errlen) {
    const env_def *d = find_def(id);
    if (!d) {
        set_err(err, errlen,
                "unknown environment id '%s' (known: CartPole-v1, Acrobot-v1, "
                "MountainCar-v0)",
                id ? id : "(null)");
        return NULL;
    }
    if (num_envs < 1) {
        set_err(err, errlen, "num_envs must be >= 1 (got %d)", num_envs);
        return NULL;
    }
    fhd_venv *v = calloc(1, sizeof *v);
    if (v) {
        v->state = calloc((size_t)num_envs * FHD_ENV_MAX_STATE_DIM, sizeof *v->state);
        v->elapsed = calloc((size_t)num_envs, sizeof *v->elapsed);
        v->rng = calloc((size_t)num_envs, sizeof *v->rng);
    }
    if (!v || !v->state || !v->elapsed || !v->rng) {
        fhd_venv_destroy(v);
        set_err(err, errlen, "out of memory creating %d copies of %s", num_envs, id);
        return NULL;
    }
    v->def = d;
    v->n = num_envs;
    const uint64_t base = mix64(seed);
    for (int i = 0; i < num_envs; i++) {
        v->rng[i] = mix64(base + (uint64_t)i * GOLDEN_GAMMA + UINT64_C(0xD1B54A32D192ED03));
        reset_copy(v, i);
    }
    return v;
}

void fhd_venv_destroy(fhd_venv *v) {
    if (!v)
        return;
    free(v->state);
    free(v->elapsed);
    free(v->rng);
    free(v);
}

const fhd_env_spec *fhd_venv_spec(const fhd_venv *v) {
    return v ? &v->def->spec : NULL;
}

int fhd_venv_num_envs(const fhd_venv *v) {
    return v ? v->n : 0;
}

void fhd_venv_reset(fhd_venv *v, float *obs) {
    if (!v)
        return;
    const int od = v->def->spec.obs_dim;
    for (int i = 0; i < v->n; i++) {
        reset_copy(v, i);
        if (obs)
            v->def->observe(copy_state(v, i), obs + (size_t)i * od);
    }
}

int fhd_venv_reset_one(fhd_venv *v, int i, float *obs) {
    if (!v || i < 0 || i >= v->n)
        return -1;
    reset_copy(v, i);
    if (obs)
        v->def->observe(copy_state(v, i), obs);
    return 0;
}

int fhd_venv_step(fhd_venv *v, const int32_t *actions, float *obs, float *final_obs, float *rewards,
                  uint8_t *terminated, uint8_t *truncated) {
    if (!v || !actions)
        return -1;
    const int na = v->def->spec.num_actions;
    for (int i = 0; i < v->n; i++)
        if (actions[i] < 0 || actions[i] >= na)
            return -1;

    const int od = v->def->spec.obs_dim;
    const int max_steps = v->def->spec.max_episode_steps;
    for (int i = 0; i < v->n; i++) {
        double *s = copy_state(v, i);
        int term = 0;
        const double r = v->def->step(s, (int)actions[i], &term);
        v->elapsed[i] += 1;
        const int trunc = v->elapsed[i] >= max_steps; /* TimeLimit: regardless of term */
        float last[FHD_ENV_MAX_OBS_DIM];
        v->def->observe(s, last);
        if (term || trunc)
            reset_copy(v, i);
        if (final_obs)
            memcpy(final_obs + (size_t)i * od, last, (size_t)od * sizeof(float));
        if (obs)
            v->def->observe(s, obs + (size_t)i * od);
        if (rewards)
            rewards[i] = (float)r;
        if (terminated)
            terminated[i] = (uint8_t)(term != 0);
        if (truncated)
            truncated[i] = (uint8_t)trunc;
    }
    return 0;
}

int fhd_venv_set_state(fhd_venv *v, int i, const double *state, int elapsed_steps) {
    if (!v || i < 0 || i >= v->n || !state || elapsed_steps < 0 ||
        elapsed_steps >= v->def->spec.max_episode_steps)
        return -1;
    double *s = copy_state(v, i);
    for (int j = 0; j < v->def->state_dim; j++)
        s[j] = state[j];
    v->elapsed[i] = elapsed_steps;
    return 0;
}

int fhd_venv_get_state(const fhd_venv *v, int i, double *state) {
    if (!v || i < 0 || i >= v->n || !state)
        return -1;
    const double *s = copy_state(v, i);
    for (int j = 0; j < v->def->state_dim; j++)
        state[j] = s[j];
    return 0;
}

int fhd_venv_elapsed_steps(const fhd_venv *v, int i) {
    if (!v || i < 0 || i >= v->n)
        return -1;
    return v->elapsed[i];
}

void fhd_venv_observe(const fhd_venv *v, int i, float *obs) {
    if (!v || i < 0 || i >= v->n || !obs)
        return;
    v->def->observe(copy_state(v, i), obs);
}

/* ---- ASCII rendering ------------------------------------------------------------------------- */

#define CV_MAX_W 64
#define CV_MAX_H 24

typedef struct canvas {
    int w, h;
    char c[CV_MAX_H][CV_MAX_W];
} canvas;

typedef struct out_buf {
    char *buf;
    size_t cap, len;
    int overflow;
} out_buf;

static void cv_init(canvas *cv, int w, int h) {
    cv->w = w;
    cv->h = h;
    memset(cv->c, ' ', sizeof cv->c);
}

static int iround(double x) {
    if (!(x > -1e6))
        return -1000000;
    if (!(x < 1e6))
        return 1000000;
    return (int)floor(x + 0.5);
}

static void cv_put(canvas *cv, int col, int row, char ch) {
    if (col >= 0 && col < cv->w && row >= 0 && row < cv->h)
        cv->c[row][col] = ch;
}

/* segment between cell coordinates (col, row), sampled finely */
static void cv_line(canvas *cv, double c0, double r0, double c1, double r1, char ch) {
    const double len = fmax(fabs(c1 - c0), fabs(r1 - r0));
    const int n = len < 1e4 ? 2 * (int)len + 2 : 20000;
    for (int k = 0; k <= n; k++) {
        const double t = (double)k / n;
        cv_put(cv, iround(c0 + t * (c1 - c0)), iround(r0 + t * (r1 - r0)), ch);
    }
}

static void ob_init(out_buf *ob, char *buf, size_t cap) {
    ob->buf = buf;
    ob->cap = cap;
    ob->len = 0;
    ob->overflow = 0;
    if (cap > 0)
        buf[0] = '\0';
}

static void ob_printf(out_buf *ob, const char *fmt, ...) {
    if (ob->overflow)
        return;
    va_list ap;
    va_start(ap, fmt);
    const size_t room = ob->cap - ob->len;
    const int k = vsnprintf(ob->buf + ob->len, room, fmt, ap);
    va_end(ap);
    if (k < 0 || (size_t)k >= room) {
        ob->overflow = 1;
        return;
    }
    ob->len += (size_t)k;
}

static void ob_canvas(out_buf *ob, const canvas *cv) {
    for (int r = 0; r < cv->h; r++) {
        int w = cv->w;
        while (w > 0 && cv->c[r][w - 1] == ' ')
            w--;
        ob_printf(ob, "%.*s\n", w, cv->c[r]);
    }
}

static int ob_result(const out_buf *ob) {
    if (ob->cap == 0 || ob->overflow)
        return -1;
    return (int)ob->len;
}

int fhd_cartpole_render_ascii(const double *state, char *buf, size_t cap) {
    if (!state || !buf)
        return -1;
    /* track [-2.4, 2.4] m over 61 columns; rows are twice as tall as columns are wide */
    enum { W = 61, H = 8 };
    const double col_per_m = (W - 1) / 4.8, row_per_m = col_per_m / 2;
    const double x = state[0], theta = state[2];
    canvas cv;
    cv_init(&cv, W, H);
    const int cart_row = H - 2;
    const double cart_col = (W - 1) / 2.0 + x * col_per_m;
    /* pole of length 1 m from the cart's top, theta from the vertical, positive to the right */
    char pole_ch = '|';
    if (fabs(cos(theta)) < 0.4)
        pole_ch = '-';
    else if (sin(theta) > 0.2)
        pole_ch = '/';
    else if (sin(theta) < -0.2)
        pole_ch = '\\';
    cv_line(&cv, cart_col, cart_row - 1, cart_col + sin(theta) * col_per_m,
            cart_row - 1 - cos(theta) * row_per_m, pole_ch);
    const int cc = iround(cart_col);
    for (int k = -2; k <= 2; k++)
        cv_put(&cv, cc + k, cart_row, k == -2 ? '[' : k == 2 ? ']' : '#');
    for (int k = 0; k < W; k++)
        cv.c[H - 1][k] = (k == 0 || k == W - 1) ? '|' : (k == (W - 1) / 2 ? '+' : '=');
    out_buf ob;
    ob_init(&ob, buf, cap);
    ob_canvas(&ob, &cv);
    ob_printf(&ob, "x=%+.4g x_dot=%+.4g theta=%+.4gdeg theta_dot=%+.4g\n", x, state[1],
              theta * 180.0 / ENV_PI, state[3]);
    return ob_result(&ob);
}

int fhd_acrobot_render_ascii(const double *state, char *buf, size_t cap) {
    if (!state || !buf)
        return -1;
    /* world [-2.1, 2.1]^2, pivot at the centre, y up; goal line at height 1 */
    enum { W = 37, H = 19 };
    const double col_per_m = 8.5, row_per_m = 4.25;
    const double pc = (W - 1) / 2.0, pr = (H - 1) / 2.0;
    const double t1 = state[0], t2 = state[1];
    const double x1 = sin(t1), y1 = -cos(t1);
    const double x2 = x1 + sin(t1 + t2), y2 = y1 - cos(t1 + t2);
    canvas cv;
    cv_init(&cv, W, H);
    const int goal_row = iround(pr - 1.0 * row_per_m);
    for (int k = 0; k < W; k += 2)
        cv_put(&cv, k, goal_row, '.');
    cv_line(&cv, pc, pr, pc + x1 * col_per_m, pr - y1 * row_per_m, '#');
    cv_line(&cv, pc + x1 * col_per_m, pr - y1 * row_per_m, pc + x2 * col_per_m, pr - y2 * row_per_m,
            '#');
    cv_put(&cv, iround(pc), iround(pr), 'O');
    cv_put(&cv, iround(pc + x1 * col_per_m), iround(pr - y1 * row_per_m), 'o');
    cv_put(&cv, iround(pc + x2 * col_per_m), iround(pr - y2 * row_per_m), '@');
    out_buf ob;
    ob_init(&ob, buf, cap);
    ob_canvas(&ob, &cv);
    ob_printf(&ob, "theta1=%+.4g theta2=%+.4g dtheta1=%+.4g dtheta2=%+.4g tip=%+.4g\n", t1, t2,
              state[2], state[3], -cos(t1) - cos(t2 + t1));
    return ob_result(&ob);
}

/* row of height y in [0.1, 1] on the MountainCar canvas: rows 1 (top) .. 9; row 0 holds the flag */
static int mc_row(double y) {
    return 1 + iround(8 * (1.0 - y) / 0.9);
}

int fhd_mountaincar_render_ascii(const double *state, char *buf, size_t cap) {
    if (!state || !buf)
        return -1;
    /* position [-1.2, 0.6] over 61 columns, height sin(3 x) * 0.45 + 0.55 in [0.1, 1] */
    enum { W = 61, H = 10 };
    const double lo = -1.2, hi = 0.6;
    canvas cv;
    cv_init(&cv, W, H);
    int prev_row = -1;
    for (int k = 0; k < W; k++) {
        const double px = lo + (hi - lo) * k / (W - 1);
        const int row = mc_row(sin(3 * px) * 0.45 + 0.55);
        cv_put(&cv, k, row, '.');
        /* keep steep parts connected */
        if (prev_row >= 0)
            for (int r = (row < prev_row ? row : prev_row) + 1;
                 r < (row > prev_row ? row : prev_row); r++)
                cv_put(&cv, k, r, '.');
        prev_row = row;
    }
    const double goal = 0.5;
    const int gcol = iround((goal - lo) / (hi - lo) * (W - 1));
    cv_put(&cv, gcol, mc_row(sin(3 * goal) * 0.45 + 0.55) - 1, 'F');
    const double pos = state[0];
    const int ccol = iround((pos - lo) / (hi - lo) * (W - 1));
    cv_put(&cv, ccol, mc_row(sin(3 * pos) * 0.45 + 0.55), '@');
    out_buf ob;
    ob_init(&ob, buf, cap);
    ob_canvas(&ob, &cv);
    ob_printf(&ob, "position=%+.4g velocity=%+.4g\n", pos, state[1]);
    return ob_result(&ob);
}

int fhd_venv_render_ascii(const fhd_venv *v, int i, char *buf, size_t cap) {
    if (!v || i < 0 || i >= v->n || !buf)
        return -1;
    const int k = v->def->render(copy_state(v, i), buf, cap);
    if (k < 0)
        return -1;
    out_buf ob;
    ob.buf = buf;
    ob.cap = cap;
    ob.len = (size_t)k;
    ob.overflow = 0;
    ob_printf(&ob, "%s copy %d step %d/%d\n", v->def->spec.id, i, v->elapsed[i],
              v->def->spec.max_episode_steps);
    return ob_result(&ob);
}
