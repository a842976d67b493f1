/* env_mountaincar.c - MountainCar-v0 dynamics (Gymnasium's MountainCarEnv, goal_velocity 0). */
/* No fused multiply-adds: the reference rounds every product (GCC would contract in GNU modes
   on FMA targets, clang by default). */
#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif

#include <math.h>

#include "envs.h"

static const double mc_min_position = -1.2;
static const double mc_max_position = 0.6;
static const double mc_max_speed = 0.07;
static const double mc_goal_position = 0.5;
static const double mc_goal_velocity = 0.0;
static const double mc_force = 0.001;
static const double mc_gravity = 0.0025;

/* np.clip on a scalar: minimum(maximum(x, lo), hi) */
static double mc_clip(double x, double lo, double hi) {
    const double y = x < lo ? lo : x;
    return y > hi ? hi : y;
}

double fhd_mountaincar_step(double *state, int action, int *terminated) {
    double position = state[0], velocity = state[1];

    velocity += (action - 1) * mc_force + cos(3 * position) * (-mc_gravity);
    velocity = mc_clip(velocity, -mc_max_speed, mc_max_speed);
    position += velocity;
    position = mc_clip(position, mc_min_position, mc_max_position);
    if (position == mc_min_position && velocity < 0)
        velocity = 0;

    state[0] = position;
    state[1] = velocity;
    *terminated = position >= mc_goal_position && velocity >= mc_goal_velocity;
    return -1.0;
}

void fhd_mountaincar_observe(const double *state, float *obs) {
    obs[0] = (float)state[0];
    obs[1] = (float)state[1];
}

void fhd_mountaincar_init_state(double *state, const double *u01) {
    /* position ~ np_random.uniform(-0.6, -0.4), velocity 0 */
    const double low = -0.6, high = -0.4;
    state[0] = low + (high - low) * u01[0];
    state[1] = 0.0;
}
