/* learner_check.c - validation of ABI call arguments (learner.c calls these before it changes
 * anything): struct sizes, finiteness, action ranges, 0/1 flags, the observation pointer of the
 * learner's dtype, the per-env valid mask of ABI minor 1, and the n-step returns a reward
 * would make.
 *
 * Row checks take an optional `valid` mask (N): rows with valid[i] == 0 are not read.
 */
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "learner.h"

int32_t fhd__check_struct(fhd_learner *L, const void *p, uint32_t min_size, const char *fn,
                          const char *what) {
    if (!p)
        return fhd__fail(L, FHD_ERR_NULL_POINTER, "%s: `%s` is NULL", fn, what);
    uint32_t sz = *(const uint32_t *)p;
    if (sz < min_size)
        return fhd__fail(L, FHD_ERR_STRUCT_SIZE,
                         "%s: %s.struct_size is %u; at least %u is required", fn, what, sz,
                         min_size);
    return FHD_OK;
}

int32_t fhd__check_finite(fhd_learner *L, const float *x, uint64_t n, uint32_t cols,
                          const uint8_t *valid, const char *fn, const char *field,
                          const char *rowname) {
    for (uint64_t r = 0; r < n; r++) {
        if (valid && !valid[r])
            continue;
        for (uint32_t j = 0; j < cols; j++) {
            const float v = x[r * cols + j];
            if (isfinite(v))
                continue;
            if (cols == 1)
                return fhd__fail(L, FHD_ERR_NONFINITE, "%s: %s[%llu] is %s (%s %llu)", fn, field,
                                 (unsigned long long)r, isnan(v) ? "NaN" : "Inf", rowname,
                                 (unsigned long long)r);
            return fhd__fail(L, FHD_ERR_NONFINITE, "%s: %s[%llu][%u] is %s (%s %llu)", fn, field,
                             (unsigned long long)r, j, isnan(v) ? "NaN" : "Inf", rowname,
                             (unsigned long long)r);
        }
    }
    return FHD_OK;
}

int32_t fhd__check_obs_rows(fhd_learner *L, const unsigned char *rows, uint64_t n,
                            const uint8_t *valid, const char *fn, const char *field,
                            const char *rowname) {
    if (L->cfg.obs_dtype == FHD_OBS_UINT8)
        return FHD_OK; /* every byte is a valid observation value */
    return fhd__check_finite(L, (const float *)(const void *)rows, n, L->lo.S, valid, fn, field,
                             rowname);
}

int32_t fhd__check_actions(fhd_learner *L, const int32_t *a, uint64_t n, const uint8_t *valid,
                           const char *fn, const char *field, const char *rowname) {
    const uint32_t D = L->lo.D;
    for (uint64_t i = 0; i < n; i++) {
        if (valid && !valid[i])
            continue;
        for (uint32_t d = 0; d < D; d++) {
            int32_t v = a[i * D + d];
            if (v < 0 || (uint32_t)v >= L->lo.K[d])
                return fhd__fail(L, FHD_ERR_ACTION_RANGE,
                                 "%s: %s[%llu][%u] = %d is out of range for branch %u; allowed: "
                                 "[0, %u] (%s %llu)",
                                 fn, field, (unsigned long long)i, d, v, d, L->lo.K[d] - 1, rowname,
                                 (unsigned long long)i);
        }
    }
    return FHD_OK;
}

int32_t fhd__check_flags(fhd_learner *L, const uint8_t *f, uint64_t n, const uint8_t *valid,
                         const char *fn, const char *field) {
    for (uint64_t i = 0; i < n; i++)
        if ((!valid || valid[i]) && f[i] > 1)
            return fhd__fail(L, FHD_ERR_INVALID_ARGUMENT,
                             "%s: %s[%llu] = %u; allowed: 0 or 1 (env %llu)", fn, field,
                             (unsigned long long)i, f[i], (unsigned long long)i);
    return FHD_OK;
}

int32_t fhd__pick_obs(fhd_learner *L, const float *f, const uint8_t *u, int required,
                      const char *fn, const char *fname, const char *uname,
                      const unsigned char **out) {
    const int want_u8 = L->cfg.obs_dtype == FHD_OBS_UINT8;
    *out = NULL;
    if (f && u)
        return fhd__fail(L, FHD_ERR_INVALID_ARGUMENT,
                         "%s: both `%s` (float32) and `%s` (uint8) are given; the learner's "
                         "obs_dtype is \"%s\": give `%s` only",
                         fn, fname, uname, want_u8 ? "uint8" : "float32", want_u8 ? uname : fname);
    if (f && want_u8)
        return fhd__fail(L, FHD_ERR_INVALID_ARGUMENT,
                         "%s: `%s` holds float32 observations but the learner's obs_dtype is "
                         "\"uint8\"; pass uint8 observations in `%s` (ABI 1.1)",
                         fn, fname, uname);
    if (u && !want_u8)
        return fhd__fail(L, FHD_ERR_INVALID_ARGUMENT,
                         "%s: `%s` holds uint8 observations but the learner's obs_dtype is "
                         "\"float32\"; pass float32 observations in `%s`, or create the learner "
                         "with obs_dtype \"uint8\"",
                         fn, uname, fname);
    if (!f && !u && required)
        return fhd__fail(L, FHD_ERR_NULL_POINTER, "%s: `%s` is NULL", fn, want_u8 ? uname : fname);
    *out = f ? (const unsigned char *)(const void *)f : u;
    return FHD_OK;
}

/* The n-step returns the next ingest of rewards `rew` (E) can produce must be finite floats:
 * for every env, every pending start j of its ring with the new reward appended,
 * sum_k gamma^(k-j) r_k computed exactly as the accumulator does (same order, in double, then
 * rounded to float). Every return it stores is one of these, checked when its last reward came;
 * checking every pending start also refuses a reward as soon as it overflows, instead of a
 * later, innocent one. |return| <= sum |r| (gamma <= 1) skips the exact check for any sane
 * reward scale. Envs with valid[e] == 0 ingest nothing and are skipped. */
int32_t fhd__check_returns(fhd_learner *L, const float *rew, const uint8_t *valid, const char *fn) {
    const uint32_t n = L->n;
    const double g = L->cfg.gamma;
    for (uint32_t e = 0; e < L->E; e++) {
        if (valid && !valid[e])
            continue;
        const uint32_t len = L->st_len[e], head = L->st_head[e];
        const float *ring = L->st_rew + (size_t)e * n;
        double bound = fabs((double)rew[e]);
        for (uint32_t k = 0; k < len; k++)
            bound += fabs((double)ring[(head + k) % n]);
        if (bound <= 0.5 * (double)FLT_MAX)
            continue;
        for (uint32_t j = 0; j <= len; j++) {
            double ret = 0.0, gk = 1.0;
            for (uint32_t k = j; k <= len; k++) {
                ret += gk * (double)(k < len ? ring[(head + k) % n] : rew[e]);
                gk *= g;
            }
            if (!isfinite((float)ret))
                return fhd__fail(L, FHD_ERR_NONFINITE,
                                 "%s: rewards[%u] = %g makes the %u-step return of env %u "
                                 "(started %u step(s) earlier) %g, beyond the float range "
                                 "(n_step %u, gamma %g); returns are stored as finite floats: "
                                 "scale the rewards of env %u",
                                 fn, e, (double)rew[e], len - j + 1, e, len - j, ret, n, g, e);
        }
    }
    return FHD_OK;
}
