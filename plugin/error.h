/* error.h - status names and messages, and filling a caller's fhd_error (plugin/error.c).
 * The front's layers (api, config, learner, checkpoint) report through these; nothing here
 * depends on a learner. */
#ifndef FHD_ERROR_H
#define FHD_ERROR_H

#include <stdint.h>

#include "foxhunt_dqn.h"

/* Name ("FHD_ERR_CONFIG_RANGE") and generic message of a status; "FHD_UNKNOWN_STATUS" and
 * "unknown status code" for others. Static lifetime. [thread-safe] */
const char *fhd__status_name(int32_t status);
const char *fhd__status_message(int32_t status);

/* Fill an fhd_error (may be NULL) as far as its struct_size allows: code, JSON path ("" when
 * path is NULL), line/column reset to 0, and the formatted message. [thread-safe] */
void fhd__error_set(fhd_error *err, int32_t code, const char *path, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 4, 5)))
#endif
    ;

#endif
