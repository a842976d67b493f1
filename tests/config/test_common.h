/* test_common.h - checks and helpers shared by the config suite's sources. */
#ifndef FHD_TEST_CONFIG_COMMON_H
#define FHD_TEST_CONFIG_COMMON_H

#include <stddef.h>
#include <stdint.h>

#include "config.h"

/* Record one check: prints "ok   <what>" or "FAIL <what>" and counts it. Returns `ok`. */
int tc_check(int ok, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Whole file as a malloc'd NUL-terminated buffer (*len excludes the NUL), or NULL. */
char *tc_read_file(const char *path, size_t *len);

/* "FHD_ERR_CONFIG_RANGE" for a status code, "?" for an unknown one. */
const char *tc_status_name(int32_t code);

/* Parse NUL-terminated text with fhd__config_parse. `err` may be NULL. */
int32_t tc_parse(const char *text, fhd__config *cfg, fhd_error *err);

/* The manifest checks and the schema checks (test_schema.c). `root` is the source directory of
 * tests/config. */
void tc_manifest_tests(const char *root);
void tc_schema_tests(void);

#endif
