/* host_info.c - `fhd-host info` and `fhd-host check-config`. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "host_cmds.h"
#include "host_plugin.h"

static int parse_plugin_only(int argc, char **argv, char *plugin, size_t cap,
                             const char **positional) {
    int bad = 0;
    fhd_host_default_plugin(plugin, cap);
    for (int i = 1; i < argc; i++) {
        const char *v;
        if ((v = fhd_opt(argc, argv, &i, "--plugin", &bad)))
            snprintf(plugin, cap, "%s", v);
        else if (bad)
            return FHD_EXIT_USAGE;
        else if (positional && !*positional && argv[i][0] != '-')
            *positional = argv[i];
        else {
            fprintf(stderr, "error: unknown option \"%s\"\n", argv[i]);
            return FHD_EXIT_USAGE;
        }
    }
    return FHD_EXIT_OK;
}

/* Probe a backend by creating a minimal learner on it. */
static int probe_backend(const fhd_host_plugin *p, const char *backend, char *why, size_t cap) {
    char cfg[256];
    snprintf(cfg, sizeof cfg,
             "{\"backend\": \"%s\", \"obs_dim\": 4, \"actions\": [2], \"hidden\": [8], "
             "\"batch_size\": 4, \"replay_capacity\": 16}",
             backend);
    fhd_error err = FHD_ERROR_INIT;
    fhd_learner *L = NULL;
    int32_t rc = p->api->init(cfg, strlen(cfg), &L, &err);
    if (rc == FHD_OK) {
        p->api->destroy(L);
        return 1;
    }
    snprintf(why, cap, "%s: %s", p->api->status_name(rc), err.message);
    return 0;
}

int fhd_cmd_info(int argc, char **argv) {
    char plugin[4096];
    int rc = parse_plugin_only(argc, argv, plugin, sizeof plugin, NULL);
    if (rc != FHD_EXIT_OK)
        return rc;
    fhd_host_plugin p;
    rc = fhd_host_load(&p, plugin);
    if (rc != FHD_EXIT_OK) {
        fhd_host_unload(&p);
        return rc;
    }
    json_t *m = p.manifest;
    json_t *abi = json_object_get(m, "abi");
    printf("plugin:        %s\n", p.path);
    printf("manifest:      %s\n", p.manifest_path);
    printf("name:          %s\n", json_string_value(json_object_get(m, "name")));
    printf("version:       %s (library reports %s)\n",
           json_string_value(json_object_get(m, "library_version")), p.base->version);
    printf("abi:           manifest %lld.%lld, negotiated %u.%u (host built for %d.%d)\n",
           (long long)json_integer_value(json_object_get(abi, "major")),
           (long long)json_integer_value(json_object_get(abi, "minor")), p.api->abi_major,
           p.api->abi_minor, FHD_ABI_MAJOR, FHD_ABI_MINOR);
    printf("entry symbol:  %s\n", json_string_value(json_object_get(m, "entry_symbol")));
    int same = strcmp(p.api->manifest(), "") != 0;
    {
        size_t len = 0;
        char *file = fhd_host_read_file(p.manifest_path, &len);
        same = file && strcmp(file, p.api->manifest()) == 0;
        free(file);
    }
    printf("manifest file matches the embedded manifest: %s\n", same ? "yes" : "NO");
    json_t *features = json_object_get(m, "features");
    printf("features:     ");
    size_t i;
    json_t *f;
    json_array_foreach(features, i, f) printf(" %s", json_string_value(f));
    printf("\nbackends:\n");
    json_t *backends = json_object_get(m, "backends");
    json_array_foreach(backends, i, f) {
        const char *name = json_string_value(json_object_get(f, "name"));
        char why[1024] = {0};
        int ok = probe_backend(&p, name, why, sizeof why);
        printf("  %-5s %s%s\n", name, ok ? "usable" : "unavailable: ", ok ? "" : why);
    }
    printf("config keys:   %zu (see manifest config_schema)\n",
           json_object_size(json_object_get(m, "config_schema")));
    fhd_host_unload(&p);
    return same ? FHD_EXIT_OK : FHD_EXIT_PLUGIN;
}

int fhd_cmd_check_config(int argc, char **argv) {
    char plugin[4096];
    const char *file = NULL;
    int rc = parse_plugin_only(argc, argv, plugin, sizeof plugin, &file);
    if (rc != FHD_EXIT_OK)
        return rc;
    if (!file) {
        fprintf(stderr, "error: check-config needs a FILE\n");
        return FHD_EXIT_USAGE;
    }
    size_t len = 0;
    char *json = fhd_host_read_file(file, &len);
    if (!json) {
        fprintf(stderr, "error: cannot read config %s\n", file);
        return FHD_EXIT_CONFIG;
    }
    fhd_host_plugin p;
    rc = fhd_host_load(&p, plugin);
    if (rc != FHD_EXIT_OK) {
        free(json);
        fhd_host_unload(&p);
        return rc;
    }
    fhd_error err = FHD_ERROR_INIT;
    fhd_learner *L = NULL;
    int32_t st = p.api->init(json, len, &L, &err);
    free(json);
    if (st == FHD_OK) {
        printf("%s: valid\n", file);
        p.api->destroy(L);
        rc = FHD_EXIT_OK;
    } else {
        fhd_host_print_error(&p, file, &err);
        rc = st == FHD_ERR_BACKEND_UNAVAILABLE || st == FHD_ERR_OUT_OF_MEMORY ? FHD_EXIT_FAILURE
                                                                              : FHD_EXIT_CONFIG;
    }
    fhd_host_unload(&p);
    return rc;
}
