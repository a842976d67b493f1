/* replay_main.c - run committed fuzz inputs without libFuzzer.
 *
 * usage: fuzz_replay_<harness> DIR_OR_FILE...
 * Every regular file of each directory (sorted by name) and every file named goes through the
 * harness's LLVMFuzzerTestOneInput once, as libFuzzer would run it. A harness aborts on a
 * violated property, so a regression (a crash, a sanitizer report, a wrong status) fails the
 * test. Prints one line per directory and closes with "N passed, N failed".
 */
#define _POSIX_C_SOURCE 200809L
#include <dirent.h>
#include <sys/stat.h>

#include "fhd_test.h"
#include "fuzz_common.h"

/* defined by harnesses that need it */
__attribute__((weak)) int LLVMFuzzerInitialize(int *argc, char ***argv);

static unsigned char *read_all(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    size_t cap = 1 << 16, n = 0;
    unsigned char *buf = malloc(cap);
    while (buf) {
        size_t r = fread(buf + n, 1, cap - n, f);
        n += r;
        if (r == 0)
            break;
        if (n == cap) {
            unsigned char *nb = realloc(buf, cap * 2);
            if (!nb) {
                free(buf);
                buf = NULL;
                break;
            }
            buf = nb;
            cap *= 2;
        }
    }
    fclose(f);
    *len = n;
    return buf;
}

static int run_file(const char *path) {
    size_t len = 0;
    unsigned char *data = read_all(path, &len);
    CHECK(data != NULL, "cannot read %s", path);
    if (!data)
        return 0;
    /* an exact-size copy, so that ASan sees reads past the end of the input */
    unsigned char *exact = malloc(len ? len : 1);
    memcpy(exact, data, len);
    free(data);
    int rc = LLVMFuzzerTestOneInput(exact, len);
    CHECK(rc == 0, "%s: the harness returned %d", path, rc);
    free(exact);
    return 1;
}

static int cmp_names(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static int run_dir(const char *dir) {
    DIR *d = opendir(dir);
    CHECK(d != NULL, "cannot open %s", dir);
    if (!d)
        return 0;
    char **names = NULL;
    size_t n = 0, cap = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.')
            continue;
        if (n == cap) {
            cap = cap ? 2 * cap : 64;
            names = realloc(names, cap * sizeof *names);
        }
        names[n] = malloc(strlen(dir) + strlen(e->d_name) + 2);
        sprintf(names[n], "%s/%s", dir, e->d_name);
        n++;
    }
    closedir(d);
    qsort(names, n, sizeof *names, cmp_names);
    int ran = 0;
    for (size_t i = 0; i < n; i++) {
        struct stat st;
        if (stat(names[i], &st) == 0 && S_ISREG(st.st_mode))
            ran += run_file(names[i]);
        free(names[i]);
    }
    free(names);
    return ran;
}

int main(int argc, char **argv) {
    if (argc < 2) {
        printf("usage: %s DIR_OR_FILE...\n", argv[0]);
        return 2;
    }
    if (LLVMFuzzerInitialize)
        LLVMFuzzerInitialize(&argc, &argv);
    for (int i = 1; i < argc; i++) {
        struct stat st;
        int ran = 0;
        if (stat(argv[i], &st) == 0 && S_ISDIR(st.st_mode))
            ran = run_dir(argv[i]);
        else
            ran = run_file(argv[i]);
        CHECK(ran > 0, "no input in %s", argv[i]);
        printf("%s: %d inputs ran through the harness without a violated property\n", argv[i], ran);
    }
    return fhd_test_finish();
}
