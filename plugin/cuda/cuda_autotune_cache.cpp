/* cuda_autotune_cache.cpp - the autotune's cache file, and the begin and end of a tuning at
 * create (the candidates and their timing are cuda_autotune.cpp's).
 *
 * The cache: one text file, <dir>/autotune-v2.txt, dir the config's autotune_cache, or for
 * "auto" $XDG_CACHE_HOME/foxhunt-dqn or ~/.cache/foxhunt-dqn ("none": no cache), a line per site:
 *   <key> TAB <algo tile stages splitk reduction swizzle custom inner cluster us> TAB <FNV-1a
 *   64 of both>
 * The key names the device (name, SMs), the driver and cuBLASLt versions, the mode and the site's
 * whole GEMM (ops, m n k, leading dimensions, batch and strides, epilogue, precision, operand
 * alignments, alpha mode). A line that fails its checksum, or whose configuration cuBLASLt no
 * longer accepts for these descriptors, is ignored and reported ("ignored: <why>"); the site is
 * then tuned again. New picks are written back through a temporary file and a rename. Within a
 * process the picks are also kept in memory, so learners of the same shape agree even without a
 * writable cache.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "cuda_autotune.h"
#include "cuda_internal.h"

/* ---- the cache file ------------------------------------------------------------------------ */

/* autotune_cache: a directory, "none" (no cache) or "auto" (the XDG rule) */
static std::string cache_dir(const fhd__backend *b) {
    const char *c = b->cfg.autotune_cache;
    if (strcmp(c, "none") == 0)
        return "";
    if (c[0] && strcmp(c, "auto") != 0)
        return c;
    const char *x = getenv("XDG_CACHE_HOME");
    if (x && x[0] == '/')
        return std::string(x) + "/foxhunt-dqn";
    const char *h = getenv("HOME");
    if (h && h[0] == '/')
        return std::string(h) + "/.cache/foxhunt-dqn";
    return "";
}

/* mkdir -p of an absolute or relative directory; 0 on success */
static int make_dirs(const std::string &d) {
    for (size_t i = 1; i <= d.size(); i++) {
        if (i < d.size() && d[i] != '/')
            continue;
        const std::string part = d.substr(0, i);
        if (mkdir(part.c_str(), 0755) != 0 && errno != EEXIST)
            return -1;
    }
    return 0;
}

static void read_cache(fhd__autotune *t) {
    FILE *f = fopen(t->file.c_str(), "r");
    if (!f)
        return; /* no cache yet: a miss */
    char buf[2048];
    int bad = 0;
    while (fgets(buf, sizeof buf, f)) {
        std::string line(buf);
        if (!line.empty() && line.back() == '\n')
            line.pop_back();
        if (line.empty() || line[0] == '#')
            continue;
        const size_t t1 = line.find('\t'), t2 = line.rfind('\t');
        if (t1 == std::string::npos || t2 == t1) { /* no key to match: dropped on rewrite */
            bad++;
            continue;
        }
        char want[20];
        snprintf(want, sizeof want, "%016llx", (unsigned long long)fnv1a(line.substr(0, t2)));
        if (line.substr(t2 + 1) != want) { /* a damaged or edited line: its key is not trusted */
            t->lines[line.substr(0, t1)] = "";
            continue;
        }
        t->lines[line.substr(0, t1)] = line;
    }
    fclose(f);
    t->unreadable = bad;
}

static void write_cache(fhd__autotune *t, fhd__cuda_plan *p) {
    if (t->fresh.empty() || t->file.empty())
        return;
    const std::string dir = t->file.substr(0, t->file.rfind('/'));
    if (make_dirs(dir) != 0) {
        snprintf(p->cache + strlen(p->cache), sizeof p->cache - strlen(p->cache),
                 " (not written: %s: %s)", dir.c_str(), strerror(errno));
        return;
    }
    static std::atomic<unsigned long> seq(0); /* learners of one process write in turn */
    char tmp[640];
    snprintf(tmp, sizeof tmp, "%s.%ld.%lu.tmp", t->file.c_str(), (long)getpid(), seq++);
    FILE *f = fopen(tmp, "w");
    if (!f) {
        snprintf(p->cache + strlen(p->cache), sizeof p->cache - strlen(p->cache),
                 " (not written: %s)", strerror(errno));
        return;
    }
    fprintf(f, "# foxhunt-dqn autotune cache v2: key TAB configuration TAB checksum\n");
    bool ok = true;
    for (const auto &kv : t->lines)
        if (!kv.second.empty())
            ok = ok && fprintf(f, "%s\n", kv.second.c_str()) > 0;
    ok = fclose(f) == 0 && ok;
    if (!ok || rename(tmp, t->file.c_str()) != 0) {
        unlink(tmp);
        snprintf(p->cache + strlen(p->cache), sizeof p->cache - strlen(p->cache), " (not written)");
    }
}

void fhd__autotune_line(fhd__autotune *t, const std::string &key, const std::string &value) {
    const std::string head = key + "\t" + value;
    char sum[20];
    snprintf(sum, sizeof sum, "%016llx", (unsigned long long)fnv1a(head));
    t->lines[key] = head + "\t" + sum;
    t->fresh.push_back(key);
}

void fhd__autotune_cache_store(fhd__backend *b, const std::string &key, const std::string &value) {
    if (!b->plan.cache_file[0])
        return;
    static std::mutex mu; /* one read-modify-write at a time in this process */
    std::lock_guard<std::mutex> lock(mu);
    fhd__autotune t{};
    t.file = b->plan.cache_file;
    t.unreadable = 0;
    read_cache(&t);
    fhd__autotune_line(&t, key, value);
    write_cache(&t, &b->plan);
}

int32_t fhd__autotune_begin(fhd__backend *b) {
    fhd__cuda_plan *p = &b->plan;
    if (p->autotune == FHD_AUTOTUNE_OFF)
        return FHD_OK;
    fhd__autotune *t = new (std::nothrow) fhd__autotune();
    if (!t)
        return fhd__cuda_failf(b, FHD_ERR_OUT_OF_MEMORY, "autotune: out of host memory");
    t->e0 = t->e1 = NULL;
    t->misses = t->hits = t->over_budget = t->unreadable = 0;
    b->tune = t;
    FHD_CK(b, cudaEventCreate(&t->e0));
    FHD_CK(b, cudaEventCreate(&t->e1));
    p->budget_ms = p->autotune == FHD_AUTOTUNE_FULL ? TUNE_FULL_BUDGET_MS : TUNE_FAST_BUDGET_MS;
    t->t0_ms = now_ms();
    t->deadline_ms = t->t0_ms + p->budget_ms;
    int driver = 0;
    cudaDriverGetVersion(&driver);
    cudaDeviceProp prop;
    char name[256] = "?";
    if (cudaGetDeviceProperties(&prop, b->device) == cudaSuccess)
        snprintf(name, sizeof name, "%s", prop.name);
    (void)cudaGetLastError();
    for (char *c = name; *c; c++)
        if (*c == '\t' || *c == '\n' || *c == '|')
            *c = ' ';
    char base[512];
    snprintf(base, sizeof base, "dev=%s/sm%d/%dsm|driver=%d|cublasLt=%zu|mode=%s", name, b->dev.sm,
             b->dev.sm_count, driver, cublasLtGetVersion(),
             p->autotune == FHD_AUTOTUNE_FULL ? "full" : "fast");
    t->key_base = base;
    const std::string dir = cache_dir(b);
    if (!dir.empty()) {
        t->file = dir + "/autotune-v2.txt";
        snprintf(p->cache_file, sizeof p->cache_file, "%s", t->file.c_str());
        read_cache(t);
    }
    return FHD_OK;
}

void fhd__autotune_end(fhd__backend *b) {
    fhd__autotune *t = b->tune;
    if (!t)
        return;
    fhd__cuda_plan *p = &b->plan;
    p->autotune_ms = now_ms() - t->t0_ms;
    p->cache_hits = t->hits;
    if (!t->why_ignored.empty())
        snprintf(p->cache, sizeof p->cache, "ignored: %s", t->why_ignored.c_str());
    else if (t->misses == 0 && t->hits > 0)
        snprintf(p->cache, sizeof p->cache, "hit");
    else
        snprintf(p->cache, sizeof p->cache, "%s",
                 t->file.empty() ? "miss (no cache path)" : "miss");
    if (t->unreadable)
        snprintf(p->cache + strlen(p->cache), sizeof p->cache - strlen(p->cache),
                 " (%d unreadable lines dropped)", t->unreadable);
    if (t->over_budget)
        snprintf(p->cache + strlen(p->cache), sizeof p->cache - strlen(p->cache),
                 " (budget reached: %d sites by the rule)", t->over_budget);
    write_cache(t, p);
    if (t->e0)
        cudaEventDestroy(t->e0);
    if (t->e1)
        cudaEventDestroy(t->e1);
    (void)cudaGetLastError();
    delete t;
    b->tune = NULL;
}
