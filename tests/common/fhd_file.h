/* fhd_file.h - whole-file reading for the test programs. */
#ifndef FHD_TEST_FILE_H
#define FHD_TEST_FILE_H

#include <stdio.h>
#include <stdlib.h>

/* Bytes of a file (malloc'd, caller frees) and its length, or NULL. */
static inline unsigned char *fhd_test_read_file(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *b = malloc(n > 0 ? (size_t)n : 1);
    if (b && fread(b, 1, (size_t)n, f) != (size_t)n) {
        free(b);
        b = NULL;
    }
    fclose(f);
    *len = (size_t)n;
    return b;
}

#endif
