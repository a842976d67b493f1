/*
 * foxhunt_dqn.h - the foxhunt-dqn plugin ABI, major version 1.
 *
 * This header is the whole contract between a host program and libfoxhunt_dqn.so. It is
 * written to be read as the documentation of that contract.
 *
 * Loading
 * -------
 * The library exports exactly one symbol, FHD_ENTRY_SYMBOL ("fhd_get_api_base"):
 *
 *     void *lib = dlopen("libfoxhunt_dqn.so", RTLD_NOW | RTLD_LOCAL);
 *     fhd_get_api_base_fn entry = (fhd_get_api_base_fn)dlsym(lib, FHD_ENTRY_SYMBOL);
 *     const fhd_api_base *base = entry();
 *     fhd_error err = FHD_ERROR_INIT;
 *     const fhd_api_v1 *api = (const fhd_api_v1 *)base->get_api(1, &err);
 *     if (!api) { fprintf(stderr, "%s\n", err.message); ... }
 *
 * Versioning rules
 * ----------------
 * - fhd_api_base is frozen forever: new fields are never added to it.
 * - A major version is a table type (fhd_api_v1). Within one major the table only grows at
 *   its end; every released minor's layout is locked with static_assert(offsetof(...)) in
 *   this header. A host built against minor m may use a library of any minor >= m, and a
 *   library of an older minor as long as it checks FHD_API_HAS(api, member) before calling a
 *   member added later: a member exists only if it lies inside api->struct_size.
 * - Every argument struct begins with `uint32_t struct_size` (set it to sizeof, or use the
 *   FHD_*_INIT macros). The library reads only the fields inside the caller's struct_size and
 *   treats absent trailing fields as zero/NULL; it rejects a struct_size smaller than the
 *   first released version of the struct (FHD_ERR_STRUCT_SIZE). Output structs are written
 *   only up to the caller's struct_size.
 *
 * Threading
 * ---------
 * [thread-safe]   may be called from any thread at any time.
 * [learner]       a learner is used by one thread at a time (the host serialises calls on one
 *                 handle); different learners are fully independent and may be used from
 *                 different threads concurrently.
 * The library does no work in shared-library constructors and starts no threads of its own
 * except those of OpenBLAS (CPU backend) and the CUDA runtime (CUDA backend).
 *
 * Errors
 * ------
 * Every function that can fail returns an int32_t status: FHD_OK (0) or a negative FHD_ERR_*
 * code from FHD_STATUS_MAP below. On failure the learner is left exactly as it was, and
 * last_error(learner) returns a message naming the field and the allowed range. The library
 * never calls exit, abort or assert on anything a host passes in.
 *
 * Shapes (row-major, C order), used in the comments below:
 *   N number of environments / observations in a call, B batch size, S observation size,
 *   D action branches, K_d actions in branch d, KT = sum_d K_d.
 *
 * Observations (minor 1)
 * ----------------------
 * An observation is S values: flat (config obs_dim = S) or an image (config obs_shape
 * [C, H, W], S = C*H*W, row-major, channel first). Its element type is the config's obs_dtype:
 * float32 observations go in the `obs`-style float pointers of minor 0, uint8 observations in
 * the `*_u8` fields that minor 1 appends at the end of each argument struct. Exactly the
 * pointer of the learner's dtype is given; the other one is NULL (FHD_ERR_INVALID_ARGUMENT
 * naming both otherwise). The network sees obs_scale * obs (obs_info reports the scale).
 *
 * Why trailing fields and not new *_u8 functions: one entry point per operation keeps one
 * validation path and one documentation per call; a host built against minor 0 passes a
 * smaller struct_size and is read exactly as before (the fields it lacks count as NULL); and
 * another dtype later is one more trailing field, not four more functions. A host may fill
 * the minor-1 fields only when FHD_API_HAS(api, obs_info): a minor-0 library ignores fields
 * beyond its own struct versions, so it would see its float pointer NULL and refuse the call.
 */
#ifndef FOXHUNT_DQN_H
#define FOXHUNT_DQN_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define FHD_ABI_MAJOR 1
#define FHD_ABI_MINOR 1
#define FHD_ENTRY_SYMBOL "fhd_get_api_base"

#if defined(_WIN32)
#define FHD_EXPORT __declspec(dllexport)
#else
#define FHD_EXPORT __attribute__((visibility("default")))
#endif

/* ---- status codes ----------------------------------------------------------------------- */

/* X(name, value, message): the one table that generates the enum, the names and messages. */
#define FHD_STATUS_MAP(X)                                                                      \
    X(OK, 0, "success")                                                                        \
    X(ERR_INVALID_ARGUMENT, -1, "invalid argument")                                            \
    X(ERR_NULL_POINTER, -2, "a required pointer argument is NULL")                             \
    X(ERR_STRUCT_SIZE, -3, "struct_size is smaller than any version of the struct")            \
    X(ERR_CONFIG_SYNTAX, -4, "the config is not well-formed JSON")                             \
    X(ERR_CONFIG_UNKNOWN_KEY, -5, "the config contains an unknown key")                        \
    X(ERR_CONFIG_TYPE, -6, "a config value has the wrong type")                                \
    X(ERR_CONFIG_RANGE, -7, "a config value is out of its allowed range")                      \
    X(ERR_CONFIG_INCONSISTENT, -8, "config values are inconsistent with each other")           \
    X(ERR_CONFIG_MISSING, -9, "a required config key is missing")                              \
    X(ERR_BACKEND_UNAVAILABLE, -10, "the requested backend is not available on this machine")  \
    X(ERR_OUT_OF_MEMORY, -11, "out of memory")                                                 \
    X(ERR_NOT_IMPLEMENTED, -12, "not implemented")                                             \
    X(ERR_BUFFER_TOO_SMALL, -13, "the caller's buffer is too small")                           \
    X(ERR_SIZE_MISMATCH, -14, "an array size does not match the learner's configuration")     \
    X(ERR_NONFINITE, -15, "an input contains NaN or Inf")                                      \
    X(ERR_ACTION_RANGE, -16, "an action index is out of range")                                \
    X(ERR_NOT_READY, -17, "not enough data in the replay buffer to train")                     \
    X(ERR_IO, -18, "file input/output failed")                                                 \
    X(ERR_CHECKPOINT_CORRUPT, -19, "the checkpoint is corrupt or not a checkpoint")            \
    X(ERR_CHECKPOINT_MISMATCH, -20, "the checkpoint does not match the learner's config")      \
    X(ERR_CHECKPOINT_VERSION, -21, "the checkpoint format version is not supported")           \
    X(ERR_UNSUPPORTED_VERSION, -22, "the requested ABI version is not supported")              \
    X(ERR_NOT_FOUND, -23, "no such item")                                                      \
    X(ERR_DEVICE, -24, "a device (CUDA) call failed")                                          \
    X(ERR_INTERNAL, -25, "internal error")                                                     \
    X(ERR_DIVERGED, -26, "training diverged: an update or the state would be NaN or Inf")

typedef enum fhd_status {
#define FHD__STATUS_ENUM(name, value, msg) FHD_##name = (value),
    FHD_STATUS_MAP(FHD__STATUS_ENUM)
#undef FHD__STATUS_ENUM
        FHD_STATUS_MIN_ = -26
} fhd_status;
/* FHD_ERR_DIVERGED (train, train_batch, step): the update whose loss or gradient norm would be
 * NaN/Inf was not applied; updates before it in the same call were (stats->updates_done), and
 * step still stored its transitions and chose its actions. The CUDA backend, whose updates run
 * queued, skips such an update on the device and reports it (stats->updates_skipped) from the
 * call that first sees it complete, possibly a later one. checkpoint_save returns it for a
 * learner whose state holds NaN/Inf (no file is written). metrics "diverged_updates" counts. */

/* ---- error report filled by init (and by get_api) --------------------------------------- */

#define FHD_ERROR_PATH_MAX 256
#define FHD_ERROR_MESSAGE_MAX 512

typedef struct fhd_error {
    uint32_t struct_size; /* sizeof(fhd_error) */
    int32_t code;         /* FHD_OK or FHD_ERR_* */
    int32_t line;         /* 1-based line of a JSON syntax error, else 0 */
    int32_t column;       /* 1-based column of a JSON syntax error, else 0 */
    char path[FHD_ERROR_PATH_MAX];       /* JSON path of the offending field ("$.hidden[1]"), or "" */
    char message[FHD_ERROR_MESSAGE_MAX]; /* NUL-terminated, human-readable, names the allowed range */
} fhd_error;
#define FHD_ERROR_INIT {sizeof(fhd_error), 0, 0, 0, {0}, {0}}

/* ---- the frozen entry point ------------------------------------------------------------- */

typedef struct fhd_api_base {
    uint32_t struct_size;     /* sizeof(fhd_api_base) as the library built it */
    uint32_t abi_major;       /* the newest ABI major this library provides */
    const char *version;      /* library version, "MAJOR.MINOR.PATCH"; static lifetime */
    /* Returns the function table for `abi_major` (cast it to fhd_api_v1 * for major 1), or
     * NULL when the library does not provide that major; then `err` (may be NULL) receives
     * FHD_ERR_UNSUPPORTED_VERSION and a message naming the majors it does provide.
     * The table has static lifetime. [thread-safe] */
    const void *(*get_api)(uint32_t abi_major, fhd_error *err);
} fhd_api_base;

/* The one exported symbol. Returns a pointer with static lifetime. [thread-safe] */
typedef const fhd_api_base *(*fhd_get_api_base_fn)(void);
FHD_EXPORT const fhd_api_base *fhd_get_api_base(void);

/* ---- argument structs ------------------------------------------------------------------- */

typedef struct fhd_learner fhd_learner; /* opaque; created by init, freed by destroy */

/* act: choose actions for N observations. */
typedef struct fhd_act_args {
    uint32_t struct_size;
    uint32_t num_obs;     /* N >= 1 */
    const float *obs;     /* (N, S), read only during the call */
    int32_t *actions;     /* out (N, D): action index per branch */
    float *q_values;      /* optional out (N, KT): Q_d(s, a) for each branch, concatenated */
    uint32_t explore;     /* 0: greedy; 1: epsilon-greedy with the schedule's current epsilon */
    uint32_t reserved;
    /* minor 1 */
    const uint8_t *obs_u8; /* (N, S) uint8 observations (obs_dtype "uint8"; then obs is NULL) */
} fhd_act_args;
#define FHD_ACT_ARGS_INIT {sizeof(fhd_act_args), 0, NULL, NULL, NULL, 0, 0, NULL}

/* observe: N one-step transitions, one per environment stream (env i is stream i; N must equal
 * the config's num_envs). n-step returns are accumulated per stream inside the learner.
 * Gymnasium semantics: terminated means no bootstrap; truncated bootstraps from next_obs. */
typedef struct fhd_transitions {
    uint32_t struct_size;
    uint32_t num_envs;        /* N */
    const float *obs;         /* (N, S) s_t */
    const int32_t *actions;   /* (N, D) a_t */
    const float *rewards;     /* (N) r_{t+1} */
    const float *next_obs;    /* (N, S) s_{t+1}: the true final observation when an episode ends */
    const uint8_t *terminated; /* (N) 0/1 */
    const uint8_t *truncated;  /* (N) 0/1 */
    /* minor 1 */
    const uint8_t *obs_u8;      /* (N, S) uint8 s_t (obs_dtype "uint8"; then obs is NULL) */
    const uint8_t *next_obs_u8; /* (N, S) uint8 s_{t+1} (then next_obs is NULL) */
    /* optional (N) 0/1: env i takes part only where valid[i] = 1. An invalid env's transition
     * is not stored, its n-step stream is not advanced and its episode counters are not
     * touched (its other inputs are not read). Binds Gymnasium's NEXT_STEP autoreset, where
     * the step after an episode's end carries the reset observation and no transition.
     * NULL: every env is valid. */
    const uint8_t *valid;
} fhd_transitions;
#define FHD_TRANSITIONS_INIT                                                                   \
    {sizeof(fhd_transitions), 0, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL}

/* Statistics of the last update done by a call (all zero if it did none). */
typedef struct fhd_train_stats {
    uint32_t struct_size;
    uint32_t updates_done;   /* updates done by this call */
    uint64_t update_index;   /* total updates of the learner after this call */
    float loss;              /* loss of the last update */
    float td_abs_mean;       /* mean over batch and branches of |Q_d(s,a_d) - y| */
    float q_mean;            /* mean of Q_d(s, a_d) over batch and branches */
    float grad_norm;         /* global L2 norm of the gradient before clipping */
    /* appended after minor 1 (read through struct_size: a host whose struct_size stops before
     * it does not get it; a library that predates it leaves it as the host set it, and refuses
     * the config key `guard`, so a learner with a guard always writes it) */
    uint32_t updates_skipped; /* updates the training guard skipped in this call (config
                               * `guard`: nothing of them was applied); updates_done +
                               * updates_skipped = the updates the call ran */
} fhd_train_stats;
#define FHD_TRAIN_STATS_INIT {sizeof(fhd_train_stats), 0, 0, 0.f, 0.f, 0.f, 0.f, 0}

/* step: the whole agent loop for N environments in one call. The learner remembers the
 * observations and actions of the previous step call. On the first call (or after a call with
 * rewards == NULL) only `obs` is used: actions are chosen and nothing is stored. Otherwise for
 * each env i the transition (prev_obs_i, prev_action_i, rewards[i], next_i, terminated[i],
 * truncated[i]) is stored, where next_i = final_obs[i] if the episode ended (terminated or
 * truncated) and final_obs is not NULL, else obs[i]; then the learner trains on schedule
 * (learning_starts, train_freq, gradient_steps) and chooses actions for `obs` with
 * epsilon-greedy exploration. With vectorised environments that auto-reset, `obs` holds the
 * first observation of the new episode and `final_obs` the last one of the old.
 * With the minor-1 `valid` mask, an env with valid[i] = 0 stores no transition this call (its
 * reward and flags are not read, its n-step stream does not advance); it still gets an action
 * for obs[i], which becomes its previous observation (Gymnasium NEXT_STEP autoreset: pass
 * valid[i] = 0 on the call whose obs[i] is the reset observation). */
typedef struct fhd_step_args {
    uint32_t struct_size;
    uint32_t num_envs;          /* N, equal to config num_envs */
    const float *obs;           /* (N, S) observation to act on */
    const float *rewards;       /* (N) reward of the previous action, or NULL on the first call */
    const uint8_t *terminated;  /* (N) or NULL on the first call */
    const uint8_t *truncated;   /* (N) or NULL on the first call */
    const float *final_obs;     /* optional (N, S): true last observation of ended episodes */
    int32_t *actions;           /* out (N, D) */
    fhd_train_stats *stats;     /* optional out: training done by this call */
    /* minor 1 */
    const uint8_t *obs_u8;       /* (N, S) uint8 observations (then obs is NULL) */
    const uint8_t *final_obs_u8; /* optional (N, S) uint8 final observations (then final_obs NULL) */
    const uint8_t *valid;        /* optional (N) 0/1 (see above); NULL: every env is valid */
} fhd_step_args;
#define FHD_STEP_ARGS_INIT                                                                     \
    {sizeof(fhd_step_args), 0, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL}

/* train_batch: one gradient update on a host-supplied batch (offline data, parity tests). The
 * replay buffer is not touched. Target: y = rewards + discounts * (1 - terminated) * mean_d
 * Q'_d(next_obs, a*_d). Counts as an update for the target-update schedule. */
typedef struct fhd_batch {
    uint32_t struct_size;
    uint32_t batch_size;        /* B, equal to config batch_size */
    const float *obs;           /* (B, S) */
    const int32_t *actions;     /* (B, D) */
    const float *rewards;       /* (B) (n-step) returns R */
    const float *next_obs;      /* (B, S) */
    const uint8_t *terminated;  /* (B) 0/1 */
    const float *discounts;     /* optional (B): bootstrap discount gamma^m; NULL means gamma */
    const float *weights;       /* optional (B): importance weights; NULL means 1 */
    float *td_errors;           /* optional out (B, D): Q_d(s, a_d) - y before the update
                                 * (also of an update the training guard skipped) */
    float *targets;             /* optional out (B): y */
    /* minor 1 */
    const uint8_t *obs_u8;      /* (B, S) uint8 (obs_dtype "uint8"; then obs is NULL) */
    const uint8_t *next_obs_u8; /* (B, S) uint8 (then next_obs is NULL) */
} fhd_batch;
#define FHD_BATCH_INIT                                                                         \
    {sizeof(fhd_batch), 0, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL}

/* Description of one named tensor of the learner's state (see tensor_info). */
typedef struct fhd_tensor_info {
    uint32_t struct_size;
    uint32_t rank;            /* 1, 2, or 4 (convolution weights (out, in, kh, kw)) */
    uint64_t shape[4];
    uint64_t count;           /* number of float elements */
    char name[96];            /* e.g. "online.torso.0.weight" */
} fhd_tensor_info;
#define FHD_TENSOR_INFO_INIT {sizeof(fhd_tensor_info), 0, {0, 0, 0, 0}, 0, {0}}

/* The learner's observations (obs_info, minor 1). */
#define FHD_OBS_DTYPE_FLOAT32 0u
#define FHD_OBS_DTYPE_UINT8 1u
typedef struct fhd_obs_info {
    uint32_t struct_size;
    uint32_t dtype;       /* FHD_OBS_DTYPE_FLOAT32 or _UINT8: which pointers the calls take */
    uint32_t rank;        /* 1 (flat, shape[0] = S) or 3 (image, shape = C, H, W) */
    uint32_t shape[3];
    uint32_t size;        /* S = values per observation */
    uint32_t frame_stack; /* frames stacked along C by the host (1: none) */
    float scale;          /* the network's input is scale * obs */
    uint32_t reserved;
} fhd_obs_info;
#define FHD_OBS_INFO_INIT {sizeof(fhd_obs_info), 0, 0, {0, 0, 0}, 0, 0, 0.f, 0}

/* checkpoint flags */
#define FHD_CKPT_INCLUDE_REPLAY 1u /* save: also write the replay buffer and n-step staging */

/* ---- the v1 function table -------------------------------------------------------------- */

typedef struct fhd_api_v1 {
    uint32_t struct_size; /* sizeof(fhd_api_v1) as the library built it */
    uint32_t abi_major;   /* 1 */
    uint32_t abi_minor;   /* FHD_ABI_MINOR of the library */
    uint32_t reserved;

    /* manifest.json of this library, NUL-terminated, byte-identical to the file shipped
     * beside it. Static lifetime; do not free. [thread-safe] */
    const char *(*manifest)(void);

    /* Name ("FHD_ERR_CONFIG_RANGE") and generic message of a status code; unknown codes give
     * "FHD_UNKNOWN_STATUS". Static lifetime. [thread-safe] */
    const char *(*status_name)(int32_t status);
    const char *(*status_message)(int32_t status);

    /* Create a learner from a JSON config (the schema is in the manifest). `config_json` is
     * read during the call only; `len` is its length in bytes (it need not be NUL-terminated).
     * On success *out receives a new handle owned by the caller (free it with destroy). On
     * failure *out is set to NULL, nothing is allocated, and `err` (may be NULL) receives the
     * code, the JSON path of the offending field (or line/column for syntax errors) and a
     * message with the allowed range. [thread-safe: creates an independent learner]
     * Config `distributed` (data-parallel over MPI, docs/design.md section 10): init and every
     * update (train, train_batch, the training of step) are collective: each rank of the MPI
     * job calls them alike, in the same order, from one thread; the rank and the world come
     * from MPI (started by mpirun or by the host). A mismatch between the ranks (config, build)
     * fails init on every rank; without the MPI module init fails with
     * FHD_ERR_BACKEND_UNAVAILABLE. */
    int32_t (*init)(const char *config_json, size_t len, fhd_learner **out, fhd_error *err);

    /* Free a learner and everything it owns. NULL is a harmless no-op. The handle must not be
     * used afterwards. [learner] */
    void (*destroy)(fhd_learner *learner);

    /* Message of the last failed call on this learner ("" if none). Owned by the learner,
     * valid until its next call or destroy. NULL learner gives a static message. [learner] */
    const char *(*last_error)(const fhd_learner *learner);

    /* Choose actions. Greedy (explore=0) or epsilon-greedy with the current epsilon of the
     * schedule (explore=1). Buffers are the caller's and are used during the call only.
     * Does not change the learner's counters except the exploration RNG counter. [learner] */
    int32_t (*act)(fhd_learner *learner, const fhd_act_args *args);

    /* Store N transitions (one per env stream) through the n-step accumulator into replay.
     * Does not train. Every observation and reward is checked for NaN/Inf and every action
     * for its range before anything is stored. [learner] */
    int32_t (*observe)(fhd_learner *learner, const fhd_transitions *transitions);

    /* Run `num_updates` (<= 1,000,000) gradient updates sampled from replay, now:
     * learning_starts and train_freq only schedule the training done by step().
     * FHD_ERR_NOT_READY if the replay holds fewer than batch_size transitions. `stats` may be
     * NULL. On an asynchronous backend (CUDA) the call returns once the updates are queued and
     * the loss/td/q/grad_norm statistics are those of the latest completed update
     * (metrics' "stats_update" says which). [learner] */
    int32_t (*train)(fhd_learner *learner, uint32_t num_updates, fhd_train_stats *stats);

    /* One update on the host-supplied batch (see fhd_batch). `stats` may be NULL. [learner] */
    int32_t (*train_batch)(fhd_learner *learner, const fhd_batch *batch, fhd_train_stats *stats);

    /* Ingest, train on schedule, act (see fhd_step_args). [learner] */
    int32_t (*step)(fhd_learner *learner, const fhd_step_args *args);

    /* Metrics as one JSON object written into buf (NUL-terminated). PKCS#11-style: if buf is
     * NULL or cap is too small, *needed (must not be NULL) receives a size that is enough
     * for a following call (the text's size including the NUL, plus room for values that
     * change between the two calls, such as uptime), and FHD_ERR_BUFFER_TOO_SMALL is returned
     * when buf is not NULL. On success *needed is the exact size written. [learner] */
    int32_t (*metrics)(fhd_learner *learner, char *buf, size_t cap, size_t *needed);

    /* Write a checkpoint (safetensors) atomically: a temporary file in the same directory,
     * fsynced, renamed over `path`, directory fsynced. flags: FHD_CKPT_*. [learner] */
    int32_t (*checkpoint_save)(fhd_learner *learner, const char *path, uint32_t flags);

    /* Load a checkpoint into this learner. Everything is validated before the learner is
     * touched; on failure the learner is unchanged. The learner's architecture must match
     * the checkpoint's; resumable hyperparameters (manifest "resume_overridable") keep the
     * values of the learner's own config. flags: FHD_CKPT_INCLUDE_REPLAY restores the replay,
     * n-step staging and step() state too (exact resume; the file must contain them);
     * without it those are left empty, as in a new learner, and the next step() call passes
     * rewards = NULL. [learner] */
    int32_t (*checkpoint_load)(fhd_learner *learner, const char *path, uint32_t flags);

    /* Introspection of named state tensors: online.*, target.*, grad.* (the gradient of the
     * last update after clipping, as Adam used it), adam.m.*, adam.v.*, sn.* (spectral-norm
     * u/v). `index` from 0; FHD_ERR_NOT_FOUND past the end. [learner] */
    int32_t (*tensor_info)(fhd_learner *learner, uint32_t index, fhd_tensor_info *info);

    /* Copy tensor `name` (count floats) into `dst` (caller's). [learner] */
    int32_t (*tensor_read)(fhd_learner *learner, const char *name, float *dst, uint64_t count);

    /* Overwrite tensor `name` from `src` (online.*, target.*, sn.* only; checked finite).
     * For warm starts and tests. [learner] */
    int32_t (*tensor_write)(fhd_learner *learner, const char *name, const float *src,
                            uint64_t count);

    /* ---- minor 1 ---- */

    /* The learner's observation dtype, shape and scale (see fhd_obs_info). Its presence
     * (FHD_API_HAS(api, obs_info)) is also what says that the library reads the minor-1
     * trailing fields of the argument structs. [learner] */
    int32_t (*obs_info)(fhd_learner *learner, fhd_obs_info *info);
} fhd_api_v1;

/* True when table `api` (any minor) contains `member`. */
#define FHD_API_HAS(api, member)                                                               \
    ((api) != NULL && (api)->struct_size >= offsetof(fhd_api_v1, member) + sizeof((api)->member))

/* Layout locks for minor 0: these offsets never change within major 1. */
#if defined(__cplusplus)
#define FHD__STATIC_ASSERT static_assert
#else
#define FHD__STATIC_ASSERT _Static_assert
#endif
FHD__STATIC_ASSERT(offsetof(fhd_api_base, get_api) == 16, "fhd_api_base is frozen");
FHD__STATIC_ASSERT(offsetof(fhd_api_v1, manifest) == 16, "fhd_api_v1 minor 0 layout");
FHD__STATIC_ASSERT(offsetof(fhd_api_v1, init) == 40, "fhd_api_v1 minor 0 layout");
FHD__STATIC_ASSERT(offsetof(fhd_api_v1, tensor_write) == 144, "fhd_api_v1 minor 0 layout");
/* minor 0's table ended at 152 bytes: the first minor-1 member sits there (locked below) */
FHD__STATIC_ASSERT(sizeof(fhd_error) == 784, "fhd_error v1 size");
FHD__STATIC_ASSERT(offsetof(fhd_step_args, stats) == 56, "fhd_step_args v1 layout");
FHD__STATIC_ASSERT(offsetof(fhd_batch, targets) == 72, "fhd_batch v1 layout");
FHD__STATIC_ASSERT(offsetof(fhd_act_args, reserved) == 36, "fhd_act_args v1 layout");
FHD__STATIC_ASSERT(offsetof(fhd_transitions, truncated) == 48, "fhd_transitions v1 layout");

/* Layout locks for minor 1: the appended members and fields, and the new struct. */
FHD__STATIC_ASSERT(offsetof(fhd_api_v1, obs_info) == 152, "fhd_api_v1 minor 1 layout");
FHD__STATIC_ASSERT(sizeof(fhd_api_v1) == 160, "fhd_api_v1 minor 1 size");
FHD__STATIC_ASSERT(offsetof(fhd_act_args, obs_u8) == 40, "fhd_act_args minor 1 layout");
FHD__STATIC_ASSERT(sizeof(fhd_act_args) == 48, "fhd_act_args minor 1 size");
FHD__STATIC_ASSERT(offsetof(fhd_transitions, obs_u8) == 56, "fhd_transitions minor 1 layout");
FHD__STATIC_ASSERT(offsetof(fhd_transitions, valid) == 72, "fhd_transitions minor 1 layout");
FHD__STATIC_ASSERT(sizeof(fhd_transitions) == 80, "fhd_transitions minor 1 size");
FHD__STATIC_ASSERT(offsetof(fhd_step_args, obs_u8) == 64, "fhd_step_args minor 1 layout");
FHD__STATIC_ASSERT(offsetof(fhd_step_args, valid) == 80, "fhd_step_args minor 1 layout");
FHD__STATIC_ASSERT(sizeof(fhd_step_args) == 88, "fhd_step_args minor 1 size");
FHD__STATIC_ASSERT(offsetof(fhd_batch, obs_u8) == 80, "fhd_batch minor 1 layout");
FHD__STATIC_ASSERT(sizeof(fhd_batch) == 96, "fhd_batch minor 1 size");
FHD__STATIC_ASSERT(sizeof(fhd_obs_info) == 40, "fhd_obs_info minor 1 size");

/* Appended after minor 1: fhd_train_stats.updates_skipped (the training guard). */
FHD__STATIC_ASSERT(offsetof(fhd_train_stats, updates_skipped) == 32,
                   "fhd_train_stats updates_skipped layout");
FHD__STATIC_ASSERT(sizeof(fhd_train_stats) == 40, "fhd_train_stats size");

/* Sizes of the minor-0 argument structs: the smallest struct_size the library accepts. */
#define FHD_ACT_ARGS_SIZE_V1_0 40u
#define FHD_TRANSITIONS_SIZE_V1_0 56u
#define FHD_STEP_ARGS_SIZE_V1_0 64u
#define FHD_BATCH_SIZE_V1_0 80u
#define FHD_API_V1_SIZE_MINOR_0 152u
/* fhd_train_stats up to grad_norm (minor 0 and 1), still accepted */
#define FHD_TRAIN_STATS_SIZE_V1_1 32u

#ifdef __cplusplus
}
#endif
#endif /* FOXHUNT_DQN_H */
