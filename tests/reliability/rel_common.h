/* rel_common.h - pieces shared by the reliability tests: a small config, a deterministic
 * transition stream, and a fingerprint of everything a learner holds that the ABI can see.
 * Include after fhd_test.h. */
#ifndef FHD_REL_COMMON_H
#define FHD_REL_COMMON_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fhd_file.h"
#include "foxhunt_dqn.h"

/* S = 3, actions [2, 3] (D = 2), 2 envs, n-step 2, PER, spectral norm: most code paths. */
#define REL_S 3
#define REL_D 2
#define REL_E 2
#define REL_CONFIG                                                                                 \
    "{\"obs_dim\": 3, \"actions\": [2, 3], \"hidden\": [16, 8], \"dueling\": true, "               \
    "\"spectral_norm\": \"all\", \"batch_size\": 8, \"replay_capacity\": 64, "                     \
    "\"learning_starts\": 0, \"train_freq\": 1, \"num_envs\": 2, \"n_step\": 2, "                  \
    "\"replay\": \"prioritized\", \"target_update_interval\": 5, \"cql_alpha\": 0.1, "             \
    "\"seed\": 11}"

/* A deterministic train_batch batch of n rows (obs, next (n, S), act (n, D), rew (n), term (n)
 * all 0) over buffers the caller owns: b refers to them. */
static inline void rel_batch(fhd_batch *b, int n, float *obs, float *next, int32_t *act,
                             float *rew, uint8_t *term) {
    for (int i = 0; i < n; i++) {
        for (int j = 0; j < REL_S; j++) {
            obs[i * REL_S + j] = 0.1f * (float)(i + j) - 0.2f;
            next[i * REL_S + j] = 0.05f * (float)(i - j);
        }
        act[i * REL_D] = i % 2;
        act[i * REL_D + 1] = i % 3;
        rew[i] = 0.5f * (float)i;
        term[i] = 0;
    }
    fhd_batch z = FHD_BATCH_INIT;
    *b = z;
    b->batch_size = (uint32_t)n;
    b->obs = obs;
    b->actions = act;
    b->rewards = rew;
    b->next_obs = next;
    b->terminated = term;
}

/* One observe call of step `s` of a deterministic toy stream (some episodes end). */
static inline int32_t rel_observe(const fhd_api_v1 *api, fhd_learner *L, int s) {
    float obs[REL_E * REL_S], next[REL_E * REL_S], rew[REL_E];
    int32_t act[REL_E * REL_D];
    uint8_t term[REL_E], trunc[REL_E];
    for (int e = 0; e < REL_E; e++) {
        for (int j = 0; j < REL_S; j++) {
            obs[e * REL_S + j] = 0.1f * (float)((s + 3 * e + j) % 11) - 0.5f;
            next[e * REL_S + j] = 0.1f * (float)((s + 3 * e + j + 1) % 11) - 0.5f;
        }
        act[e * REL_D] = (s + e) % 2;
        act[e * REL_D + 1] = (2 * s + e) % 3;
        rew[e] = (float)((3 * s + e) % 5) - 2.0f;
        term[e] = (s + e) % 9 == 8;
        trunc[e] = !term[e] && (s + e) % 13 == 12;
    }
    fhd_transitions t = {sizeof t, REL_E, obs, act, rew, next, term, trunc, NULL, NULL, NULL};
    return api->observe(L, &t);
}

static inline uint64_t rel_fnv(uint64_t h, const void *p, size_t n) {
    const unsigned char *b = p;
    for (size_t i = 0; i < n; i++)
        h = (h ^ b[i]) * 1099511628211ull;
    return h;
}

/* Metrics with the values that change by themselves (uptime, rate) removed. */
static inline int rel_metrics_stable(const fhd_api_v1 *api, fhd_learner *L, char *buf, size_t cap) {
    size_t need = 0;
    if (api->metrics(L, buf, cap, &need) != FHD_OK)
        return -1;
    static const char *volatile_keys[] = {"\"uptime_seconds\":", "\"updates_per_second\":"};
    for (int k = 0; k < 2; k++) {
        char *p = strstr(buf, volatile_keys[k]);
        if (!p)
            continue;
        p += strlen(volatile_keys[k]);
        char *q = p;
        while (*q && *q != ',' && *q != '}')
            q++;
        memmove(p, q, strlen(q) + 1); /* drop the value */
    }
    return 0;
}

/* FNV-1a of every named tensor (tensor_info/tensor_read) and of the stable metrics:
 * parameters, gradients, Adam moments, spectral-norm vectors, counters, replay size. */
static inline uint64_t rel_fingerprint(const fhd_api_v1 *api, fhd_learner *L) {
    uint64_t h = 1469598103934665603ull;
    fhd_tensor_info ti = FHD_TENSOR_INFO_INIT;
    for (uint32_t i = 0; api->tensor_info(L, i, &ti) == FHD_OK; i++) {
        float *buf = malloc(sizeof(float) * (ti.count ? ti.count : 1));
        if (!buf || api->tensor_read(L, ti.name, buf, ti.count) != FHD_OK) {
            free(buf);
            return 0;
        }
        h = rel_fnv(h, ti.name, strlen(ti.name));
        h = rel_fnv(h, buf, sizeof(float) * ti.count);
        free(buf);
    }
    char m[4096];
    if (rel_metrics_stable(api, L, m, sizeof m) != 0)
        return 0;
    return rel_fnv(h, m, strlen(m));
}


#endif
