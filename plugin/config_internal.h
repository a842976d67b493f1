/* config_internal.h - what the parts of the config parser share (not installed, not ABI).
 *
 * The parser is split by concern:
 *   config_schema.c  the key table and the schema read from the embedded manifest.json
 *   config_parse.c   the JSON walk: errors with paths, type/range checks, unknown keys, parse
 *   config_check.c   consistency between keys (sizes, limits) and the derived sizes
 *   config_pixels.c  image observations: obs_shape, obs_dtype, the conv list, torso shorthands
 *   config_json.c    canonical serialisation and comparison
 */
#ifndef FHD_CONFIG_INTERNAL_H
#define FHD_CONFIG_INTERNAL_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#include "config.h"

typedef enum {
    ST_INT,
    ST_U32,
    ST_U64,
    ST_BOOL,
    ST_DOUBLE,
    ST_ENUM,
    ST_U32_ARRAY,
    ST_CONV_LIST, /* array of {out, kernel, stride[, padding]} objects (fhd__conv_spec) */
    ST_PATH,      /* a string without enum, max_length bytes at most (FHD_CONFIG_PATH_MAX) */
    ST_GUARD,     /* null or {max_grad_norm, max_loss} (fhd__guard_spec, config_guard.c) */
    ST_DIST       /* null or {world_size, checksum_interval} (fhd__dist_spec, config_dist.c) */
} fhd__cfg_store_kind;

/* S(key, storage) for scalars, A(key, count field, capacity) for arrays of uint32_t,
 * C(key, count field, capacity) for the conv list. The order is the order of config.h; it
 * decides which missing key and which difference is reported first. */
#define CONFIG_KEYS(S, A, C)                                                                       \
    S(backend, ST_ENUM)                                                                            \
    S(device, ST_INT)                                                                              \
    S(matmul_precision, ST_ENUM)                                                                   \
    S(autotune, ST_ENUM)                                                                           \
    S(autotune_cache, ST_PATH)                                                                     \
    S(seed, ST_U64)                                                                                \
    S(obs_dim, ST_U32)                                                                             \
    A(obs_shape, num_obs_shape, 3)                                                                 \
    S(obs_dtype, ST_ENUM)                                                                          \
    S(obs_scale, ST_DOUBLE)                                                                        \
    S(frame_stack, ST_U32)                                                                         \
    S(torso, ST_ENUM)                                                                              \
    C(conv, num_conv, FHD_MAX_CONV_LAYERS)                                                         \
    A(actions, num_branches, FHD_MAX_BRANCHES)                                                     \
    A(hidden, num_hidden, FHD_MAX_HIDDEN_LAYERS)                                                   \
    S(dueling, ST_BOOL)                                                                            \
    S(spectral_norm, ST_ENUM)                                                                      \
    S(prune_sparsity, ST_DOUBLE)                                                                   \
    S(prune_start, ST_U64)                                                                         \
    S(prune_end, ST_U64)                                                                           \
    S(prune_frequency, ST_U64)                                                                     \
    S(prune_scope, ST_ENUM)                                                                        \
    S(prune_global, ST_BOOL)                                                                       \
    S(double_dqn, ST_BOOL)                                                                         \
    S(gamma, ST_DOUBLE)                                                                            \
    S(n_step, ST_U32)                                                                              \
    S(loss, ST_ENUM)                                                                               \
    S(huber_delta, ST_DOUBLE)                                                                      \
    S(cql_alpha, ST_DOUBLE)                                                                        \
    S(optimizer, ST_ENUM)                                                                          \
    S(lr, ST_DOUBLE)                                                                               \
    S(adam_beta1, ST_DOUBLE)                                                                       \
    S(adam_beta2, ST_DOUBLE)                                                                       \
    S(adam_eps, ST_DOUBLE)                                                                         \
    S(weight_decay, ST_DOUBLE)                                                                     \
    S(max_grad_norm, ST_DOUBLE)                                                                    \
    S(target_update_interval, ST_U64)                                                              \
    S(tau, ST_DOUBLE)                                                                              \
    S(guard, ST_GUARD)                                                                             \
    S(detailed_metrics, ST_BOOL)                                                                   \
    S(diversity_coef, ST_DOUBLE)                                                                   \
    S(diversity_temperature, ST_DOUBLE)                                                            \
    S(batch_size, ST_U32)                                                                          \
    S(learning_starts, ST_U64)                                                                     \
    S(train_freq, ST_U32)                                                                          \
    S(gradient_steps, ST_U32)                                                                      \
    S(num_envs, ST_U32)                                                                            \
    S(replay_capacity, ST_U32)                                                                     \
    S(replay, ST_ENUM)                                                                             \
    S(per_alpha, ST_DOUBLE)                                                                        \
    S(per_beta0, ST_DOUBLE)                                                                        \
    S(per_beta_steps, ST_U64)                                                                      \
    S(per_eps, ST_DOUBLE)                                                                          \
    S(epsilon_start, ST_DOUBLE)                                                                    \
    S(epsilon_end, ST_DOUBLE)                                                                      \
    S(epsilon_decay_steps, ST_U64)                                                                 \
    S(distributed, ST_DIST)

typedef struct fhd__cfg_key_spec {
    const char *name;
    fhd__cfg_store_kind kind;
    size_t offset;       /* of the field in fhd__config */
    size_t count_offset; /* arrays: of the uint32_t element count */
    uint32_t capacity;   /* arrays: elements the field holds */
} fhd__cfg_key_spec;

#define INDEX_S(n, k) KEY_##n,
#define INDEX_A(n, c, cap) KEY_##n,
enum { CONFIG_KEYS(INDEX_S, INDEX_A, INDEX_A) NKEYS };

extern const fhd__cfg_key_spec fhd__cfg_specs[NKEYS];

#define FIELD(cfg, k, T) ((T *)((char *)(cfg) + (k)->offset))
#define CFIELD(cfg, k, T) ((const T *)((const char *)(cfg) + (k)->offset))
#define COUNT(cfg, k) (*(uint32_t *)((char *)(cfg) + (k)->count_offset))
#define CCOUNT(cfg, k) (*(const uint32_t *)((const char *)(cfg) + (k)->count_offset))

/* Bounds of an integer or number (a scalar key, the items of an array key, a conv field). */
typedef struct fhd__cfg_num_rule {
    int is_int;
    int has_min, has_max, min_excl, max_excl;
    json_int_t imin, imax; /* is_int */
    double dmin, dmax;
} fhd__cfg_num_rule;

/* The fields of a conv list item, in fhd__conv_spec order. */
#define FHD_CONV_FIELDS 4
extern const char *const fhd__cfg_conv_fields[FHD_CONV_FIELDS]; /* out, kernel, stride, padding */
/* The fields of the guard object, in that order. */
#define FHD_GUARD_FIELDS 2
extern const char *const fhd__cfg_guard_fields[FHD_GUARD_FIELDS]; /* max_grad_norm, max_loss */

/* The fields of the distributed object, in that order. */
#define FHD_DIST_FIELDS 2
extern const char *const fhd__cfg_dist_fields[FHD_DIST_FIELDS]; /* world_size, checksum_interval */

typedef struct fhd__cfg_key_schema {
    const json_t *def;     /* default value, or NULL for a required key */
    int required_unless;   /* required unless this key (index) is given, or -1 */
    const json_t *enums;   /* string keys: array of the allowed strings */
    fhd__cfg_num_rule num; /* integer and number keys, items of array keys */
    size_t min_items, max_items;
    fhd__cfg_num_rule conv[FHD_CONV_FIELDS]; /* conv list: each field's bounds */
    const json_t *conv_def[FHD_CONV_FIELDS]; /* conv list: each field's default or NULL */
    fhd__cfg_num_rule guard[FHD_GUARD_FIELDS]; /* guard: each bound's rule */
    fhd__cfg_num_rule dist[FHD_DIST_FIELDS];   /* distributed: each field's rule */
    json_int_t dist_def[FHD_DIST_FIELDS];      /* distributed: each field's default (0: required) */
} fhd__cfg_key_schema;

typedef struct fhd__cfg_schema {
    json_t *manifest; /* owns everything below */
    fhd__cfg_key_schema keys[NKEYS];
    const json_t *overridable;
    json_int_t total_actions_max, param_count_max, replay_bytes_max, conv_values_max;
} fhd__cfg_schema;

/* config_schema.c */
int32_t fhd__cfg_schema_load(fhd__cfg_schema *s, char *msg, size_t cap);
void fhd__cfg_schema_free(fhd__cfg_schema *s);
void fhd__cfg_describe_rule(const fhd__cfg_num_rule *r, char *buf, size_t cap);
void fhd__cfg_describe_key(const fhd__cfg_schema *s, size_t i, char *buf, size_t cap);
int fhd__cfg_find_key(const char *key);
/* Shortest decimal form of d that reads back exactly (Python's repr), locale-independent. */
void fhd__cfg_format_real(double d, char *buf, size_t cap);
/* snprintf for messages that may be cut at `cap`, which is intended. */
void fhd__cfg_textf(char *buf, size_t cap, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* config_parse.c */
/* Fill the caller's error struct as far as its struct_size reaches: the path, then the text.
 * Returns code. */
int32_t fhd__cfg_fail(fhd_error *err, int32_t code, int line, int column, const char *path,
                      const char *fmt, ...) __attribute__((format(printf, 6, 7)));
int32_t fhd__cfg_check_number(const fhd__cfg_num_rule *r, const json_t *v, const char *path,
                              json_int_t *i, double *d, fhd_error *err);
int32_t fhd__cfg_type_error(fhd_error *err, const char *path, const char *expected, const json_t *v,
                            const char *allowed);
const char *fhd__cfg_json_type_name(const json_t *v);
/* Levenshtein-based suggestion among `names` (n of them), or NULL. */
const char *fhd__cfg_suggest(const char *key, const char *const *names, size_t n);

/* config_check.c: after every given key is stored. given[i]: key i appeared in the text. */
int32_t fhd__cfg_check_consistency(const fhd__cfg_schema *s, fhd__config *c,
                                   const unsigned char *given, fhd_error *err);

/* config_pixels.c */
/* Check and store the conv list value v (key index i). */
int32_t fhd__cfg_store_conv(const fhd__cfg_schema *s, size_t i, const json_t *v, fhd__config *cfg,
                            fhd_error *err);
/* obs_shape/obs_dim exclusivity, torso expansion, conv sizes; sets obs_dim = C*H*W. */
int32_t fhd__cfg_check_pixels(const fhd__cfg_schema *s, fhd__config *c, const unsigned char *given,
                              fhd_error *err);

/* config_guard.c: the guard key's schema entry, description, value, comparison and JSON. */
int fhd__cfg_load_guard(const json_t *entry, fhd__cfg_key_schema *ks, char *msg, size_t cap);
void fhd__cfg_describe_guard(const fhd__cfg_key_schema *ks, char *buf, size_t cap);
int32_t fhd__cfg_store_guard(const fhd__cfg_schema *s, size_t i, const json_t *v,
                             fhd__config *cfg, fhd_error *err);
int fhd__cfg_guard_equal(const fhd__guard_spec *a, const fhd__guard_spec *b);
void fhd__cfg_guard_json(const fhd__guard_spec *g, char *buf, size_t cap);

/* config_dist.c: the distributed key's schema entry, description, value, comparison and JSON. */
int fhd__cfg_load_dist(const json_t *entry, fhd__cfg_key_schema *ks, char *msg, size_t cap);
void fhd__cfg_describe_dist(const fhd__cfg_key_schema *ks, char *buf, size_t cap);
int32_t fhd__cfg_store_dist(const fhd__cfg_schema *s, size_t i, const json_t *v, fhd__config *cfg,
                            fhd_error *err);
int fhd__cfg_dist_equal(const fhd__dist_spec *a, const fhd__dist_spec *b);
void fhd__cfg_dist_json(const fhd__dist_spec *d, char *buf, size_t cap);

#endif
