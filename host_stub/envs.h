/* envs.h - vectorised classic-control environments for the reference host.
 *
 * CartPole-v1, Acrobot-v1 and MountainCar-v0 with Gymnasium's dynamics, observation and
 * action spaces, rewards, termination and time-limit truncation (as returned by
 * gymnasium.make(id)). The dynamics are computed in double precision with the same order of
 * operations as Gymnasium (which computes in float64 and casts observations to float32), so
 * observations agree with Gymnasium to float32 rounding for a given initial state and action
 * sequence. Initial states are drawn from Gymnasium's reset distributions with a small RNG of
 * our own (splitmix64), so sampled episodes are not those of a seeded Gymnasium env.
 *
 * A vector env holds N independent copies stepped together with same-step auto-reset.
 * Not thread-safe per object; distinct objects may be used from distinct threads.
 */
#ifndef FHD_ENVS_H
#define FHD_ENVS_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct fhd_env_spec {
    const char *id;                  /* "CartPole-v1", "Acrobot-v1", "MountainCar-v0" */
    int obs_dim;                     /* 4, 6, 2 */
    int num_actions;                 /* 2, 3, 3 */
    int max_episode_steps;           /* 500, 500, 200 */
    double reward_threshold;         /* 475, -100, -110 as in Gymnasium's registry */
    const float *obs_low, *obs_high; /* observation space bounds (obs_dim each) */
} fhd_env_spec;

typedef struct fhd_venv fhd_venv;

/* Largest obs_dim / internal state size over all environments. */
#define FHD_ENV_MAX_OBS_DIM 6
#define FHD_ENV_MAX_STATE_DIM 4

const fhd_env_spec *fhd_env_find(const char *id); /* NULL if unknown */
const char *const *fhd_env_ids(void);             /* NULL-terminated list */
/* Size of the raw internal state of an environment (CartPole 4, Acrobot 4, MountainCar 2);
   0 if spec is NULL or not one of ours. */
int fhd_env_state_dim(const fhd_env_spec *spec);

/* N independent copies; copy i is seeded from (seed, i) with splitmix64, so the same seed gives
   the same episodes. Returns NULL and writes a message to err (if errlen > 0) on error
   (unknown id, num_envs < 1, out of memory). The copies start reset. */
fhd_venv *fhd_venv_create(const char *id, int num_envs, uint64_t seed, char *err, size_t errlen);
void fhd_venv_destroy(fhd_venv *v); /* NULL-safe */
const fhd_env_spec *fhd_venv_spec(const fhd_venv *v);
int fhd_venv_num_envs(const fhd_venv *v);

/* Start a new episode in every copy (drawing from each copy's RNG); obs: (N, obs_dim), may be
   NULL. */
void fhd_venv_reset(fhd_venv *v, float *obs);

/* Step all copies with actions[i] in [0, num_actions). Returns 0, or -1 if an action is out of
   range (nothing is stepped then). Same-step auto-reset: for a copy whose episode ended
   (terminated or truncated) in this call, final_obs[i] receives the last observation of the
   ended episode and obs[i] the first observation of the new episode; for other copies
   final_obs[i] = obs[i]. obs, final_obs: (N, obs_dim); rewards, terminated, truncated: (N).
   Flags are as gymnasium.make(id) reports them: truncated is set when the episode reaches
   max_episode_steps steps, whether or not it also terminated on that step. Any output pointer
   may be NULL. */
int fhd_venv_step(fhd_venv *v, const int32_t *actions, float *obs, float *final_obs, float *rewards,
                  uint8_t *terminated, uint8_t *truncated);

/* Single-copy access for tests and rendering. Return 0, or -1 on a bad argument. */
/* Set the raw internal state (as Gymnasium's env.unwrapped.state: CartPole x, x_dot, theta,
   theta_dot; Acrobot theta1, theta2, dtheta1, dtheta2; MountainCar position, velocity) and the
   number of steps already taken in the episode (0 <= elapsed_steps < max_episode_steps). */
int fhd_venv_set_state(fhd_venv *v, int i, const double *state, int elapsed_steps);
int fhd_venv_get_state(const fhd_venv *v, int i, double *state);
/* Steps taken in copy i's current episode, or -1 on a bad argument. */
int fhd_venv_elapsed_steps(const fhd_venv *v, int i);
void fhd_venv_observe(const fhd_venv *v, int i, float *obs); /* current obs of copy i */
/* Start a new episode in copy i only; obs (obs_dim) may be NULL. */
int fhd_venv_reset_one(fhd_venv *v, int i, float *obs);

/* Render copy i as a few lines of ASCII art into buf (NUL-terminated, '\n' after each line).
   Returns the number of characters written (excluding the NUL), or -1 on a bad argument or if
   cap is too small (buf then holds a truncated, NUL-terminated prefix when cap > 0). A buffer of
   FHD_ENV_RENDER_CAP bytes is always enough. */
#define FHD_ENV_RENDER_CAP 2048
int fhd_venv_render_ascii(const fhd_venv *v, int i, char *buf, size_t cap);

/* ---- single-state dynamics (no time limit, no RNG) -------------------------------------------
 * step: advance state in place by one step of action (must be valid), return the reward and set
 *       *terminated to 0/1, exactly as the unwrapped Gymnasium env's step() does.
 * observe: observation of a state.
 * init_state: Gymnasium's reset distribution, from uniform draws u01 in [0, 1)
 *       (CartPole and Acrobot use 4 draws, MountainCar 1).
 * render_ascii: as fhd_venv_render_ascii. */
double fhd_cartpole_step(double *state, int action, int *terminated);
void fhd_cartpole_observe(const double *state, float *obs);
void fhd_cartpole_init_state(double *state, const double *u01);
int fhd_cartpole_render_ascii(const double *state, char *buf, size_t cap);

double fhd_acrobot_step(double *state, int action, int *terminated);
void fhd_acrobot_observe(const double *state, float *obs);
void fhd_acrobot_init_state(double *state, const double *u01);
int fhd_acrobot_render_ascii(const double *state, char *buf, size_t cap);

double fhd_mountaincar_step(double *state, int action, int *terminated);
void fhd_mountaincar_observe(const double *state, float *obs);
void fhd_mountaincar_init_state(double *state, const double *u01);
int fhd_mountaincar_render_ascii(const double *state, char *buf, size_t cap);

#ifdef __cplusplus
}
#endif

#endif /* FHD_ENVS_H */
