/* learner.h - the learner front shared by the ABI functions, metrics and checkpoints. */
#ifndef FHD_LEARNER_H
#define FHD_LEARNER_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include "backend.h"
#include "config.h"
#include "dist.h"
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
    void *mpi_module;          /* dlopen handle of the MPI module (config distributed), or NULL */
    fhd__comm comm;            /* config distributed: the ranks (dist.c); ops NULL otherwise */
    int backend_requested;     /* fhd__backend_kind from the config */
    char fallback_reason[512]; /* why "auto" chose the CPU, or "" */

    /* counters */
    uint64_t env_steps;  /* transitions observed (summed over envs) */
    uint64_t episodes;   /* episode ends observed */
    uint64_t act_calls;  /* exploration RNG event counter */
    uint64_t diverged_updates; /* updates refused with FHD_ERR_DIVERGED (not checkpointed) */

    /* n-step accumulators, one ring of up to n entries per env stream (E = num_envs) */
    uint32_t E, n;
    uint64_t ob;       /* bytes of one observation row: S * 4 (float32) or S (uint8) */
    unsigned char *st_obs; /* (E, n, S) observations of the learner's dtype */
    int32_t *st_act;   /* (E, n, D) */
    float *st_rew;     /* (E, n) */
    uint32_t *st_head; /* (E) index of the oldest entry */
    uint32_t *st_len;  /* (E) entries held */
    /* transitions emitted by one observe: at most E * n */
    unsigned char *em_obs, *em_next; /* (E n, S) each, the learner's dtype */
    float *em_ret, *em_disc;         /* (E n), (E n) */
    int32_t *em_act;                            /* (E n, D) */

    /* frame-once replay (image observations, backend frame_add): observations are stored
     * once as frames; the staging holds their ids instead of their bytes */
    int frames;
    uint32_t fk;                      /* frame ids per observation: frame_stack (or 1) */
    uint64_t *st_id;                  /* (E, n, fk) frame ids of each staged obs */
    uint64_t *em_obs_id, *em_next_id; /* (E n, fk) */
    uint64_t *last_frame;             /* (E, fk) frame ids of each env's last next_obs, or NONE;
                                       * after step() the ids of its obs */
    uint64_t *frame_ids;              /* (fk) scratch of fhd__frames_current */
    uint8_t *frame_stored;            /* (E) step(): the env's obs is in the ring already */
    uint8_t *obs_known;               /* (E) 1: last_frame holds the ids of prev_obs (set by
                                       * step, cleared by an ingest of the env and by loads) */

    /* step(): the previous call's observations and actions */
    unsigned char *prev_obs; /* (E, S), the learner's dtype */
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
    const unsigned char **next_rows; /* (E) bootstrap observation of each env's transition */
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

/* Pass a backend failure through: code rc, message "<what>: <the backend's error>". */
int32_t fhd__backend_fail(fhd_learner *L, int32_t rc, const char *what);

/* Return the status of expr when it is not FHD_OK. */
#define FHD__TRY(expr)                                                                         \
    do {                                                                                       \
        int32_t rc_ = (expr);                                                                  \
        if (rc_ != FHD_OK)                                                                     \
            return rc_;                                                                        \
    } while (0)

double fhd__now(void); /* monotonic seconds */
float fhd__epsilon(const fhd__config *cfg, uint64_t env_steps);

/* Backend selection (backend_loader.c). On success sets L->ops (and L->module). */
int32_t fhd__select_backend(fhd_learner *L, fhd_error *err);
void fhd__unload_backend(fhd_learner *L);

/* dist.c: config distributed (else a no-op): load the MPI module, check that every rank has
 * the same config, build and initial parameters (params: the n_params floats every rank
 * initialised), give the backend the communicator. Collective: every rank calls it once, after
 * the backend exists. */
int32_t fhd__dist_attach(fhd_learner *L, const float *params, uint64_t n_params, fhd_error *err);

/* learner_check.c: argument validation; each returns FHD_OK or the status it set with
 * fhd__fail. Row checks skip rows whose `valid` entry is 0 (valid may be NULL). */
int32_t fhd__check_struct(fhd_learner *L, const void *p, uint32_t min_size, const char *fn,
                          const char *what);
int32_t fhd__check_finite(fhd_learner *L, const float *x, uint64_t n, uint32_t cols,
                          const uint8_t *valid, const char *fn, const char *field,
                          const char *rowname);
/* n observation rows of the learner's dtype: finite when float32 (uint8 always passes). */
int32_t fhd__check_obs_rows(fhd_learner *L, const unsigned char *rows, uint64_t n,
                            const uint8_t *valid, const char *fn, const char *field,
                            const char *rowname);
int32_t fhd__check_actions(fhd_learner *L, const int32_t *a, uint64_t n, const uint8_t *valid,
                           const char *fn, const char *field, const char *rowname);
int32_t fhd__check_flags(fhd_learner *L, const uint8_t *f, uint64_t n, const uint8_t *valid,
                         const char *fn, const char *field);
/* The n-step returns rewards `rew` (E) would make stay finite floats (FHD_ERR_NONFINITE naming
 * the env otherwise); envs with valid[e] == 0 are skipped. */
int32_t fhd__check_returns(fhd_learner *L, const float *rew, const uint8_t *valid, const char *fn);
/* The observation pointer of the learner's dtype among float `f` (field fname) and uint8 `u`
 * (field uname): the other must be NULL (FHD_ERR_INVALID_ARGUMENT naming both); neither is
 * FHD_ERR_NULL_POINTER when required, else *out = NULL. */
int32_t fhd__pick_obs(fhd_learner *L, const float *f, const uint8_t *u, int required,
                      const char *fn, const char *fname, const char *uname,
                      const unsigned char **out);

/* A trailing field of an argument struct, or NULL when the caller's struct_size (an older
 * minor's struct) does not reach it. */
#define FHD__ARG_FIELD(p, T, field)                                                             \
    ((p)->struct_size >= offsetof(T, field) + sizeof((p)->field) ? (p)->field : NULL)

/* learner.c */
int32_t fhd__learner_init(const char *json, size_t len, fhd_learner **out, fhd_error *err);
void fhd__learner_destroy(fhd_learner *L);

/* learner_observe.c */
int32_t fhd__learner_act(fhd_learner *L, const fhd_act_args *a);
int32_t fhd__learner_observe(fhd_learner *L, const fhd_transitions *t);
/* Greedy (explore 0) or epsilon-greedy actions (n, D) for n validated rows of obs; q (n, KT)
 * receives the Q-values when not NULL. ids (n, fk), or NULL: the rows' frame ids in the frame
 * ring, which the backend reads instead of the rows where it can. Exploring advances the
 * act-call counter. */
int32_t fhd__choose_actions(fhd_learner *L, uint32_t n, const unsigned char *obs,
                            const uint64_t *ids, int32_t *actions, float *q, int explore);
/* step() with the frame-once replay: every env's obs (E rows) in the ring and last_frame its
 * ids. stored[e] says the ingest left them there (the env's next_obs was this obs); the other
 * envs' obs are added now (the hint reuses or shifts their last frames), so the next ingest
 * finds them (its obs equals the hint). */
int32_t fhd__frames_current(fhd_learner *L, const unsigned char *obs, const uint8_t *stored);
/* No env's last_frame is known to be its prev_obs any more (checkpoint loads). */
void fhd__frames_forget(fhd_learner *L);
/* Validated transitions (E envs) -> n-step accumulators -> replay; envs with valid[e] == 0
 * (valid may be NULL) take no part. next_rows[e] is env e's next observation. known (step's
 * obs = prev_obs): with the frame-once replay an env whose obs_known is set takes its obs ids
 * from last_frame instead of frame_add comparing the bytes again. */
int32_t fhd__ingest(fhd_learner *L, const unsigned char *obs, const int32_t *act, const float *rew,
                    const unsigned char *const *next_rows, const uint8_t *term,
                    const uint8_t *trunc, const uint8_t *valid, int known);

/* learner_train.c */
int32_t fhd__learner_train(fhd_learner *L, uint32_t n, fhd_train_stats *st);
int32_t fhd__learner_train_batch(fhd_learner *L, const fhd_batch *b, fhd_train_stats *st);
int32_t fhd__learner_step(fhd_learner *L, const fhd_step_args *a);
int32_t fhd__learner_tensor_info(fhd_learner *L, uint32_t i, fhd_tensor_info *info);
int32_t fhd__learner_tensor_read(fhd_learner *L, const char *name, float *dst, uint64_t n);
int32_t fhd__learner_tensor_write(fhd_learner *L, const char *name, const float *src, uint64_t n);
int32_t fhd__learner_obs_info(fhd_learner *L, fhd_obs_info *info);

/* metrics.c */
int32_t fhd__learner_metrics(fhd_learner *L, char *buf, size_t cap, size_t *needed);

/* checkpoint.c */
int32_t fhd__checkpoint_save(fhd_learner *L, const char *path, uint32_t flags);
int32_t fhd__checkpoint_load(fhd_learner *L, const char *path, uint32_t flags);

#endif
