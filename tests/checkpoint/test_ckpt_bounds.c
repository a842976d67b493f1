/* test_ckpt_bounds.c - checkpoint loads are bounded by the learner and all-or-nothing
 * (issue 34, findings 2 and 3).
 *
 *   1. Hostile headers. 16 MiB of "{}," as the tensor map: refused (FHD_ERR_CHECKPOINT_CORRUPT)
 *      in < 0.1 s with < 10 MiB more peak RSS (VmHWM, reset through /proc/self/clear_refs).
 *      Headers inside the length bound that only the structural pre-scan stops (deep nesting,
 *      long arrays, a root or metadata map of too many members, an overlong string, too many
 *      values): each refused with its message, within the same time and memory.
 *   2. A load with flags 0 of a file whose replay and n-step staging are much larger than the
 *      learner's reads the length, the header and the tensors it applies, nothing else (every
 *      pread is counted), with < 4 MiB more peak RSS; damage in its replay section does not
 *      matter to it, and the same file with FHD_CKPT_INCLUDE_REPLAY is refused. Loaded with
 *      the replay (intact) into a fresh learner, the peak grows by at most twice the tensors
 *      (the learner's pages written for the first time, and the staged copy) + 8 MiB.
 *   3. A file rewritten while it is loaded: this program interposes pread (the library binds
 *      to the executable's definition first) and, at the k-th pread of a load, rewrites the
 *      file in place with another checkpoint of the same config and size. For every k the load
 *      is refused with the learner byte for byte unchanged (a save with the replay compared),
 *      or accepted with exactly the old file's state. A load with the replay reads every byte
 *      of the file exactly once.
 * Usage: test_ckpt_bounds <libfoxhunt_dqn.so> <scratch dir>
 */
#define _GNU_SOURCE
#include "ckpt_common.h"

#include <dlfcn.h>
#include <fcntl.h>
#include <sys/types.h>

static const fhd_api_v1 *api;
static char dir[512];

/* ---- pread, interposed --------------------------------------------------------------------- */

static int hook_on;                    /* count the library's reads */
static long hook_calls;                /* preads since the counter was reset */
static uint64_t hook_bytes;            /* bytes asked for */
static long hook_rewrite_at;           /* rewrite the file before this pread (0: never) */
static const char *hook_path;          /* the file to rewrite */
static const unsigned char *hook_with; /* its new bytes (same length) */
static size_t hook_len;
static int hook_rewritten;

ssize_t pread(int fd, void *buf, size_t n, off_t off) {
    static ssize_t (*real)(int, void *, size_t, off_t);
    if (!real)
        real = (ssize_t(*)(int, void *, size_t, off_t))dlsym(RTLD_NEXT, "pread");
    if (hook_on) {
        hook_calls++;
        hook_bytes += n;
        if (hook_calls == hook_rewrite_at) {
            int w = open(hook_path, O_WRONLY);
            hook_rewritten = w >= 0 && pwrite(w, hook_with, hook_len, 0) == (ssize_t)hook_len;
            if (w >= 0)
                close(w);
        }
    }
    return real(fd, buf, n, off);
}

static void hook_reset(long rewrite_at) {
    hook_calls = 0;
    hook_bytes = 0;
    hook_rewrite_at = rewrite_at;
    hook_rewritten = 0;
}

/* ---- peak memory --------------------------------------------------------------------------- */

static long status_kib(const char *key) {
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    long v = -1;
    size_t n = strlen(key);
    while (f && fgets(line, sizeof line, f))
        if (strncmp(line, key, n) == 0 && line[n] == ':')
            v = atol(line + n + 1);
    if (f)
        fclose(f);
    return v;
}

static int hwm_reset_ok;

/* Reset the peak RSS to the current RSS; returns the current RSS (KiB). */
static long peak_reset(void) {
    FILE *f = fopen("/proc/self/clear_refs", "w");
    hwm_reset_ok = f && fputs("5", f) >= 0;
    if (f && fclose(f) != 0)
        hwm_reset_ok = 0;
    return status_kib(hwm_reset_ok ? "VmRSS" : "VmHWM");
}

static long peak_since(long base) {
    return status_kib("VmHWM") - base;
}

/* ---- 1. hostile headers -------------------------------------------------------------------- */

static const char *small_cfg =
    "{\"obs_dim\": 4, \"actions\": [3, 2], \"hidden\": [16], \"n_step\": 2, \"num_envs\": 2, "
    "\"replay\": \"prioritized\", \"replay_capacity\": 64, \"batch_size\": 4, \"seed\": 9}";

/* Write an 8-byte length + header + 8 data bytes file. */
static void write_header_file(const char *path, const char *h, size_t n) {
    FILE *f = fopen(path, "wb");
    unsigned char len8[8], zero[8] = {0};
    for (int i = 0; i < 8; i++)
        len8[i] = (unsigned char)((uint64_t)n >> (8 * i));
    fwrite(len8, 1, 8, f);
    fwrite(h, 1, n, f);
    fwrite(zero, 1, 8, f);
    fclose(f);
}

static char last_msg[1024]; /* the message of the last refused load */

/* Load `path` into L: expect FHD_ERR_CHECKPOINT_CORRUPT with `needle`, the learner unchanged,
 * in < 0.1 s and < 10 MiB more peak RSS; the message is left in last_msg. */
static void expect_refused(fhd_learner *L, const snapshot *before, const char *what,
                           const char *path, const char *needle, double *secs, long *kib) {
    long base = peak_reset();
    double t0 = ck_now();
    int32_t rc = api->checkpoint_load(L, path, FHD_CKPT_INCLUDE_REPLAY);
    *secs = ck_now() - t0;
    *kib = peak_since(base);
    snprintf(last_msg, sizeof last_msg, "%s", api->last_error(L));
    const char *msg = last_msg;
    CHECK(rc == FHD_ERR_CHECKPOINT_CORRUPT && strstr(msg, needle), "%s: %s: %s (wanted \"%s\")",
          what, api->status_name(rc), msg, needle);
    CHECK(*secs < 0.1, "%s: refused after %.3f s", what, *secs);
    CHECK(*kib < 10 * 1024, "%s: +%ld KiB peak RSS", what, *kib);
    CHECK(snap_unchanged(api, L, before), "%s: the refused load changed the learner", what);
}

/* `n` bytes of text: prefix, then `unit` repeated, then suffix. */
static char *repeat(const char *prefix, const char *unit, const char *suffix, size_t n) {
    char *h = malloc(n + 1);
    size_t p = strlen(prefix), u = strlen(unit), s = strlen(suffix), k = 0;
    memcpy(h, prefix, p);
    k = p;
    while (k + u + s <= n) {
        memcpy(h + k, unit, u);
        k += u;
    }
    memcpy(h + k, suffix, s);
    k += s;
    while (k < n) /* pad with spaces, as the writer does */
        h[k++] = ' ';
    h[n] = '\0';
    return h;
}

static void test_hostile_headers(void) {
    char path[700];
    snprintf(path, sizeof path, "%s/hostile.safetensors", dir);
    fhd_learner *L = fhd_test_create(api, small_cfg);
    snapshot before;
    snap_take(api, L, &before);
    double secs;
    long kib;

    /* the case: 16 MiB of "{}," in the tensor map */
    const size_t big = (size_t)16 << 20;
    char *h = repeat("{\"__metadata__\":{},\"t\":[", "{},", "{}]}", big);
    write_header_file(path, h, big);
    free(h);
    expect_refused(L, &before, "16 MiB of {}", path, "exceeds", &secs, &kib);
    unsigned long long cap = 0;
    const char *p = strstr(last_msg, "exceeds ");
    if (p)
        cap = strtoull(p + 8, NULL, 10);
    printf("16 MiB hostile header: refused in %.2f ms, +%ld KiB peak RSS%s; the header bound of "
           "this learner is %llu bytes\n",
           secs * 1e3, kib, hwm_reset_ok ? "" : " (VmHWM not resettable: an upper bound)", cap);
    CHECK(cap >= 4096 && cap < ((unsigned long long)4 << 20),
          "the header bound %llu is not a few hundred KiB", cap);
    if (cap < 4096)
        cap = 4096;

    /* inside the length bound: the pre-scan */
    const size_t n = (size_t)cap - 64;
    static const struct {
        const char *what, *prefix, *unit, *suffix, *needle;
    } cases[] = {
        {"{} in an array", "{\"__metadata__\":{},\"t\":[", "{},", "{}]}",
         "an array of more than 8"},
        {"deep nesting", "{\"a\":", "[", "", "nests deeper than 3"},
        {"root members", "{\"__metadata__\":{}", ",\"x\":0", "}", "a root object of more than"},
        {"metadata members", "{\"__metadata__\":{\"a\":\"\"", ",\"a\":\"\"", "}}",
         "an object of more than"},
        {"long string", "{\"__metadata__\":{\"config\":\"", "x", "\"}}", "a string of"},
        {"unterminated string", "{\"__metadata__\":{\"config\":\"", "y", "", "unterminated"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        h = repeat(cases[i].prefix, cases[i].unit, cases[i].suffix, n);
        write_header_file(path, h, n);
        free(h);
        expect_refused(L, &before, cases[i].what, path, cases[i].needle, &secs, &kib);
        const char *m = strstr(last_msg, ": the header");
        printf("  %-20s %zu bytes: refused in %.2f ms, +%ld KiB%s\n", cases[i].what, n, secs * 1e3,
               kib, m ? m : "");
    }
    /* many small objects, each within the member bounds: the count of values stops them */
    h = malloc(n + 1);
    size_t k = (size_t)snprintf(h, n, "{\"__metadata__\":{}");
    for (int t = 0; k + 400 < n; t++) {
        k += (size_t)snprintf(h + k, n - k, ",\"t%d\":{\"k\":0", t);
        for (int j = 0; j < 48; j++)
            k += (size_t)snprintf(h + k, n - k, ",\"k\":0");
        h[k++] = '}';
    }
    h[k++] = '}';
    while (k < n)
        h[k++] = ' ';
    write_header_file(path, h, n);
    free(h);
    expect_refused(L, &before, "values", path, "JSON values", &secs, &kib);
    printf("  %-20s %zu bytes: refused in %.2f ms, +%ld KiB\n", "values", n, secs * 1e3, kib);
    snap_free(&before);
    api->destroy(L);
    unlink(path);
}

/* ---- 2. flags 0 reads only what it applies -------------------------------------------------- */

static int in_replay_group(const char *name) {
    return strncmp(name, "replay.", 7) == 0 || strncmp(name, "staging.", 8) == 0 ||
           strncmp(name, "step.", 5) == 0;
}

static void test_flags0(void) {
    char path[700];
    snprintf(path, sizeof path, "%s/bigreplay.safetensors", dir);
    /* staging.obs (1024 envs, n_step 16, obs 256) is 16 MiB, the replay storage 4 MiB */
    const char *big_cfg =
        "{\"obs_dim\": 256, \"actions\": [3], \"hidden\": [8], \"n_step\": 16, "
        "\"num_envs\": 1024, \"replay_capacity\": 2048, \"batch_size\": 4, \"seed\": 2}";
    const char *mine_cfg = "{\"obs_dim\": 256, \"actions\": [3], \"hidden\": [8], \"n_step\": 1, "
                           "\"num_envs\": 1, \"replay_capacity\": 64, \"batch_size\": 4, "
                           "\"seed\": 2}";
    fhd_learner *B = fhd_test_create(api, big_cfg);
    CHECK(api->checkpoint_save(B, path, FHD_CKPT_INCLUDE_REPLAY) == FHD_OK, "save: %s",
          api->last_error(B));
    api->destroy(B);
    size_t len = 0;
    unsigned char *bytes = fhd_test_read_file(path, &len);
    st_file f;
    CHECK(bytes && st_parse(bytes, len, &f) == 0, "parse the file");
    uint64_t hlen = 0, applied = 0, replay_group = 0;
    for (int i = 7; i >= 0; i--)
        hlen = (hlen << 8) | bytes[i];
    const char *key;
    json_t *v;
    json_object_foreach(f.header, key, v) {
        size_t b, e;
        if (strcmp(key, "__metadata__") == 0 || st_range(&f, key, &b, &e) != 0)
            continue;
        if (in_replay_group(key))
            replay_group += e - b;
        else
            applied += e - b;
    }
    fhd_learner *L = fhd_test_create(api, mine_cfg);
    long base = peak_reset();
    hook_reset(0);
    hook_on = 1;
    int32_t rc = api->checkpoint_load(L, path, 0);
    hook_on = 0;
    long kib = peak_since(base);
    CHECK(rc == FHD_OK, "flags 0 load: %s", api->last_error(L));
    CHECK(hook_bytes == 8 + hlen + applied,
          "a flags-0 load read %llu bytes; length + header + applied tensors are %llu (the "
          "replay group holds %llu)",
          (unsigned long long)hook_bytes, (unsigned long long)(8 + hlen + applied),
          (unsigned long long)replay_group);
    CHECK(kib < 4 * 1024, "a flags-0 load of a file with %.1f MiB of replay group: +%ld KiB",
          replay_group / 1048576.0, kib);
    printf("flags-0 load of a %.1f MiB file (replay group %.1f MiB): read %llu bytes, +%ld KiB "
           "peak RSS\n",
           len / 1048576.0, replay_group / 1048576.0, (unsigned long long)hook_bytes, kib);

    /* with the replay: the file's replay is staged once (the learner's own size), no more */
    fhd_learner *F = fhd_test_create(api, big_cfg);
    base = peak_reset();
    hook_reset(0);
    hook_on = 1;
    rc = api->checkpoint_load(F, path, FHD_CKPT_INCLUDE_REPLAY);
    hook_on = 0;
    const long full_kib = peak_since(base);
    CHECK(rc == FHD_OK && hook_bytes == len, "with the replay: %s; read %llu of %zu bytes",
          api->last_error(F), (unsigned long long)hook_bytes, len);
    /* the learner's own pages (calloc'd, untouched until the load writes them) and the staged
     * copy: twice the tensors at most */
    CHECK(full_kib < (long)(2 * (replay_group + applied) / 1024) + 8 * 1024,
          "a load with the replay: +%ld KiB for %.1f MiB of tensors", full_kib,
          (replay_group + applied) / 1048576.0);
    printf("the same file with FHD_CKPT_INCLUDE_REPLAY into a fresh learner: read %llu bytes "
           "(each once), +%ld KiB peak RSS (the learner's own pages written for the first time "
           "and the staged copy)\n",
           (unsigned long long)hook_bytes, full_kib);
    api->destroy(F);

    /* damage in the replay section: not read, so not seen; with the replay, refused */
    size_t b = 0, e = 0;
    CHECK(st_range(&f, "staging.obs", &b, &e) == 0, "staging.obs");
    bytes[8 + hlen + b + 100] ^= 0x40;
    file_write(path, bytes, len);
    rc = api->checkpoint_load(L, path, 0);
    CHECK(rc == FHD_OK, "flags 0 with a damaged replay section: %s", api->last_error(L));
    fhd_learner *M = fhd_test_create(api, big_cfg);
    rc = api->checkpoint_load(M, path, FHD_CKPT_INCLUDE_REPLAY);
    CHECK(rc == FHD_ERR_CHECKPOINT_CORRUPT && strstr(api->last_error(M), "staging.obs"),
          "with the replay: %s: %s", api->status_name(rc), api->last_error(M));
    api->destroy(M);
    api->destroy(L);
    st_free(&f);
    free(bytes);
    unlink(path);
}

/* ---- 3. a file rewritten while it is loaded ------------------------------------------------- */

static const char *rw_cfg =
    "{\"obs_dim\": 4, \"actions\": [3, 2], \"hidden\": [8], \"dueling\": true, "
    "\"spectral_norm\": \"last\", \"n_step\": 3, \"replay\": \"prioritized\", "
    "\"replay_capacity\": 64, \"num_envs\": 2, \"seed\": 4, \"batch_size\": 4, "
    "\"learning_starts\": 8, \"train_freq\": 1, \"lr\": 0.01}";

static unsigned char *trained_bytes(const char *path, uint64_t updates, uint64_t episode0,
                                    size_t *len) {
    static synth_run r;
    fhd_learner *S = fhd_test_create(api, rw_cfg);
    synth_init(&r, 2);
    r.env[0].episode = episode0;
    CHECK(synth_run_until(api, S, &r, updates, 100000) >= (int64_t)updates, "train");
    unsigned char *b = save_bytes(api, S, path, FHD_CKPT_INCLUDE_REPLAY, len);
    api->destroy(S);
    return b;
}

static void test_rewrite(void) {
    char pa[700], px[700], pcmp[700];
    snprintf(pa, sizeof pa, "%s/rw_a.safetensors", dir);
    snprintf(px, sizeof px, "%s/rw_x.safetensors", dir);
    snprintf(pcmp, sizeof pcmp, "%s/rw_cmp.safetensors", dir);
    size_t na = 0, nb = 0, nx = 0;
    unsigned char *a = trained_bytes(pa, 40, 1, &na);
    unsigned char *bb = trained_bytes(pa, 40, 7, &nb); /* same size, other contents */
    unsigned char *x = trained_bytes(px, 15, 3, &nx);  /* the learner's own state */
    CHECK(a && bb && x && na == nb && memcmp(a, bb, na) != 0, "two checkpoints of one size");
    file_write(pa, a, na);
    fhd_learner *L = fhd_test_create(api, rw_cfg);
    CHECK(api->checkpoint_load(L, px, FHD_CKPT_INCLUDE_REPLAY) == FHD_OK, "load x: %s",
          api->last_error(L));

    /* untouched: count the reads of one load */
    hook_reset(0);
    hook_on = 1;
    int32_t rc = api->checkpoint_load(L, pa, FHD_CKPT_INCLUDE_REPLAY);
    hook_on = 0;
    const long reads = hook_calls;
    CHECK(rc == FHD_OK, "load a: %s", api->last_error(L));
    CHECK(hook_bytes == na,
          "a load with the replay read %llu bytes of a %zu-byte file (each "
          "byte once)",
          (unsigned long long)hook_bytes, na);
    CHECK(api->checkpoint_load(L, px, FHD_CKPT_INCLUDE_REPLAY) == FHD_OK, "back to x");

    hook_path = pa;
    hook_with = bb;
    hook_len = nb;
    int refused = 0, as_a = 0, wrong = 0;
    for (long k = 1; k <= reads + 1; k++) {
        file_write(pa, a, na);
        hook_reset(k);
        hook_on = 1;
        rc = api->checkpoint_load(L, pa, FHD_CKPT_INCLUDE_REPLAY);
        hook_on = 0;
        size_t n = 0;
        unsigned char *now = save_bytes(api, L, pcmp, FHD_CKPT_INCLUDE_REPLAY, &n);
        const int is_x = now && n == nx && memcmp(now, x, n) == 0;
        const int is_a = now && n == na && memcmp(now, a, n) == 0;
        free(now);
        if (rc != FHD_OK) {
            refused++;
            CHECK(is_x, "rewrite before pread %ld: refused (%s: %s) but the learner changed", k,
                  api->status_name(rc), api->last_error(L));
            wrong += !is_x;
        } else {
            as_a += is_a;
            CHECK(is_a && k > reads, "rewrite before pread %ld: accepted with %s", k,
                  is_a ? "the old file's state" : "a state of neither file");
            wrong += !is_a;
            CHECK(api->checkpoint_load(L, px, FHD_CKPT_INCLUDE_REPLAY) == FHD_OK, "back to x");
        }
        CHECK(k > reads || hook_rewritten, "the rewrite before pread %ld did not happen", k);
    }
    printf("rewritten during the load: %ld preads per load (%zu bytes, each once); rewrite "
           "before each: %d refused with the learner unchanged, %d loaded as the old file, %d "
           "wrong\n",
           reads, na, refused, as_a, wrong);
    api->destroy(L);
    free(a);
    free(bb);
    free(x);
    unlink(pa);
    unlink(px);
    unlink(pcmp);
}

int main(int argc, char **argv) {
    const int rc = ckpt_start(argc, argv, &api, dir, sizeof dir);
    if (rc >= 0)
        return rc;
    test_hostile_headers();
    test_flags0();
    test_rewrite();
    return fhd_test_finish();
}
