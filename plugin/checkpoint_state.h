/* checkpoint_state.h - the catalogue of a checkpoint: every tensor a file of a given config
 * holds, its safetensors dtype and shape, its place in the data section, and where its values
 * live in a learner (a backend state kind, or a field of the learner front).
 *
 * The catalogue is a pure function of (config, includes_replay): the writer lays the file out
 * from the learner's config, the reader derives the expected tensors from the config recorded
 * in the file and compares the header against them. Nothing here depends on the backend.
 */
#ifndef FHD_CHECKPOINT_STATE_H
#define FHD_CHECKPOINT_STATE_H

#include <stddef.h>
#include <stdint.h>

#include "learner.h"

#define FHD_CKPT_FORMAT_NAME "foxhunt-dqn"
#define FHD_CKPT_FORMAT_VERSION 1
#define FHD_CKPT_CHECKSUM_ALGORITHM "crc64-xz"
#define FHD_CKPT_CHUNK_BYTES ((size_t)4 << 20) /* streaming granularity */

/* safetensors dtypes used by the format */
typedef enum {
    FHD_CK_F32,
    FHD_CK_F64,
    FHD_CK_I32,
    FHD_CK_U32,
    FHD_CK_U64,
    FHD_CK_U8,
    FHD_CK_DTYPE_COUNT_
} fhd__ck_dtype;

const char *fhd__ck_dtype_name(int dtype); /* "F32", ... */
size_t fhd__ck_dtype_size(int dtype);      /* bytes per element */

/* Values of the learner that are not arrays; the scalar tensors read and write these. */
typedef struct fhd__ck_scalars {
    uint64_t seed;            /* rng.seed */
    uint64_t explore_counter; /* rng.explore_counter = act_calls */
    uint64_t updates;         /* counters.updates = Adam step */
    uint64_t skipped;         /* counters.skipped_updates (configs with a guard; else 0): the
                               * replay-sampling counter is updates + skipped */
    uint64_t env_steps, episodes;
    uint64_t replay_pos, replay_size, max_priority_q;
    uint32_t recent_count, recent_pos;
    double last_return;
    uint8_t have_prev;
} fhd__ck_scalars;

/* Where a tensor's values live in the learner. */
typedef enum {
    FHD_CK_SRC_BACKEND = 0, /* backend state kind `kind`, from element `offset` */
    FHD_CK_SRC_SCALAR,      /* a field of fhd__ck_scalars */
    FHD_CK_SRC_FRONT        /* an array of the learner front */
} fhd__ck_source;

/* Front fields (FHD_CK_SRC_SCALAR and FHD_CK_SRC_FRONT). */
typedef enum {
    FHD_CKF_SEED,
    FHD_CKF_EXPLORE,
    FHD_CKF_UPDATES,
    FHD_CKF_ENV_STEPS,
    FHD_CKF_EPISODES,
    FHD_CKF_RECENT_COUNT,
    FHD_CKF_RECENT_POS,
    FHD_CKF_LAST_RETURN,
    FHD_CKF_REPLAY_POS,
    FHD_CKF_REPLAY_SIZE,
    FHD_CKF_REPLAY_MAXQ,
    FHD_CKF_HAVE_PREV,
    FHD_CKF_SKIPPED,
    /* arrays */
    FHD_CKF_RECENT,
    FHD_CKF_ST_OBS,
    FHD_CKF_ST_ACT,
    FHD_CKF_ST_REW,
    FHD_CKF_ST_HEAD,
    FHD_CKF_ST_LEN,
    FHD_CKF_PREV_OBS,
    FHD_CKF_PREV_ACT,
    FHD_CKF_EP_RETURN,
    FHD_CKF_EP_LEN,
    FHD_CKF_ST_FRAME_ID, /* frame-once replay (image observations) */
    FHD_CKF_LAST_FRAME
} fhd__ck_field;

/* Rows of the replay storage a checkpoint writes (checkpoint_trim.h): all of them, or only
 * the used ones, counted in transition slots or in frame rows. */
typedef enum {
    FHD_CK_ROWS_ALL = 0, /* not shortened */
    FHD_CK_ROWS_SLOTS,   /* (N, ...) per transition slot */
    FHD_CK_ROWS_FRAMES   /* (M, ...) per frame row of the frame-once replay */
} fhd__ck_rows;

typedef struct fhd__ck_tensor {
    char name[96];
    int dtype;     /* fhd__ck_dtype */
    uint32_t rank; /* 0 (scalar) to 3 */
    uint64_t shape[4]; /* rank <= 4 (convolution weights (out, in, kh, kw)) */
    uint64_t count;   /* elements */
    uint64_t bytes;   /* count * dtype size */
    int replay_group; /* 1: written only with FHD_CKPT_INCLUDE_REPLAY */
    int streamed;     /* replay storage: never held whole in memory */
    int rows;         /* fhd__ck_rows: replay storage the file may hold only the used rows of */
    uint64_t full_rows; /* shape[0] of the whole storage (rows != FHD_CK_ROWS_ALL) */
    int source;       /* fhd__ck_source */
    int kind;         /* FHD_CK_SRC_BACKEND: backend state kind */
    uint64_t offset;  /* FHD_CK_SRC_BACKEND: first element in that kind */
    int field;        /* otherwise: fhd__ck_field */
    /* per file */
    uint64_t begin, end; /* data_offsets: bytes from the start of the data section */
    uint64_t crc;        /* CRC-64 of the tensor's bytes */
    int seen;            /* reader: found in the header */
    unsigned char *data; /* reader: the tensor's bytes, for tensors that are not streamed */
} fhd__ck_tensor;

typedef struct fhd__ck_catalog {
    fhd__ck_tensor *t; /* in data order: 8-byte dtypes, then 4-byte, then 1-byte; by name */
    uint32_t n;
    uint64_t data_bytes; /* size of the data section */
} fhd__ck_catalog;

/* Build the catalogue of a checkpoint of `cfg` (layout `lo`) with or without the replay group,
 * the replay storage at its whole size (fhd__ck_catalog_trim shortens it), and assign
 * data_offsets contiguously in data order. Returns FHD_OK or FHD_ERR_OUT_OF_MEMORY. */
int32_t fhd__ck_catalog_build(const fhd__config *cfg, const fhd__layout *lo, int include_replay,
                              fhd__ck_catalog *out);
void fhd__ck_catalog_free(fhd__ck_catalog *c);
fhd__ck_tensor *fhd__ck_catalog_find(const fhd__ck_catalog *c, const char *name);

/* The learner's scalar state (counters, RNG, replay scalars from the backend). */
int32_t fhd__ck_scalars_get(fhd_learner *L, fhd__ck_scalars *out);

/* Address of a front field in L (arrays) or in sc (scalars). */
void *fhd__ck_field_ptr(fhd_learner *L, fhd__ck_scalars *sc, int field);

/* Copy `n` elements of tensor t starting at element `e0` out of the learner into dst
 * (the writer's source). Returns FHD_OK or the backend's status. */
int32_t fhd__ck_read_elems(fhd_learner *L, fhd__ck_scalars *sc, const fhd__ck_tensor *t,
                           uint64_t e0, uint64_t n, void *dst);

/* checkpoint_load.c: validate the file at `path` and apply it to L (arguments checked). */
int32_t fhd__ck_load(fhd_learner *L, const char *path, uint32_t flags);

#endif
