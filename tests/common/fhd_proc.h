/* fhd_proc.h - process and directory probes for the test programs (POSIX, Linux /proc). */
#ifndef FHD_TEST_PROC_H
#define FHD_TEST_PROC_H

#include <dirent.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

/* Files in dir whose name holds ".tmp." (the checkpoint writer's temporaries); 0 when dir is
 * unreadable. */
static inline int fhd_test_count_tmp_files(const char *dir) {
    DIR *d = opendir(dir);
    int n = 0;
    struct dirent *e;
    while (d && (e = readdir(d)) != NULL)
        if (strstr(e->d_name, ".tmp."))
            n++;
    if (d)
        closedir(d);
    return n;
}

/* Resident set size of this process in KiB (/proc/self/statm), or 0. */
static inline long fhd_test_rss_kib(void) {
    FILE *f = fopen("/proc/self/statm", "r");
    long size = 0, resident = 0;
    if (f) {
        if (fscanf(f, "%ld %ld", &size, &resident) != 2)
            resident = 0;
        fclose(f);
    }
    return resident * (sysconf(_SC_PAGESIZE) / 1024);
}

#endif
