/* metrics.c - the learner's metrics as one JSON object (PKCS#11-style size query). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "learner.h"

/* JSON has no NaN or infinity (json_real refuses them): a statistic of a diverged update is
 * reported as null. */
static json_t *real_or_null(double v) {
    return isfinite(v) ? json_real(v) : json_null();
}

/* An array of n floats (null where not finite). */
static json_t *reals(const float *v, uint32_t n) {
    json_t *a = json_array();
    for (uint32_t i = 0; a && i < n; i++)
        if (json_array_append_new(a, real_or_null(v[i])) != 0) {
            json_decref(a);
            return NULL;
        }
    return a;
}

#define FHD__METRICS_SLACK 256

static const char *backend_kind_name(int k) {
    return k == FHD_BACKEND_CUDA ? "cuda" : k == FHD_BACKEND_AUTO ? "auto" : "cpu";
}

int32_t fhd__learner_metrics(fhd_learner *L, char *buf, size_t cap, size_t *needed) {
    if (!needed)
        return fhd__fail(L, FHD_ERR_NULL_POINTER, "metrics: `needed` is NULL");
    fhd__backend_scalars sc;
    fhd__update_stats us;
    memset(&us, 0, sizeof us); /* a backend fills what it has */
    int32_t rc = L->ops->get_scalars(L->be, &sc);
    if (rc == FHD_OK)
        rc = L->ops->latest_stats(L->be, &us);
    if (rc != FHD_OK) /* e.g. a CUDA learner after a device fault */
        return fhd__backend_fail(L, rc, "metrics");
    json_t *o = json_object();
    if (!o)
        return fhd__fail(L, FHD_ERR_OUT_OF_MEMORY, "metrics: out of memory");
    double recent = 0.0;
    for (uint32_t i = 0; i < L->recent_count; i++)
        recent += L->recent[i];
    /* json_object_set_new fails (and drops the key) when the value could not be allocated:
     * report that as out of memory rather than return an object with keys missing */
    int bad = 0;
#define SET(key, value) (bad |= json_object_set_new(o, (key), (value)))
    SET("backend", json_string(L->ops->name));
    SET("backend_requested", json_string(backend_kind_name(L->backend_requested)));
    SET("backend_fallback_reason", json_string(L->fallback_reason));
    SET("device", json_string(L->ops->device_name(L->be)));
    SET("env_steps", json_integer((json_int_t)L->env_steps));
    SET("updates", json_integer((json_int_t)sc.updates));
    SET("episodes", json_integer((json_int_t)L->episodes));
    SET("replay_size", json_integer((json_int_t)sc.replay_size));
    SET("replay_capacity", json_integer((json_int_t)L->cfg.replay_capacity));
    SET("epsilon", real_or_null(fhd__epsilon(&L->cfg, L->env_steps)));
    /* training statistics and the update they belong to */
    SET("stats_update", json_integer((json_int_t)us.update_index));
    SET("loss", real_or_null(us.loss));
    SET("td_abs_mean", real_or_null(us.td_abs_mean));
    SET("q_mean", real_or_null(us.q_mean));
    SET("grad_norm", real_or_null(us.grad_norm));
    SET("diverged_updates", json_integer((json_int_t)L->diverged_updates));
    /* the training guard: its count, and the latest skipped update (0 and nulls: none) */
    SET("skipped_updates", json_integer((json_int_t)us.skipped));
    SET("skip_last_update", json_integer((json_int_t)us.skip_update));
    SET("skip_last_loss", us.skip_update ? real_or_null(us.skip_loss) : json_null());
    SET("skip_last_grad_norm", us.skip_update ? real_or_null(us.skip_grad_norm) : json_null());
    SET("beta", real_or_null(L->cfg.replay == FHD_REPLAY_PRIORITIZED ? us.beta : 0.0));
    if (L->cfg.diversity_coef > 0) /* the diversity term's mean entropy, of stats_update */
        SET("diversity_entropy", us.update_index > 0 ? real_or_null(us.entropy) : json_null());
    if (L->cfg.detailed_metrics) { /* of update stats_update; empty and null before one */
        const int any = us.update_index > 0;
        SET("q_delta", any ? real_or_null(us.q_delta) : json_null());
        const uint32_t nl = us.n_layers < FHD_MAX_CONV_LAYERS + FHD_MAX_HIDDEN_LAYERS + 1
                                ? us.n_layers
                                : FHD_MAX_CONV_LAYERS + FHD_MAX_HIDDEN_LAYERS + 1;
        SET("grad_norm_layers", reals(us.layer_grad_norm, any ? nl : 0));
        SET("head_weight_norms", reals(us.head_weight_norm, any ? L->lo.D : 0));
        SET("head_grad_norms", reals(us.head_grad_norm, any ? L->lo.D : 0));
    }
    SET("updates_per_second",
        real_or_null(L->train_seconds > 0 ? (double)L->timed_updates / L->train_seconds : 0.0));
    SET("episode_return_last", real_or_null(L->last_episode_return));
    SET("episode_return_mean_100", real_or_null(L->recent_count ? recent / L->recent_count : 0.0));
    SET("uptime_seconds", real_or_null(fhd__now() - L->created_at));
#undef SET
    /* the backend's own facts (the CUDA plan, its executed update rate), merged over ours */
    if (!bad && L->ops->describe) {
        char small[1024], *d = small;
        int32_t n = L->ops->describe(L->be, small, sizeof small);
        if (n >= (int32_t)sizeof small && (d = malloc((size_t)n + 1)) != NULL)
            n = L->ops->describe(L->be, d, (size_t)n + 1);
        if (n < 0) { /* a status: the backend failed, not the allocation */
            if (d != small)
                free(d);
            json_decref(o);
            return fhd__backend_fail(L, n, "metrics");
        }
        json_t *extra = d && n >= 0 ? json_loads(d, 0, NULL) : NULL;
        if (d != small)
            free(d);
        bad |= !json_is_object(extra) || json_object_update(o, extra) != 0;
        json_decref(extra);
    }
    /* Not json_dumps: when its buffer cannot grow it leaves an object key out and still
     * returns the text (jansson does not check dump_string for keys). json_dumpb into a buffer
     * measured first cannot lose anything. */
    const size_t flags = JSON_COMPACT | JSON_REAL_PRECISION(9);
    const size_t len = bad ? 0 : json_dumpb(o, NULL, 0, flags);
    char *s = len ? malloc(len + 1) : NULL;
    if (s && json_dumpb(o, s, len, flags) == len) {
        s[len] = '\0';
    } else {
        free(s);
        s = NULL;
    }
    json_decref(o);
    if (!s)
        return fhd__fail(L, FHD_ERR_OUT_OF_MEMORY, "metrics: out of memory");
    /* A size query reports the text's size plus FHD__METRICS_SLACK: between the query and the
     * fetch, values the host does not drive (uptime, an asynchronous backend's newest
     * statistics snapshot) may print longer, and the two-call pattern must still succeed. A
     * successful fetch reports the exact size written. */
    const size_t n = strlen(s) + 1;
    rc = FHD_OK;
    if (buf && cap >= n) {
        memcpy(buf, s, n);
        *needed = n;
    } else {
        *needed = n + FHD__METRICS_SLACK;
        if (buf)
            rc = fhd__fail(L, FHD_ERR_BUFFER_TOO_SMALL,
                           "metrics: the buffer holds %zu bytes; %zu are needed", cap, n);
    }
    free(s);
    return rc;
}
