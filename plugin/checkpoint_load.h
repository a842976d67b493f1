/* checkpoint_load.h - the state of one checkpoint load, shared by its validation
 * (checkpoint_load.c, steps 1-5) and its application to the learner (checkpoint_apply.c,
 * step 6). */
#ifndef FHD_CHECKPOINT_LOAD_H
#define FHD_CHECKPOINT_LOAD_H

#include <jansson.h>
#include <stdint.h>
#include <sys/stat.h>

#include "checkpoint_io.h"
#include "checkpoint_state.h"
#include "checkpoint_trim.h"
#include "learner.h"

typedef struct load_ctx {
    fhd_learner *L;
    const char *path;
    uint32_t flags;
    int fd;
    struct stat st;
    uint64_t size, hlen, data0; /* file size, header length, file offset of the data */
    char *header;
    json_t *root;
    const json_t *meta;
    fhd__config cfg; /* recorded in the file */
    fhd__layout lo;
    int has_replay, load_replay;
    fhd__ck_catalog cat;
    fhd__crc64 *crc;
    fhd__ck_scalars sc; /* from the file */
    /* streamed value checks */
    int bad_action;
    uint64_t bad_action_at;
    int32_t bad_action_value;
    uint64_t prio_first_zero, prio_nonzero_end, prio_over_at;
    uint64_t prio_max, prio_max_at; /* largest leaf and its slot */
    int prio_over;
    const char *nonfinite; /* first float tensor holding NaN or Inf, and the element */
    uint64_t nonfinite_at;
    unsigned char *fill; /* FHD_CKPT_CHUNK_BYTES: the unused rows of shortened tensors */
    fhd__ck_used mine;   /* the learner's used replay rows before the load */
} load_ctx;

/* fhd__fail with "checkpoint_load: <path>: " before the message. */
int32_t fhd__ck_load_fail(load_ctx *c, int32_t code, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;

/* After validation, before anything changes: what the application needs allocated or read
 * (the priorities at full length, the fill buffer, the learner's own used replay rows).
 * FHD_OK or a status with the learner unchanged. */
int32_t fhd__ck_apply_prepare(load_ctx *c);

/* Write what was read and validated into the learner (step 6). */
int32_t fhd__ck_apply(load_ctx *c);

#endif
