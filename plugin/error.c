/* error.c - status names and messages (generated from FHD_STATUS_MAP) and the fhd_error filler. */
#include <stdarg.h>
#include <stdio.h>

#include "error.h"

const char *fhd__status_name(int32_t status) {
    switch (status) {
#define FHD__STATUS_NAME(name, value, msg)                                                     \
    case value:                                                                                \
        return "FHD_" #name;
        FHD_STATUS_MAP(FHD__STATUS_NAME)
#undef FHD__STATUS_NAME
    default:
        return "FHD_UNKNOWN_STATUS";
    }
}

const char *fhd__status_message(int32_t status) {
    switch (status) {
#define FHD__STATUS_MSG(name, value, msg)                                                      \
    case value:                                                                                \
        return msg;
        FHD_STATUS_MAP(FHD__STATUS_MSG)
#undef FHD__STATUS_MSG
    default:
        return "unknown status code";
    }
}

void fhd__error_set(fhd_error *err, int32_t code, const char *path, const char *fmt, ...) {
    if (!err || err->struct_size < offsetof(fhd_error, code) + sizeof(int32_t))
        return;
    err->code = code;
    if (err->struct_size < offsetof(fhd_error, path) + FHD_ERROR_PATH_MAX)
        return;
    err->line = 0;
    err->column = 0;
    snprintf(err->path, sizeof err->path, "%s", path ? path : "");
    if (err->struct_size < sizeof(fhd_error))
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err->message, sizeof err->message, fmt, ap);
    va_end(ap);
}
