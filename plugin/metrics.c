/* metrics.c - the learner's metrics as one JSON object (PKCS#11-style size query). */
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "learner.h"

static const char *backend_kind_name(int k) {
    return k == FHD_BACKEND_CUDA ? "cuda" : k == FHD_BACKEND_AUTO ? "auto" : "cpu";
}

int32_t fhd__learner_metrics(fhd_learner *L, char *buf, size_t cap, size_t *needed) {
    if (!needed)
        return fhd__fail(L, FHD_ERR_NULL_POINTER, "metrics: `needed` is NULL");
    fhd__backend_scalars sc;
    fhd__update_stats us;
    L->ops->get_scalars(L->be, &sc);
    L->ops->latest_stats(L->be, &us);
    json_t *o = json_object();
    if (!o)
        return fhd__fail(L, FHD_ERR_OUT_OF_MEMORY, "metrics: out of memory");
    double recent = 0.0;
    for (uint32_t i = 0; i < L->recent_count; i++)
        recent += L->recent[i];
    json_object_set_new(o, "backend", json_string(L->ops->name));
    json_object_set_new(o, "backend_requested", json_string(backend_kind_name(L->backend_requested)));
    json_object_set_new(o, "backend_fallback_reason", json_string(L->fallback_reason));
    json_object_set_new(o, "device", json_string(L->ops->device_name(L->be)));
    json_object_set_new(o, "env_steps", json_integer((json_int_t)L->env_steps));
    json_object_set_new(o, "updates", json_integer((json_int_t)sc.updates));
    json_object_set_new(o, "episodes", json_integer((json_int_t)L->episodes));
    json_object_set_new(o, "replay_size", json_integer((json_int_t)sc.replay_size));
    json_object_set_new(o, "replay_capacity", json_integer((json_int_t)L->cfg.replay_capacity));
    json_object_set_new(o, "epsilon", json_real(fhd__epsilon(&L->cfg, L->env_steps)));
    /* training statistics and the update they belong to */
    json_object_set_new(o, "stats_update", json_integer((json_int_t)us.update_index));
    json_object_set_new(o, "loss", json_real(us.loss));
    json_object_set_new(o, "td_abs_mean", json_real(us.td_abs_mean));
    json_object_set_new(o, "q_mean", json_real(us.q_mean));
    json_object_set_new(o, "grad_norm", json_real(us.grad_norm));
    json_object_set_new(o, "beta", json_real(L->cfg.replay == FHD_REPLAY_PRIORITIZED ? us.beta : 0.0));
    json_object_set_new(o, "updates_per_second",
                        json_real(L->train_seconds > 0 ? (double)L->timed_updates / L->train_seconds
                                                       : 0.0));
    json_object_set_new(o, "episode_return_last", json_real(L->last_episode_return));
    json_object_set_new(o, "episode_return_mean_100",
                        json_real(L->recent_count ? recent / L->recent_count : 0.0));
    json_object_set_new(o, "uptime_seconds", json_real(fhd__now() - L->created_at));
    char *s = json_dumps(o, JSON_COMPACT | JSON_REAL_PRECISION(9));
    json_decref(o);
    if (!s)
        return fhd__fail(L, FHD_ERR_OUT_OF_MEMORY, "metrics: out of memory");
    size_t n = strlen(s) + 1;
    *needed = n;
    int32_t rc = FHD_OK;
    if (buf) {
        if (cap < n)
            rc = fhd__fail(L, FHD_ERR_BUFFER_TOO_SMALL,
                           "metrics: the buffer holds %zu bytes; %zu are needed", cap, n);
        else
            memcpy(buf, s, n);
    }
    free(s);
    return rc;
}
