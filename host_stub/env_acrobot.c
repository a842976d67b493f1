/* env_acrobot.c - Acrobot-v1 dynamics (Gymnasium's AcrobotEnv: "book" equations, no torque
 * noise, one classical RK4 step of dt = 0.2 s, then angles wrapped to [-pi, pi] and angular
 * velocities clipped to [-4 pi, 4 pi] and [-9 pi, 9 pi]).
 *
 * Matching Gymnasium to the last bit matters here: the double pendulum amplifies rounding
 * differences over an episode. So every expression keeps the reference's operand order and
 * grouping, and squares written `v**2` in the reference go through pow() as they do there
 * (libm's pow(v, 2) is not always the correctly rounded v * v, and a compiler would fold a
 * literal pow(v, 2.0) into v * v; the exponent is therefore read from a volatile).
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

#define AB_PI 3.141592653589793

static const double ab_dt = 0.2;
static const double ab_l1 = 1.0; /* link lengths */
static const double ab_m1 = 1.0; /* link masses */
static const double ab_m2 = 1.0;
static const double ab_lc1 = 0.5; /* positions of the centres of mass */
static const double ab_lc2 = 0.5;
static const double ab_moi = 1.0; /* moments of inertia of both links */
static const double ab_g = 9.8;
static const double ab_torque[3] = {-1.0, 0.0, +1.0};

static volatile double ab_two = 2.0;

/* x**2 as Python / NumPy evaluate it for a float64 base */
static double ab_sq(double x) {
    return pow(x, ab_two);
}

/* Time derivative of (theta1, theta2, dtheta1, dtheta2) under torque a (Gymnasium's _dsdt). */
static void ab_dsdt(const double *s, double a, double *ds) {
    const double m1 = ab_m1, m2 = ab_m2, l1 = ab_l1, lc1 = ab_lc1, lc2 = ab_lc2;
    const double I1 = ab_moi, I2 = ab_moi, g = ab_g;
    const double theta1 = s[0], theta2 = s[1], dtheta1 = s[2], dtheta2 = s[3];

    /* lc1**2, l1**2, lc2**2 are squares of exact Python floats (0.5, 1.0): exact either way */
    const double d1 =
        m1 * (lc1 * lc1) + m2 * ((l1 * l1) + (lc2 * lc2) + 2 * l1 * lc2 * cos(theta2)) + I1 + I2;
    const double d2 = m2 * ((lc2 * lc2) + l1 * lc2 * cos(theta2)) + I2;
    const double phi2 = m2 * lc2 * g * cos(theta1 + theta2 - AB_PI / 2.0);
    const double phi1 = -m2 * l1 * lc2 * ab_sq(dtheta2) * sin(theta2) -
                        2 * m2 * l1 * lc2 * dtheta2 * dtheta1 * sin(theta2) +
                        (m1 * lc1 + m2 * l1) * g * cos(theta1 - AB_PI / 2) + phi2;
    /* "book" variant */
    const double ddtheta2 =
        (a + d2 / d1 * phi1 - m2 * l1 * lc2 * ab_sq(dtheta1) * sin(theta2) - phi2) /
        (m2 * (lc2 * lc2) + I2 - ab_sq(d2) / d1);
    const double ddtheta1 = -(d2 * ddtheta2 + phi1) / d1;

    ds[0] = dtheta1;
    ds[1] = dtheta2;
    ds[2] = ddtheta1;
    ds[3] = ddtheta2;
}

/* Gymnasium's wrap(): shift x by whole periods until m <= x <= M. */
static double ab_wrap(double x, double m, double M) {
    const double diff = M - m;
    while (x > M)
        x = x - diff;
    while (x < m)
        x = x + diff;
    return x;
}

/* Gymnasium's bound(): min(max(x, m), M) with Python's builtin min/max. */
static double ab_bound(double x, double m, double M) {
    const double lo = (m > x) ? m : x;
    return (M < lo) ? M : lo;
}

double fhd_acrobot_step(double *state, int action, int *terminated) {
    const double a = ab_torque[action];
    /* rk4(derivs, y0, [0, dt]): one step with dt = t[1] - t[0] */
    const double dt = ab_dt - 0;
    const double dt2 = dt / 2.0;
    double y0[4], y[4], k1[4], k2[4], k3[4], k4[4];
    for (int j = 0; j < 4; j++)
        y0[j] = state[j];

    ab_dsdt(y0, a, k1);
    for (int j = 0; j < 4; j++)
        y[j] = y0[j] + dt2 * k1[j];
    ab_dsdt(y, a, k2);
    for (int j = 0; j < 4; j++)
        y[j] = y0[j] + dt2 * k2[j];
    ab_dsdt(y, a, k3);
    for (int j = 0; j < 4; j++)
        y[j] = y0[j] + dt * k3[j];
    ab_dsdt(y, a, k4);
    const double h6 = dt / 6.0;
    double ns[4];
    for (int j = 0; j < 4; j++)
        ns[j] = y0[j] + h6 * (k1[j] + 2 * k2[j] + 2 * k3[j] + k4[j]);

    const double max_vel_1 = 4 * AB_PI, max_vel_2 = 9 * AB_PI;
    state[0] = ab_wrap(ns[0], -AB_PI, AB_PI);
    state[1] = ab_wrap(ns[1], -AB_PI, AB_PI);
    state[2] = ab_bound(ns[2], -max_vel_1, max_vel_1);
    state[3] = ab_bound(ns[3], -max_vel_2, max_vel_2);

    *terminated = -cos(state[0]) - cos(state[1] + state[0]) > 1.0;
    return *terminated ? 0.0 : -1.0;
}

void fhd_acrobot_observe(const double *state, float *obs) {
    obs[0] = (float)cos(state[0]);
    obs[1] = (float)sin(state[0]);
    obs[2] = (float)cos(state[1]);
    obs[3] = (float)sin(state[1]);
    obs[4] = (float)state[2];
    obs[5] = (float)state[3];
}

void fhd_acrobot_init_state(double *state, const double *u01) {
    /* np_random.uniform(-0.1, 0.1, size=4).astype(np.float32): the reset state is float32 */
    const double low = -0.1, high = 0.1;
    for (int j = 0; j < 4; j++)
        state[j] = (double)(float)(low + (high - low) * u01[j]);
}
