/* fuzz_manifest.c - fuzz target: fhd-host's manifest reader (host_stub/host_plugin.c).
 *
 * fhd_host_read_manifest(p, plugin_path) reads manifest.json beside the plugin, as a host does
 * before it dlopens anything. The harness keeps one private directory holding an empty
 * "libfoxhunt_dqn.so" and writes each input as its manifest.json.
 *
 * Properties: the result is one of FHD_EXIT_OK, FHD_EXIT_PLUGIN, FHD_EXIT_ABI; on FHD_EXIT_OK
 * the manifest is a JSON object whose abi.major is the host's and whose entry_symbol is the
 * host's; nothing leaks (fhd_host_unload releases it) and nothing is loaded.
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdio.h>
#include <unistd.h>

#include "fuzz_common.h"
#include "host_plugin.h"

static char dir[256], lib[320], manifest[320];

static void make_dir(void) {
    /* FHD_FUZZ_TMPDIR (run_fuzzers.sh: its work directory), else /dev/shm, else $TMPDIR */
    const char *base = getenv("FHD_FUZZ_TMPDIR");
    if (!base || !*base)
        base = access("/dev/shm", W_OK) == 0 ? "/dev/shm" : getenv("TMPDIR");
    snprintf(dir, sizeof dir, "%s/fhd_fuzz_manifest.XXXXXX", base ? base : "/tmp");
    FUZZ_REQUIRE(mkdtemp(dir) != NULL, "mkdtemp %s", dir);
    snprintf(lib, sizeof lib, "%s/libfoxhunt_dqn.so", dir);
    snprintf(manifest, sizeof manifest, "%s/manifest.json", dir);
    int fd = open(lib, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    FUZZ_REQUIRE(fd >= 0, "create %s", lib);
    close(fd);
}

static void remove_dir(void) {
    unlink(manifest);
    unlink(lib);
    rmdir(dir);
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc;
    (void)argv;
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static int ready;
    static FILE *quiet;
    if (!ready) {
        make_dir();
        atexit(remove_dir);
        /* the reader prints one line per rejected manifest: keep the fuzzer's log readable
         * (sanitizer reports write to fd 2 directly and are not affected) */
        if (!getenv("FHD_FUZZ_VERBOSE"))
            quiet = fopen("/dev/null", "w");
        ready = 1;
    }
    int fd = open(manifest, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    FUZZ_REQUIRE(fd >= 0, "create %s", manifest);
    size_t off = 0;
    while (off < size) {
        ssize_t w = write(fd, data + off, size - off);
        FUZZ_REQUIRE(w > 0, "write %s", manifest);
        off += (size_t)w;
    }
    close(fd);

    FILE *saved = stderr;
    if (quiet)
        stderr = quiet;
    fhd_host_plugin *p = malloc(sizeof *p);
    FUZZ_REQUIRE(p != NULL, "out of memory in the harness");
    int rc = fhd_host_read_manifest(p, lib);
    stderr = saved;
    FUZZ_REQUIRE(rc == FHD_EXIT_OK || rc == FHD_EXIT_PLUGIN || rc == FHD_EXIT_ABI, "rc %d", rc);
    FUZZ_REQUIRE(p->handle == NULL && p->api == NULL, "the reader loaded something");
    FUZZ_REQUIRE(strcmp(p->manifest_path, manifest) == 0, "manifest path %s", p->manifest_path);
    if (rc == FHD_EXIT_OK) {
        json_t *abi = json_object_get(p->manifest, "abi");
        json_t *entry = json_object_get(p->manifest, "entry_symbol");
        FUZZ_REQUIRE(json_is_object(p->manifest), "accepted a manifest that is not an object");
        FUZZ_REQUIRE(json_integer_value(json_object_get(abi, "major")) == FHD_ABI_MAJOR,
                     "accepted another ABI major");
        FUZZ_REQUIRE(json_is_string(entry) &&
                         strcmp(json_string_value(entry), FHD_ENTRY_SYMBOL) == 0,
                     "accepted another entry symbol");
    }
    fhd_host_unload(p);
    free(p);
    return 0;
}
