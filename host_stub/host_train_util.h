/* host_train_util.h - the pieces `fhd-host train` and `fhd-host eval` share: option values,
 * the learner config of an environment, learner creation, metrics, checkpoints, greedy
 * evaluation, and the run directory's outputs (metrics.jsonl, episodes.csv, the progress
 * line and the learning curve).
 *
 * Every function that can fail prints one line to stderr and returns an FHD_EXIT_* code.
 */
#ifndef FHD_HOST_TRAIN_UTIL_H
#define FHD_HOST_TRAIN_UTIL_H

#include <signal.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include <jansson.h>

#include "envs.h"
#include "host_plugin.h"

/* Seed of the evaluation environments of a run with seed `seed`: distinct from the training
 * environments' seed, and the same for `train`'s final evaluation and `eval --seed seed`. */
#define FHD_HOST_EVAL_SEED_SALT 0x6576616c2d656e76ull /* "eval-env" */
#define FHD_HOST_SEED_MAX 9007199254740991ull         /* 2^53 - 1, the config's seed maximum */

/* ---- command line -------------------------------------------------------------------------- */

/* Parse `text`, the value of option `opt`, as a decimal integer in [lo, hi]. Returns
 * FHD_EXIT_OK, or prints "error: OPT ..." and returns FHD_EXIT_USAGE. */
int fhd_host_parse_u64(const char *opt, const char *text, uint64_t lo, uint64_t hi, uint64_t *out);

/* The environment `id`, or NULL after printing "error: unknown environment ... (known: ...)". */
const fhd_env_spec *fhd_host_find_env(const char *id);

/* ---- the learner ----------------------------------------------------------------------------- */

/* How the learner config of a run is built: configs/<ENV>.json (or `config_path`), then
 * obs_dim and actions from the environment, then the command line's overrides. With a
 * checkpoint's recorded config (fhd_host_checkpoint_config):
 *   recorded_is_base = 1 (eval): the recorded config is the base; when `config_path` is given,
 *     its keys in the manifest's resume_overridable list replace the recorded values;
 *   recorded_is_base = 0 (train --resume): the recorded seed is used unless have_seed. */
typedef struct fhd_host_config_req {
    const fhd_env_spec *env;
    const char *config_path; /* NULL: the environment's default config (see below) */
    const char *plugin_path; /* used to find the default config beside the build */
    int have_seed;
    uint64_t seed;
    const char *backend;       /* NULL: keep the config's */
    uint32_t num_envs;         /* 0: keep the config's */
    const json_t *recorded;    /* a checkpoint's config, or NULL */
    const char *recorded_from; /* the checkpoint's path (for messages) */
    int recorded_is_base;
    const json_t *manifest; /* the plugin's manifest (resume_overridable) */
} fhd_host_config_req;

typedef struct fhd_host_config {
    char path[4096]; /* the file the config came from */
    char *json;      /* the final config text (malloc'd; free with fhd_host_config_free) */
    uint64_t seed;   /* as the learner will see them */
    uint32_t num_envs;
} fhd_host_config;

/* Find the default config of environment `env_id`: configs/<ENV>.json in $FHD_CONFIG_DIR, the
 * working directory, beside fhd-host or the plugin, or one directory above either. Returns 0
 * and the path, or -1 with the first candidate in `out`. */
int fhd_host_default_config(const char *env_id, const char *plugin_path, char *out, size_t cap);

/* Build the config of a run (see fhd_host_config_req). FHD_EXIT_CONFIG on an unreadable file,
 * invalid JSON or a non-object; FHD_EXIT_IO when a recorded config is for other spaces than
 * the environment's. */
int fhd_host_config_build(const fhd_host_config_req *req, fhd_host_config *out);
void fhd_host_config_free(fhd_host_config *c);

/* Create a learner; prints the library's error and returns FHD_EXIT_CONFIG (or
 * FHD_EXIT_FAILURE when the backend is unavailable or memory runs out). */
int fhd_host_learner_create(const fhd_host_plugin *p, const fhd_host_config *c, fhd_learner **out);

/* The learner's metrics, parsed (a new reference), or NULL after printing an error. */
json_t *fhd_host_metrics(const fhd_host_plugin *p, fhd_learner *L);

/* Numeric field of a metrics object (0 when absent). */
double fhd_host_metric(const json_t *m, const char *key);

/* ---- checkpoints ----------------------------------------------------------------------------- */

typedef struct fhd_host_ckpt_state {
    int unsupported; /* the library said FHD_ERR_NOT_IMPLEMENTED; warned once */
    int saved;       /* checkpoints written */
} fhd_host_ckpt_state;

/* Save a checkpoint (with the replay buffer). FHD_ERR_NOT_IMPLEMENTED is a warning printed
 * once; any other failure prints the library's message and returns FHD_EXIT_IO. */
int fhd_host_checkpoint_save(const fhd_host_plugin *p, fhd_learner *L, const char *path,
                             fhd_host_ckpt_state *st);

/* The learner config recorded in checkpoint `path` (safetensors __metadata__.config), or NULL
 * when the file is unreadable or has none (the library then reports what is wrong). */
json_t *fhd_host_checkpoint_config(const char *path);

/* Load a checkpoint; any failure prints the library's message and returns FHD_EXIT_IO. */
int fhd_host_checkpoint_load(const fhd_host_plugin *p, fhd_learner *L, const char *path,
                             uint32_t flags);

/* ---- greedy evaluation ----------------------------------------------------------------------- */

typedef struct fhd_host_eval_result {
    uint32_t episodes;
    double mean, std; /* of the episode returns; std is the population standard deviation */
    double *returns;  /* (episodes), malloc'd; free with fhd_host_eval_free */
    uint32_t *lengths;
    uint64_t env_steps;
    double seconds;
} fhd_host_eval_result;

/* Run `episodes` greedy episodes (act with explore = 0) on a vector env of `env_id` seeded with
 * `env_seed`. Each copy runs a fixed share of the episodes, so short episodes are not
 * over-represented. `render` (may be NULL) receives the ASCII frames of copy 0's first episode.
 * `stop` (may be NULL) is polled: when it becomes non-zero the evaluation ends early with
 * FHD_EXIT_INTERRUPTED. */
int fhd_host_evaluate(const fhd_host_plugin *p, fhd_learner *L, const char *env_id,
                      uint32_t episodes, uint64_t env_seed, FILE *render,
                      volatile const sig_atomic_t *stop, fhd_host_eval_result *out);
void fhd_host_eval_free(fhd_host_eval_result *r);

/* The final line: "eval_return_mean=<x> eval_return_std=<y> episodes=<n>". */
void fhd_host_eval_print(FILE *f, const fhd_host_eval_result *r);

/* ---- the run directory ----------------------------------------------------------------------- */

#define FHD_HOST_RETURN_WINDOW 100 /* episodes of the host's return moving average */

typedef struct fhd_host_runlog {
    char dir[4096];
    FILE *metrics;  /* DIR/metrics.jsonl */
    FILE *episodes; /* DIR/episodes.csv */
    int tty;        /* stdout is a terminal: one \r-updated line */
    int line_open;  /* a \r line is on screen without its newline */
    const char *env_id;
    uint64_t target_steps;
    double t0;        /* monotonic start of the run */
    uint64_t episode; /* episodes recorded (global index of the next one) */
    double window[FHD_HOST_RETURN_WINDOW];
    uint32_t window_n, window_pos;
    double *curve; /* (curve_n, 3): env steps, return moving average, loss */
    size_t curve_n, curve_cap;
    int io_error;
} fhd_host_runlog;

/* Monotonic seconds. */
double fhd_host_now(void);

/* Create DIR (and its parents), open metrics.jsonl and episodes.csv (appended to when
 * `append`, e.g. on resume; truncated otherwise). FHD_EXIT_IO on failure. */
int fhd_host_runlog_open(fhd_host_runlog *r, const char *dir, const char *env_id,
                         uint64_t target_steps, uint64_t first_episode, int append);

/* One finished episode: a row of episodes.csv. */
void fhd_host_runlog_episode(fhd_host_runlog *r, uint32_t env, uint64_t env_steps, double ret,
                             uint64_t length, int terminated, int truncated);

/* One logging interval: the metrics plus "wall_time" as a line of metrics.jsonl, a point of
 * the learning curve, and (without a terminal) a plain progress line. */
void fhd_host_runlog_interval(fhd_host_runlog *r, const json_t *metrics);

/* Refresh the \r progress line (terminal only). */
void fhd_host_runlog_progress(fhd_host_runlog *r, const json_t *metrics);

/* End the progress line (a newline if one is open). */
void fhd_host_runlog_end_line(fhd_host_runlog *r);

/* Write DIR/learning_curve.png with gnuplot (a warning and nothing else when gnuplot is
 * missing or fails). `eval` may be NULL. */
void fhd_host_runlog_plot(fhd_host_runlog *r, const fhd_host_eval_result *eval);

/* Write DIR/eval.json (the final evaluation). */
void fhd_host_runlog_eval(fhd_host_runlog *r, const fhd_host_eval_result *eval, uint64_t seed);

/* Close the files; FHD_EXIT_IO if any write failed. */
int fhd_host_runlog_close(fhd_host_runlog *r);

#endif
