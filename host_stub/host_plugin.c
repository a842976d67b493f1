/* host_plugin.c - plugin discovery, manifest check, dlopen and ABI negotiation. */
#include "host_plugin.h"

#include <dlfcn.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

void fhd_host_default_plugin(char *out, size_t cap) {
    const char *env = getenv("FHD_PLUGIN");
    if (env && *env) {
        snprintf(out, cap, "%s", env);
        return;
    }
    char exe[4096];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n > 0) {
        exe[n] = '\0';
        char *slash = strrchr(exe, '/');
        if (slash) {
            *slash = '\0';
            snprintf(out, cap, "%s/libfoxhunt_dqn.so", exe);
            return;
        }
    }
    snprintf(out, cap, "./libfoxhunt_dqn.so");
}

char *fhd_host_read_file(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    size_t cap = 4096, n = 0;
    char *buf = malloc(cap);
    while (buf) {
        if (n + 1 >= cap) {
            char *nb = realloc(buf, cap * 2);
            if (!nb) {
                free(buf);
                buf = NULL;
                break;
            }
            buf = nb;
            cap *= 2;
        }
        size_t r = fread(buf + n, 1, cap - 1 - n, f);
        n += r;
        if (r == 0)
            break;
    }
    int bad = ferror(f);
    fclose(f);
    if (!buf || bad) {
        free(buf);
        if (bad)
            errno = EIO;
        return NULL;
    }
    buf[n] = '\0';
    if (len)
        *len = n;
    return buf;
}

int fhd_host_read_manifest(fhd_host_plugin *p, const char *path) {
    memset(p, 0, sizeof(*p));
    snprintf(p->path, sizeof p->path, "%s", path);
    if (access(path, R_OK) != 0) {
        fprintf(stderr, "error: plugin not found: %s (%s); pass --plugin PATH or set FHD_PLUGIN\n",
                path, strerror(errno));
        return FHD_EXIT_PLUGIN;
    }
    const char *slash = strrchr(path, '/');
    if (slash)
        snprintf(p->manifest_path, sizeof p->manifest_path, "%.*s/manifest.json",
                 (int)(slash - path), path);
    else
        snprintf(p->manifest_path, sizeof p->manifest_path, "manifest.json");
    json_error_t je;
    p->manifest = json_load_file(p->manifest_path, JSON_REJECT_DUPLICATES, &je);
    if (!p->manifest) {
        fprintf(stderr, "error: manifest %s: %s (line %d, column %d)\n", p->manifest_path,
                je.text, je.line, je.column);
        return FHD_EXIT_PLUGIN;
    }
    json_t *abi = json_object_get(p->manifest, "abi");
    json_t *major = abi ? json_object_get(abi, "major") : NULL;
    json_t *entry = json_object_get(p->manifest, "entry_symbol");
    if (!json_is_object(p->manifest) || !json_is_integer(major) || !json_is_string(entry)) {
        fprintf(stderr, "error: manifest %s: missing abi.major or entry_symbol\n",
                p->manifest_path);
        return FHD_EXIT_PLUGIN;
    }
    if (json_integer_value(major) != FHD_ABI_MAJOR) {
        fprintf(stderr,
                "error: ABI mismatch: %s declares ABI major %lld; this host speaks major %d\n",
                p->manifest_path, (long long)json_integer_value(major), FHD_ABI_MAJOR);
        return FHD_EXIT_ABI;
    }
    if (strcmp(json_string_value(entry), FHD_ENTRY_SYMBOL) != 0) {
        fprintf(stderr, "error: ABI mismatch: %s names entry symbol \"%s\"; expected \"%s\"\n",
                p->manifest_path, json_string_value(entry), FHD_ENTRY_SYMBOL);
        return FHD_EXIT_ABI;
    }
    return FHD_EXIT_OK;
}

int fhd_host_load(fhd_host_plugin *p, const char *path) {
    int rc = fhd_host_read_manifest(p, path);
    if (rc != FHD_EXIT_OK)
        return rc;
    /* a path without a slash would make dlopen search the library path: make it explicit */
    char full[PATH_MAX];
    if (!realpath(path, full))
        snprintf(full, sizeof full, "%s", path);
    p->handle = dlopen(full, RTLD_NOW | RTLD_LOCAL);
    if (!p->handle) {
        fprintf(stderr, "error: cannot load plugin %s: %s\n", full, dlerror());
        return FHD_EXIT_PLUGIN;
    }
    const char *sym = json_string_value(json_object_get(p->manifest, "entry_symbol"));
    fhd_get_api_base_fn entry = (fhd_get_api_base_fn)dlsym(p->handle, sym);
    if (!entry) {
        fprintf(stderr, "error: ABI mismatch: %s does not export %s\n", full, sym);
        return FHD_EXIT_ABI;
    }
    p->base = entry();
    if (!p->base || p->base->struct_size < sizeof(fhd_api_base)) {
        fprintf(stderr, "error: ABI mismatch: %s returned an invalid api base\n", full);
        return FHD_EXIT_ABI;
    }
    fhd_error err = FHD_ERROR_INIT;
    p->api = (const fhd_api_v1 *)p->base->get_api(FHD_ABI_MAJOR, &err);
    if (!p->api) {
        fprintf(stderr, "error: ABI mismatch: %s\n", err.message);
        return FHD_EXIT_ABI;
    }
    /* every member this host calls must lie inside the table the library provides */
    if (!FHD_API_HAS(p->api, tensor_write)) {
        fprintf(stderr,
                "error: ABI mismatch: the plugin's table has %u bytes (minor %u); this host "
                "needs minor %d (%zu bytes)\n",
                p->api->struct_size, p->api->abi_minor, FHD_ABI_MINOR, sizeof(fhd_api_v1));
        return FHD_EXIT_ABI;
    }
    return FHD_EXIT_OK;
}

void fhd_host_unload(fhd_host_plugin *p) {
    if (p->manifest)
        json_decref(p->manifest);
    if (p->handle)
        dlclose(p->handle);
    memset(p, 0, sizeof(*p));
}

void fhd_host_print_error(const fhd_host_plugin *p, const char *what, const fhd_error *e) {
    const char *name = p && p->api ? p->api->status_name(e->code) : "error";
    if (e->line > 0)
        fprintf(stderr, "error: %s: %s at line %d, column %d: %s\n", what, name, e->line,
                e->column, e->message);
    else if (e->path[0])
        fprintf(stderr, "error: %s: %s at %s: %s\n", what, name, e->path, e->message);
    else
        fprintf(stderr, "error: %s: %s: %s\n", what, name, e->message);
}
