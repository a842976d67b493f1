/* backend.h - the internal backend vtable (CPU reference, CUDA module).
 *
 * The learner front (learner.c) owns the config, the counters of env steps and episodes, the
 * n-step accumulators, the schedule, input validation, exploration, metrics and checkpoint
 * files. A backend owns the numbers: parameters (online + target), gradients, Adam moments,
 * spectral-norm vectors, the replay storage and its sum tree, and the update counter (the
 * CUDA backend decides target updates and beta on the device from it).
 *
 * Every backend computes exactly the math of docs/design.md section 4; plugin/cpu is the readable
 * reference and the oracle of the CUDA backend's tests. All functions return FHD_OK or a
 * negative FHD_ERR_* status and then leave a message in error(). A backend is used by one
 * thread at a time.
 */
#ifndef FHD_BACKEND_H
#define FHD_BACKEND_H

#include <stddef.h>
#include <stdint.h>

#include "config.h"
#include "foxhunt_dqn.h"
#include "layout.h"

#define FHD_BACKEND_OPS_VERSION 4u

typedef struct fhd__backend fhd__backend; /* opaque, one per learner */
struct fhd__comm;                         /* plugin/dist.h */

/* A batch with every default resolved by the front (no NULL inputs). */
typedef struct fhd__host_batch {
    uint32_t B;
    const float *obs;       /* (B, S) */
    const int32_t *actions; /* (B, D) */
    const float *rewards;   /* (B) n-step return R */
    const float *next_obs;  /* (B, S) */
    const float *disc;      /* (B) gamma^m * (1 - terminated) */
    const float *weights;   /* (B) importance weights */
    float *td;              /* optional out (B, D) */
    float *y;               /* optional out (B) */
    /* obs_dtype "uint8" (then obs and next_obs are NULL): rows of S bytes */
    const uint8_t *obs_u8;      /* (B, S) */
    const uint8_t *next_obs_u8; /* (B, S) */
} fhd__host_batch;

/* State that is not a float tensor of the layout. */
typedef struct fhd__backend_scalars {
    uint64_t updates;        /* gradient updates done = Adam step count */
    uint64_t replay_pos;     /* next ring slot to write */
    uint64_t replay_size;    /* filled slots, <= capacity */
    uint64_t max_priority_q; /* running max of quantised priorities (new transitions get it) */
    uint64_t skipped;        /* updates the training guard skipped; the replay-sampling counter
                              * (and beta's) is updates + skipped, so a skipped update's batch is
                              * not drawn again (docs/design.md section 4, the training guard) */
} fhd__backend_scalars;

/* Latest completed update's statistics (on CUDA: the latest snapshot copied back). */
typedef struct fhd__update_stats {
    uint64_t update_index;   /* the update these values belong to (0: none yet) */
    float loss, td_abs_mean, q_mean, grad_norm, beta;
    /* the training guard: updates skipped so far, and the latest skipped one (0: none): its
     * number (updates + skipped when it ran, 1-based), loss and gradient norm (NaN: the loss
     * failed, so the gradient was not computed) */
    uint64_t skipped, skip_update;
    float skip_loss, skip_grad_norm;
    /* config detailed_metrics, of the same update as loss (docs/design.md section 4, Metrics):
     * q_delta (NaN without double DQN), the gradient norm of each layer before clipping (conv
     * layers, torso layers, head: W and b together; n_layers of them), and per branch d the
     * norm of the head's weight rows of its actions (before the update) and of their gradient */
    float q_delta;
    float entropy; /* the diversity term's mean entropy (config diversity_coef > 0) */
    uint32_t n_layers;
    float layer_grad_norm[FHD_MAX_CONV_LAYERS + FHD_MAX_HIDDEN_LAYERS + 1];
    float head_weight_norm[FHD_MAX_BRANCHES], head_grad_norm[FHD_MAX_BRANCHES];
} fhd__update_stats;

/* Replay and auxiliary state kinds for read/write (checkpoints, tests). Element types:
 * float unless noted. Tensor buffers of layout.h (fhd__buf_kind) come first. */
typedef enum {
    FHD_STATE_PARAMS = FHD_BUF_PARAMS,
    FHD_STATE_GRAD = FHD_BUF_GRAD,
    FHD_STATE_ADAM_M = FHD_BUF_ADAM_M,
    FHD_STATE_ADAM_V = FHD_BUF_ADAM_V,
    FHD_STATE_SN = FHD_BUF_SN,
    FHD_STATE_MASK = FHD_BUF_MASK, /* (P) pruning masks, 0 or 1 (layout.h) */
    FHD_STATE_REPLAY_OBS = 16,  /* (capacity, S) */
    FHD_STATE_REPLAY_NEXT_OBS,  /* (capacity, S) */
    FHD_STATE_REPLAY_ACTIONS,   /* (capacity, D) int32 */
    FHD_STATE_REPLAY_RETURNS,   /* (capacity) */
    FHD_STATE_REPLAY_DISC,      /* (capacity) */
    FHD_STATE_REPLAY_PRIORITY,  /* (capacity) uint64 quantised leaf priorities; write rebuilds the tree
                                 * and leaves the running maximum (set_scalars' max_priority_q,
                                 * which a checkpoint restores beside them) as it was */
    FHD_STATE_LAST_INDICES,     /* (B) uint32 replay slots sampled by the last train update (read only) */
    FHD_STATE_LAST_WEIGHTS,     /* (B) IS weights of the last train update (read only) */
    FHD_STATE_REPLAY_OBS_U8,      /* (capacity, S) uint8, obs_dtype "uint8" */
    FHD_STATE_REPLAY_NEXT_OBS_U8, /* (capacity, S) uint8, obs_dtype "uint8" */
    /* the frame-once replay (image observations, frame_add below): */
    FHD_STATE_FRAMES,             /* (M, S / k) float32 frames, M = fhd__config_frame_capacity,
                                   * k = frame_stack */
    FHD_STATE_FRAMES_U8,          /* (M, S / k) uint8 frames */
    FHD_STATE_FRAME_REFS,         /* (M) uint64: number of the last transition using the frame */
    FHD_STATE_REPLAY_OBS_ID,      /* (capacity, k) uint64 frame ids of each slot's obs */
    FHD_STATE_REPLAY_NEXT_ID,     /* (capacity, k) uint64 frame ids of each slot's next_obs */
    FHD_STATE_FRAME_COUNTERS,     /* (3) uint64: frames added, transitions added, first live
                                   * transition number */
} fhd__state_kind;

typedef struct fhd__backend_ops {
    uint32_t version; /* FHD_BACKEND_OPS_VERSION */
    const char *name; /* "cpu", "cuda" */

    /* Create from a validated config. params: 2P floats (online, target), sn: 2*sn_size
     * floats (may be NULL when sn_size is 0). On failure *out is NULL and msg holds why. */
    int32_t (*create)(const fhd__config *cfg, const fhd__layout *lo, const float *params,
                      const float *sn, fhd__backend **out, char *msg, size_t msg_cap);
    void (*destroy)(fhd__backend *b); /* NULL-safe */
    const char *(*error)(const fhd__backend *b); /* message of the last failed call */
    const char *(*device_name)(const fhd__backend *b); /* static or owned by b */

    /* Greedy evaluation forward (stored spectral-norm vectors, no power iteration).
     * obs (n, S) -> q (n, KT) (may be NULL), greedy (n, D) argmax per branch (first max). */
    int32_t (*q_values)(fhd__backend *b, uint32_t n, const float *obs, float *q, int32_t *greedy);

    /* Append n complete (n-step) transitions to the replay ring with the running max
     * priority. Inputs validated by the front. */
    int32_t (*replay_add)(fhd__backend *b, uint32_t n, const float *obs, const int32_t *actions,
                          const float *returns, const float *next_obs, const float *disc);

    /* num_updates updates, each: sample B from replay (stratified PER or uniform, RNG stream
     * SAMPLE with n = update index), update, priority update. stats (may be NULL): last one. */
    int32_t (*train)(fhd__backend *b, uint32_t num_updates, fhd_train_stats *stats);

    /* One update on a host batch (no replay, no priorities). */
    int32_t (*train_batch)(fhd__backend *b, const fhd__host_batch *batch, fhd_train_stats *stats);

    /* Copy count elements starting at element offset of a state kind out of / into the
     * backend. write() of params/sn/replay leaves derived state consistent. */
    int32_t (*read)(fhd__backend *b, int kind, uint64_t offset, uint64_t count, void *dst);
    int32_t (*write)(fhd__backend *b, int kind, uint64_t offset, uint64_t count, const void *src);
    int32_t (*get_scalars)(fhd__backend *b, fhd__backend_scalars *out);
    int32_t (*set_scalars)(fhd__backend *b, const fhd__backend_scalars *in);

    /* Latest completed update statistics; never blocks the training pipeline. */
    int32_t (*latest_stats)(fhd__backend *b, fhd__update_stats *out);

    /* (optional) Check internal invariants (sum tree sums, ring position, running max
     * priority); FHD_OK or FHD_ERR_INTERNAL with the first violation in msg. For tests. */
    int32_t (*check_invariants)(fhd__backend *b, char *msg, size_t msg_cap);

    /* (optional; NULL for synchronous backends) Wait until every queued update is done, so
     * get_scalars and latest_stats are exact. Never used in the training loop: checkpoints
     * call it to take a consistent snapshot. */
    int32_t (*finish)(fhd__backend *b);

    /* (optional; NULL when the backend adds nothing) Facts of the backend for the metrics, as
     * one JSON object whose keys metrics() adds to its own, replacing a key of the same name
     * (CUDA: "plan", its decisions about the update; "autotune"; "updates_per_second", the
     * rate the device executed, from its timestamps of completed updates). Writes at most cap
     * bytes, NUL-terminated, and returns the length of the whole text (as snprintf: a larger
     * buffer is needed when it is >= cap), or a negative status. Never waits for the device. */
    int32_t (*describe)(fhd__backend *b, char *buf, size_t cap);
    /* (optional; NULL: float32 observations only, and the front refuses obs_dtype "uint8"
     * for this backend) q_values and replay_add for uint8 observation rows of S bytes; the
     * network sees obs_scale * obs. train_batch then reads the host batch's obs_u8 and
     * next_obs_u8. */
    int32_t (*q_values_u8)(fhd__backend *b, uint32_t n, const uint8_t *obs, float *q,
                           int32_t *greedy);
    int32_t (*replay_add_u8)(fhd__backend *b, uint32_t n, const uint8_t *obs,
                             const int32_t *actions, const float *returns,
                             const uint8_t *next_obs, const float *disc);

    /* (optional; NULL: no frame-once replay, and the front refuses image observations for
     * this backend) The frame-once replay of configs with obs_shape: an observation is k =
     * frame_stack frames (channel-first: frame j is channels [j C/k, (j+1) C/k)), each frame
     * stored once with a 64-bit id, and a transition refers to its obs and next_obs by their
     * k ids. frame_add stores one observation row (the learner's dtype) and gives its k ids in
     * ids; `hint` (k ids, or NULL) is a related observation still stored: when the row equals
     * it, its ids are reused (an env's next_obs that becomes its next obs); when the row's
     * first k-1 frames are the hint's last k-1 (a stack shifted by one frame), only the newest
     * frame is stored; equal consecutive frames of one row (a stack padded at an episode's
     * start) are stored once. replay_add_ids appends n transitions by ids ((n, k) each) with
     * the running max priority. A transition whose frame the ring has overwritten is never
     * sampled (see cpu_replay_frames.c). */
    int32_t (*frame_add)(fhd__backend *b, const void *row, const uint64_t *hint, uint64_t *ids);
    int32_t (*replay_add_ids)(fhd__backend *b, uint32_t n, const uint64_t *obs_ids,
                              const int32_t *actions, const float *returns,
                              const uint64_t *next_ids, const float *disc);

    /* (optional; NULL: no data-parallel training, config distributed is refused) Train with
     * the ranks of `comm` (plugin/dist.h, which outlives the backend): each update's gradient
     * is averaged over the ranks before clipping and Adam, each rank's batch is its share of
     * one draw of world * batch_size, and every checksum_interval updates the parameters'
     * checksums are compared (docs/design.md section 10). Called once, before any update. */
    int32_t (*set_comm)(fhd__backend *b, const struct fhd__comm *comm);

    /* (optional; NULL: step() acts on the host's rows) q_values of n observations already in
     * the frame-once replay's ring, row i the frames ids[i k .. i k + k) (frame_add's ids,
     * still stored): the same results as q_values / q_values_u8 on those rows, without sending
     * them again. FHD_ERR_INVALID_ARGUMENT for an id the ring no longer holds. */
    int32_t (*q_values_frames)(fhd__backend *b, uint32_t n, const uint64_t *ids, float *q,
                               int32_t *greedy);
} fhd__backend_ops;

/* The CPU reference backend (plugin/cpu). */
extern const fhd__backend_ops fhd__cpu_backend_ops;

/* No frame id (frame_add's hint when there is none). */
#define FHD_FRAME_NONE UINT64_MAX

/* The CUDA module exports exactly this symbol (libfoxhunt_dqn_cuda.so). It returns NULL and
 * fills msg when no usable device is present (no driver, no device, wrong ops version). */
#define FHD_CUDA_MODULE_ENTRY "fhd_cuda_module_get_ops"
typedef const fhd__backend_ops *(*fhd__cuda_module_get_ops_fn)(uint32_t ops_version, int device,
                                                              char *msg, size_t msg_cap);

/* Element size in bytes of a state kind. */
static inline size_t fhd__state_elem_size(int kind) {
    if (kind == FHD_STATE_REPLAY_OBS_U8 || kind == FHD_STATE_REPLAY_NEXT_OBS_U8 ||
        kind == FHD_STATE_FRAMES_U8)
        return 1;
    if (kind == FHD_STATE_REPLAY_PRIORITY || kind == FHD_STATE_FRAME_REFS ||
        kind == FHD_STATE_REPLAY_OBS_ID || kind == FHD_STATE_REPLAY_NEXT_ID ||
        kind == FHD_STATE_FRAME_COUNTERS)
        return 8;
    return 4;
}

#endif
