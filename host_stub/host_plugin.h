/* host_plugin.h - how fhd-host finds, checks and loads the plugin, as real hosts do:
 * read manifest.json beside the library first (name, ABI major, entry symbol), then dlopen,
 * resolve the one entry symbol and negotiate the ABI major it was built against. */
#ifndef FHD_HOST_PLUGIN_H
#define FHD_HOST_PLUGIN_H

#include <stddef.h>

#include <jansson.h>

#include "foxhunt_dqn.h"

/* fhd-host exit codes (documented in README.md and `fhd-host --help`). */
enum {
    FHD_EXIT_OK = 0,
    FHD_EXIT_FAILURE = 1,       /* a runtime error (training, I/O inside the learner...) */
    FHD_EXIT_USAGE = 2,         /* bad command line */
    FHD_EXIT_PLUGIN = 3,        /* plugin or its manifest not found, unreadable or invalid */
    FHD_EXIT_ABI = 4,           /* ABI major/minor or entry symbol mismatch */
    FHD_EXIT_CONFIG = 5,        /* config rejected (unreadable file, invalid JSON or values) */
    FHD_EXIT_ENV = 6,           /* unknown environment */
    FHD_EXIT_IO = 7,            /* output directory or checkpoint file problem */
    FHD_EXIT_INTERRUPTED = 130, /* stopped by Ctrl-C (after saving a checkpoint) */
};

typedef struct fhd_host_plugin {
    char path[4096];          /* the library */
    char manifest_path[4096]; /* manifest.json beside it */
    json_t *manifest;         /* parsed manifest file (owned) */
    void *handle;             /* dlopen handle */
    const fhd_api_base *base;
    const fhd_api_v1 *api;
} fhd_host_plugin;

/* Default plugin path: $FHD_PLUGIN, else libfoxhunt_dqn.so beside the fhd-host executable. */
void fhd_host_default_plugin(char *out, size_t cap);

/* Read and check the manifest beside `path` (no loading). Returns an FHD_EXIT_* code and
 * prints a one-line error to stderr on failure. */
int fhd_host_read_manifest(fhd_host_plugin *p, const char *path);

/* fhd_host_read_manifest, then dlopen + negotiate. Returns an FHD_EXIT_* code. */
int fhd_host_load(fhd_host_plugin *p, const char *path);

void fhd_host_unload(fhd_host_plugin *p);

/* Read a whole file into a malloc'd NUL-terminated buffer; NULL on error (errno set). */
char *fhd_host_read_file(const char *path, size_t *len);

/* Print a library error (fhd_error) as one line: "error: CODE at PATH (line L, column C): msg" */
void fhd_host_print_error(const fhd_host_plugin *p, const char *what, const fhd_error *e);

#endif
