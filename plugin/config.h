/* config.h - the learner's typed configuration, parsed from JSON (schema: manifest.json). */
#ifndef FHD_CONFIG_H
#define FHD_CONFIG_H

#include <stddef.h>
#include <stdint.h>

#include "foxhunt_dqn.h"

#define FHD_MAX_HIDDEN_LAYERS 8
#define FHD_MAX_BRANCHES 64
#define FHD_MAX_CONV_LAYERS 8

/* The value of a string key is the position of its string in the schema's "enum" list of
 * manifest.json; these enums follow the same order (tests/config checks it). */
typedef enum { FHD_BACKEND_CPU = 0, FHD_BACKEND_CUDA = 1, FHD_BACKEND_AUTO = 2 } fhd__backend_kind;
typedef enum { FHD_SN_NONE = 0, FHD_SN_LAST = 1, FHD_SN_ALL = 2 } fhd__sn_mode;
typedef enum { FHD_LOSS_HUBER = 0, FHD_LOSS_MSE = 1 } fhd__loss_kind;
typedef enum { FHD_OPT_ADAM = 0, FHD_OPT_ADAMW = 1 } fhd__opt_kind;
typedef enum { FHD_REPLAY_UNIFORM = 0, FHD_REPLAY_PRIORITIZED = 1 } fhd__replay_kind;
/* bf16: GEMM operands rounded to bfloat16, fp32 accumulation and master state (docs/design.md
 * section 4, "GEMM precision"); the only non-fp32 precision the cpu backend runs */
typedef enum {
    FHD_PREC_FP32 = 0,
    FHD_PREC_TF32_FORWARD = 1,
    FHD_PREC_TF32 = 2,
    FHD_PREC_BF16 = 3
} fhd__precision;
typedef enum { FHD_PRUNE_TORSO = 0, FHD_PRUNE_ALL = 1 } fhd__prune_scope;
typedef enum { FHD_TUNE_OFF = 0, FHD_TUNE_FAST = 1, FHD_TUNE_FULL = 2 } fhd__autotune_mode;

/* Bytes of a path key's value, its NUL included (manifest.json: max_length + 1). */
#define FHD_CONFIG_PATH_MAX 256
typedef enum { FHD_OBS_FLOAT32 = 0, FHD_OBS_UINT8 = 1 } fhd__obs_dtype;
typedef enum { FHD_TORSO_CUSTOM = 0, FHD_TORSO_NATURE = 1 } fhd__torso_kind;

/* One convolution of the "conv" list: out channels, square kernel, stride, zero padding.
 * ReLU follows each; the last one's output is flattened in (C, H, W) order (nn.Flatten). */
typedef struct fhd__conv_spec {
    uint32_t out, kernel, stride, padding;
} fhd__conv_spec;

/* The training guard (config "guard", common/guard.h): on when the key is an object; a bound
 * of 0 is none. A failing update is skipped (docs/design.md section 4). */
typedef struct fhd__guard_spec {
    int on;
    double max_grad_norm, max_loss;
} fhd__guard_spec;

/* Data-parallel training (config "distributed", docs/design.md section 10): on when the key is
 * an object. The rank and the world come from the communication module (MPI); world_size, when
 * given (else 0), is what every rank must find there. */
typedef struct fhd__dist_spec {
    int on;
    uint32_t world_size;        /* ranks */
    uint64_t checksum_interval; /* updates between the cross-rank parameter checksums */
} fhd__dist_spec;

/* Every key of manifest.json's config schema has one field here (same name). */
typedef struct fhd__config {
    /* backend */
    int backend;          /* fhd__backend_kind */
    int device;           /* CUDA device ordinal */
    int matmul_precision; /* fhd__precision */
    int autotune;         /* fhd__autotune_mode: GEMM algorithms on cuda (cpu ignores it) */
    char autotune_cache[FHD_CONFIG_PATH_MAX]; /* autotune cache directory, "auto" or "none" */
    uint64_t seed;

    /* spaces and network */
    uint32_t obs_dim;                       /* S; with obs_shape, C*H*W (derived at parse) */
    uint32_t num_obs_shape;                 /* 0 (flat observations) or 3 */
    uint32_t obs_shape[3];                  /* C, H, W */
    int obs_dtype;                          /* fhd__obs_dtype */
    double obs_scale;                       /* network input = obs_scale * obs; 0 = per dtype */
    uint32_t frame_stack;                   /* frames stacked along C (1 = none) */
    int torso;                              /* fhd__torso_kind; "nature" expands at parse */
    uint32_t num_conv;                      /* length of "conv" */
    fhd__conv_spec conv[FHD_MAX_CONV_LAYERS];
    uint32_t num_branches;                  /* D = length of "actions" */
    uint32_t actions[FHD_MAX_BRANCHES];     /* K_d */
    uint32_t num_hidden;                    /* L = length of "hidden" */
    uint32_t hidden[FHD_MAX_HIDDEN_LAYERS]; /* H_l */
    int dueling;
    int spectral_norm; /* fhd__sn_mode */
    /* gradual magnitude pruning (Zhu & Gupta 2017, docs/design.md section 4; off when
     * prune_sparsity is 0): pruning updates are prune_start, + prune_frequency, ..., prune_end */
    double prune_sparsity;    /* final fraction of the weights in scope that are zero */
    uint64_t prune_start;     /* first pruning update (update numbers count from 1) */
    uint64_t prune_end;       /* last pruning update: the final sparsity is reached here */
    uint64_t prune_frequency; /* updates between pruning updates */
    int prune_scope;          /* fhd__prune_scope: torso (conv + linear torso) or all */
    int prune_global;         /* one threshold over the whole scope, else per weight tensor */

    /* learning */
    int double_dqn;
    double gamma;
    uint32_t n_step;
    int loss; /* fhd__loss_kind */
    double huber_delta;
    double cql_alpha;
    int optimizer; /* fhd__opt_kind */
    double lr;
    double adam_beta1, adam_beta2, adam_eps;
    double weight_decay;
    double max_grad_norm;            /* 0 disables clipping */
    uint64_t target_update_interval; /* updates between target updates */
    double tau;                      /* 1 = hard copy, < 1 = Polyak */
    fhd__guard_spec guard;           /* training guard: skip updates out of bounds */
    int detailed_metrics;            /* per-layer and per-branch norms, q_delta (metrics) */
    double diversity_coef;           /* the loss gains -coef * mean entropy of softmax(Q_d / T) */
    double diversity_temperature;    /* T */

    /* schedule */
    uint32_t batch_size;
    uint64_t learning_starts; /* env steps before training starts */
    uint32_t train_freq;      /* env steps between training rounds */
    uint32_t gradient_steps;  /* updates per training round */
    uint32_t num_envs;

    /* replay */
    uint32_t replay_capacity;
    int replay; /* fhd__replay_kind */
    double per_alpha, per_beta0, per_eps;
    uint64_t per_beta_steps; /* updates over which beta anneals to 1 */

    /* exploration */
    double epsilon_start, epsilon_end;
    uint64_t epsilon_decay_steps; /* env steps */

    /* scale-out */
    fhd__dist_spec distributed;
} fhd__config;

/* Parse `json` (len bytes, need not be NUL-terminated) into `cfg`: the manifest's defaults,
 * then the given keys, then the consistency checks. Returns FHD_OK, or a negative status with
 * `err` (may be NULL; written up to its struct_size) holding the code, the JSON path of the
 * offending field ("" if none), line/column for syntax errors, and a message naming the allowed
 * range. `cfg` is written only on success. [thread-safe] */
int32_t fhd__config_parse(const char *json, size_t len, fhd__config *cfg, fhd_error *err);

/* Serialise `cfg` as a canonical JSON object: every key, sorted, compact, numbers in their
 * shortest exact form, so that parsing the result gives back `cfg` exactly. Returns a malloc'd
 * NUL-terminated string owned by the caller (free), or NULL if out of memory or `cfg` holds a
 * value JSON cannot carry. [thread-safe] */
char *fhd__config_to_json(const fhd__config *cfg);

/* 1 if every key has the same value in `a` and `b` (array entries past their length and
 * struct padding are ignored), else 0. [thread-safe] */
int fhd__config_equal(const fhd__config *a, const fhd__config *b);

/* Name of the first key (schema order) whose value differs between `a` and `b`, or NULL when
 * none does. With include_overridable == 0 the keys of the manifest's "resume_overridable" list
 * are skipped, so a non-NULL result names an architecture field that a checkpoint cannot
 * change. The name has static lifetime. [thread-safe] */
const char *fhd__config_first_difference(const fhd__config *a, const fhd__config *b,
                                         int include_overridable);

/* Derived sizes (of a config whose fields lie in their schema ranges). */
uint32_t fhd__config_total_actions(const fhd__config *cfg); /* KT = sum_d K_d */
/* Floats in one network's parameters: the convolutions' out*in*k*k + out, then over torso and
 * head layers out*in + out, with in_0 = S (or the flattened conv output) and head
 * out = KT + dueling (layout.h). Saturates at UINT64_MAX. */
uint64_t fhd__config_param_count(const fhd__config *cfg);

/* The multiplier applied to observations: obs_scale, or its per-dtype default when 0
 * (1/255 for uint8, 1 for float32). Inline: the CUDA module, which never links the core, uses
 * these three too. */
static inline float fhd__config_obs_scale(const fhd__config *cfg) {
    if (cfg->obs_scale != 0.0)
        return (float)cfg->obs_scale;
    return cfg->obs_dtype == FHD_OBS_UINT8 ? 1.0f / 255.0f : 1.0f;
}
/* Frames of the frame-once replay of image observations (obs_shape): M = capacity +
 * max(capacity / 32, 2 k num_envs (n_step + 1) + 1), k = frame_stack (a frame is 1/k of an
 * observation), room for every live transition's frames
 * and the observations still pending in the n-step staging (cpu_replay_frames.c). */
static inline uint64_t fhd__config_frame_capacity(const fhd__config *cfg) {
    const uint64_t N = cfg->replay_capacity;
    /* frames an observation staged for the n-step return may see added before it is used:
     * at most 2 k per env and call (obs, next_obs of k frames each) over n_step + 1 calls */
    const uint64_t k = cfg->frame_stack ? cfg->frame_stack : 1;
    const uint64_t pending = 2 * k * (uint64_t)cfg->num_envs * (cfg->n_step + 1) + 1;
    return N + (N / 32 > pending ? N / 32 : pending);
}
/* Bytes of one observation row: S * (4 for float32, 1 for uint8). */
static inline uint64_t fhd__config_obs_bytes(const fhd__config *cfg) {
    return (uint64_t)cfg->obs_dim * (cfg->obs_dtype == FHD_OBS_UINT8 ? 1u : 4u);
}
/* Input of convolution i of `cfg` (a valid config with obs_shape): *c, *h, *w; i = 0 is
 * obs_shape, i = num_conv what the MLP torso receives (flattened: c*h*w). Returns 0, or -1 when
 * i > num_conv or a size does not fit (only in configs the parser rejected). */
int fhd__config_conv_in(const fhd__config *cfg, uint32_t i, uint32_t *c, uint32_t *h,
                         uint32_t *w);

/* Names of schema keys known to the parser, NULL-terminated (for the schema test). */
const char *const *fhd__config_keys(void);

/* The manifest embedded at build time (NUL-terminated). */
extern const char fhd__manifest_json[];

#endif
