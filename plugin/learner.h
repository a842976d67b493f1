/* learner.h - the learner front shared by the ABI functions, metrics and checkpoints. */
#ifndef FHD_LEARNER_H
#define FHD_LEARNER_H

#include <stdarg.h>
#include <stdint.h>

#include "backend.h"
#include "config.h"
#include "error.h"
#include "foxhunt_dqn.h"
#include "layout.h"

#define FHD_RECENT_EPISODES 100

struct fhd_learner {
    fhd__config cfg;
    fhd__layout lo;
    const fhd__backend_ops *ops;
    fhd__backend *be;
    void *module;              /* dlopen handle of the CUDA module, or NULL */
    int backend_requested;     /* fhd__backend_kind from the config */
    char fallback_reason[512]; /* why "auto" chose the CPU, or "" */

    /* counters */
    uint64_t env_steps;  /* transitions observed (summed over envs) */
    uint64_t episodes;   /* episode ends observed */
    uint64_t act_calls;  /* exploration RNG event counter */
    uint64_t diverged_updates; /* updates refused with FHD_ERR_DIVERGED (not checkpointed) */

    /* n-step accumulators, one ring of up to n entries per env stream (E = num_envs) */
    uint32_t E, n;
    float *st_obs;     /* (E, n, S) */
    int32_t *st_act;   /* (E, n, D) */
    float *st_rew;     /* (E, n) */
    uint32_t *st_head; /* (E) index of the oldest entry */
    uint32_t *st_len;  /* (E) entries held */
    /* transitions emitted by one observe: at most E * n */
    float *em_obs, *em_next, *em_ret, *em_disc; /* (E n, S), (E n, S), (E n), (E n) */
    int32_t *em_act;                            /* (E n, D) */

    /* step(): the previous call's observations and actions */
    float *prev_obs;   /* (E, S) */
    int32_t *prev_act; /* (E, D) */
    int have_prev;

    /* episode returns (for metrics) */
    double *ep_return;  /* (E) running return of the current episode */
    uint64_t *ep_len;   /* (E) */
    double recent[FHD_RECENT_EPISODES];
    uint32_t recent_count, recent_pos;
    double last_episode_return;

    /* scratch */
    int32_t *greedy;   /* (cap_rows, D) */
    const float **next_rows; /* (E) bootstrap observation of each env's transition */
    float *tb_disc, *tb_w; /* (B) */
    uint32_t cap_rows;

    /* timing */
    double created_at, train_seconds;
    uint64_t timed_updates;

    char err[1024];
};

/* Set the learner's last error and return code. */
int32_t fhd__fail(fhd_learner *L, int32_t code, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;

double fhd__now(void); /* monotonic seconds */
float fhd__epsilon(const fhd__config *cfg, uint64_t env_steps);

/* Backend selection (backend_loader.c). On success sets L->ops (and L->module). */
int32_t fhd__select_backend(fhd_learner *L, fhd_error *err);
void fhd__unload_backend(fhd_learner *L);

/* learner.c */
int32_t fhd__learner_init(const char *json, size_t len, fhd_learner **out, fhd_error *err);
void fhd__learner_destroy(fhd_learner *L);
int32_t fhd__learner_act(fhd_learner *L, const fhd_act_args *a);
int32_t fhd__learner_observe(fhd_learner *L, const fhd_transitions *t);
int32_t fhd__learner_train(fhd_learner *L, uint32_t n, fhd_train_stats *st);
int32_t fhd__learner_train_batch(fhd_learner *L, const fhd_batch *b, fhd_train_stats *st);
int32_t fhd__learner_step(fhd_learner *L, const fhd_step_args *a);
int32_t fhd__learner_tensor_info(fhd_learner *L, uint32_t i, fhd_tensor_info *info);
int32_t fhd__learner_tensor_read(fhd_learner *L, const char *name, float *dst, uint64_t n);
int32_t fhd__learner_tensor_write(fhd_learner *L, const char *name, const float *src, uint64_t n);

/* metrics.c */
int32_t fhd__learner_metrics(fhd_learner *L, char *buf, size_t cap, size_t *needed);

/* checkpoint.c */
int32_t fhd__checkpoint_save(fhd_learner *L, const char *path, uint32_t flags);
int32_t fhd__checkpoint_load(fhd_learner *L, const char *path, uint32_t flags);

#endif
