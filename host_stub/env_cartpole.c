/* env_cartpole.c - CartPole-v1 dynamics (Gymnasium's CartPoleEnv, Euler integrator).
 *
 * Every expression keeps Gymnasium's operand order and grouping: the reference computes in
 * float64 left to right, and a different grouping changes the last bit of the state, which
 * compounds over an episode.
 */
/* No fused multiply-adds: the reference rounds every product (GCC would contract in GNU modes
   on FMA targets, clang by default). */
#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif

#include <math.h>

#include "envs.h"

#define CP_PI 3.141592653589793

static const double cp_gravity = 9.8;
static const double cp_masscart = 1.0;
static const double cp_masspole = 0.1;
static const double cp_length = 0.5; /* half the pole's length */
static const double cp_force_mag = 10.0;
static const double cp_tau = 0.02; /* seconds between state updates */
static const double cp_x_threshold = 2.4;

double fhd_cartpole_step(double *state, int action, int *terminated) {
    const double total_mass = cp_masspole + cp_masscart;
    const double polemass_length = cp_masspole * cp_length;
    const double theta_threshold = 12 * 2 * CP_PI / 360;

    double x = state[0], x_dot = state[1], theta = state[2], theta_dot = state[3];
    const double force = action == 1 ? cp_force_mag : -cp_force_mag;
    const double costheta = cos(theta);
    const double sintheta = sin(theta);

    const double temp = (force + polemass_length * (theta_dot * theta_dot) * sintheta) / total_mass;
    const double thetaacc =
        (cp_gravity * sintheta - costheta * temp) /
        (cp_length * (4.0 / 3.0 - cp_masspole * (costheta * costheta) / total_mass));
    const double xacc = temp - polemass_length * thetaacc * costheta / total_mass;

    x = x + cp_tau * x_dot;
    x_dot = x_dot + cp_tau * xacc;
    theta = theta + cp_tau * theta_dot;
    theta_dot = theta_dot + cp_tau * thetaacc;

    state[0] = x;
    state[1] = x_dot;
    state[2] = theta;
    state[3] = theta_dot;

    *terminated = x < -cp_x_threshold || x > cp_x_threshold || theta < -theta_threshold ||
                  theta > theta_threshold;
    return 1.0; /* every step, the terminating one included */
}

void fhd_cartpole_observe(const double *state, float *obs) {
    for (int j = 0; j < 4; j++)
        obs[j] = (float)state[j];
}

void fhd_cartpole_init_state(double *state, const double *u01) {
    /* np_random.uniform(-0.05, 0.05, size=4): low + (high - low) * u */
    const double low = -0.05, high = 0.05;
    for (int j = 0; j < 4; j++)
        state[j] = low + (high - low) * u01[j];
}
