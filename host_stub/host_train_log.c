/* host_train_log.c - a training run's outputs: DIR/metrics.jsonl (one object per logging
 * interval), DIR/episodes.csv (one row per finished episode), the progress line, the final
 * evaluation (DIR/eval.json) and DIR/learning_curve.png drawn by gnuplot. */
#include "host_train_util.h"

#include <errno.h>
#include <fcntl.h>
#include <spawn.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

extern char **environ;

static const char episodes_header[] = "episode,env,env_steps,return,length,terminated,truncated\n";

/* mkdir -p */
static int make_dirs(const char *dir) {
    char tmp[4096];
    snprintf(tmp, sizeof tmp, "%s", dir);
    size_t n = strlen(tmp);
    while (n > 1 && tmp[n - 1] == '/')
        tmp[--n] = '\0';
    for (char *s = tmp + 1; *s; s++) {
        if (*s != '/')
            continue;
        *s = '\0';
        if (mkdir(tmp, 0777) != 0 && errno != EEXIST)
            return -1;
        *s = '/';
    }
    if (mkdir(tmp, 0777) != 0 && errno != EEXIST)
        return -1;
    struct stat st;
    if (stat(tmp, &st) != 0)
        return -1;
    if (!S_ISDIR(st.st_mode)) {
        errno = ENOTDIR;
        return -1;
    }
    return 0;
}

static FILE *open_in(const fhd_host_runlog *r, const char *name, int append) {
    char path[4200];
    snprintf(path, sizeof path, "%s/%s", r->dir, name);
    FILE *f = fopen(path, append ? "a" : "w");
    if (!f)
        fprintf(stderr, "error: cannot write %s: %s\n", path, strerror(errno));
    return f;
}

int fhd_host_runlog_open(fhd_host_runlog *r, const char *dir, const char *env_id,
                         uint64_t target_steps, uint64_t first_episode, int append) {
    memset(r, 0, sizeof(*r));
    snprintf(r->dir, sizeof r->dir, "%s", dir);
    r->env_id = env_id;
    r->target_steps = target_steps;
    r->episode = first_episode;
    r->tty = isatty(STDOUT_FILENO);
    r->t0 = fhd_host_now();
    if (make_dirs(dir) != 0) {
        fprintf(stderr, "error: cannot create the output directory %s: %s\n", dir, strerror(errno));
        return FHD_EXIT_IO;
    }
    r->metrics = open_in(r, "metrics.jsonl", append);
    r->episodes = r->metrics ? open_in(r, "episodes.csv", append) : NULL;
    if (!r->metrics || !r->episodes) {
        fhd_host_runlog_close(r);
        return FHD_EXIT_IO;
    }
    if (ftell(r->episodes) == 0)
        fputs(episodes_header, r->episodes);
    return FHD_EXIT_OK;
}

void fhd_host_runlog_episode(fhd_host_runlog *r, uint32_t env, uint64_t env_steps, double ret,
                             uint64_t length, int terminated, int truncated) {
    if (fprintf(r->episodes, "%llu,%u,%llu,%.9g,%llu,%d,%d\n", (unsigned long long)r->episode, env,
                (unsigned long long)env_steps, ret, (unsigned long long)length, terminated ? 1 : 0,
                truncated ? 1 : 0) < 0)
        r->io_error = 1;
    r->episode++;
}

/* The progress text: the full form for plain lines, a compact one (under 80 columns for
 * typical values) for the terminal's \r line, which must not wrap. */
static void progress_text(const fhd_host_runlog *r, const json_t *m, int compact, char *buf,
                          size_t cap) {
    const double steps = fhd_host_metric(m, "env_steps");
    const double pct = r->target_steps ? 100.0 * steps / (double)r->target_steps : 100.0;
    const double wall = fhd_host_now() - r->t0;
    if (compact)
        snprintf(buf, cap, "%.0f/%llu %.0f%% %.0fs | %.0f upd/s | ret %.1f | eps %.3f | loss %.3g",
                 steps, (unsigned long long)r->target_steps, pct, wall,
                 fhd_host_metric(m, "updates_per_second"),
                 fhd_host_metric(m, "episode_return_mean_100"), fhd_host_metric(m, "epsilon"),
                 fhd_host_metric(m, "loss"));
    else
        snprintf(buf, cap,
                 "%s steps %.0f/%llu (%.0f%%)  wall %.1fs  updates %.0f (%.0f/s)  "
                 "return(100) %.2f  eps %.3f  loss %.4g  q %.3g",
                 r->env_id, steps, (unsigned long long)r->target_steps, pct, wall,
                 fhd_host_metric(m, "updates"), fhd_host_metric(m, "updates_per_second"),
                 fhd_host_metric(m, "episode_return_mean_100"), fhd_host_metric(m, "epsilon"),
                 fhd_host_metric(m, "loss"), fhd_host_metric(m, "q_mean"));
}

void fhd_host_runlog_interval(fhd_host_runlog *r, const json_t *metrics) {
    json_t *line = json_deep_copy(metrics);
    if (line) {
        json_object_set_new(line, "wall_time", json_real(fhd_host_now() - r->t0));
        char *s = json_dumps(line, JSON_COMPACT | JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(9));
        if (!s || fprintf(r->metrics, "%s\n", s) < 0 || fflush(r->metrics) != 0)
            r->io_error = 1;
        free(s);
        json_decref(line);
    }
    if (fflush(r->episodes) != 0)
        r->io_error = 1;
    if (fhd_host_metric(metrics, "episodes") > 0) {
        if (r->curve_n == r->curve_cap) {
            size_t cap = r->curve_cap ? 2 * r->curve_cap : 256;
            double *c = realloc(r->curve, sizeof(double) * 3 * cap);
            if (c) {
                r->curve = c;
                r->curve_cap = cap;
            }
        }
        if (r->curve_n < r->curve_cap) {
            double *p = r->curve + 3 * r->curve_n++;
            p[0] = fhd_host_metric(metrics, "env_steps");
            p[1] = fhd_host_metric(metrics, "episode_return_mean_100");
            p[2] = fhd_host_metric(metrics, "loss");
        }
    }
    if (!r->tty) {
        char buf[512];
        progress_text(r, metrics, 0, buf, sizeof buf);
        printf("%s\n", buf);
        fflush(stdout);
    }
}

void fhd_host_runlog_progress(fhd_host_runlog *r, const json_t *metrics) {
    if (!r->tty)
        return;
    char buf[512];
    progress_text(r, metrics, 1, buf, sizeof buf);
    printf("\r%s\033[K", buf);
    fflush(stdout);
    r->line_open = 1;
}

void fhd_host_runlog_end_line(fhd_host_runlog *r) {
    if (r->line_open) {
        putchar('\n');
        fflush(stdout);
        r->line_open = 0;
    }
}

void fhd_host_runlog_eval(fhd_host_runlog *r, const fhd_host_eval_result *eval, uint64_t seed) {
    json_t *o = json_object();
    json_t *rets = json_array(), *lens = json_array();
    for (uint32_t k = 0; k < eval->episodes; k++) {
        json_array_append_new(rets, json_real(eval->returns[k]));
        json_array_append_new(lens, json_integer(eval->lengths[k]));
    }
    json_object_set_new(o, "env", json_string(r->env_id));
    json_object_set_new(o, "env_seed", json_integer((json_int_t)seed));
    json_object_set_new(o, "episodes", json_integer(eval->episodes));
    json_object_set_new(o, "return_mean", json_real(eval->mean));
    json_object_set_new(o, "return_std", json_real(eval->std));
    json_object_set_new(o, "seconds", json_real(eval->seconds));
    json_object_set_new(o, "returns", rets);
    json_object_set_new(o, "lengths", lens);
    char path[4200];
    snprintf(path, sizeof path, "%s/eval.json", r->dir);
    if (json_dump_file(o, path, JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(9)) != 0) {
        fprintf(stderr, "error: cannot write %s\n", path);
        r->io_error = 1;
    }
    json_decref(o);
}

/* ---- learning curve ---------------------------------------------------------------------- */

/* `s` as a gnuplot single-quoted string (a quote is doubled). */
static void gp_quoted(FILE *f, const char *s) {
    fputc('\'', f);
    for (; *s; s++) {
        if (*s == '\'')
            fputc('\'', f);
        fputc(*s, f);
    }
    fputc('\'', f);
}

static int find_in_path(const char *prog) {
    const char *path = getenv("PATH");
    if (!path || !*path)
        path = "/usr/bin:/bin";
    char dir[4096];
    while (*path) {
        size_t n = strcspn(path, ":");
        snprintf(dir, sizeof dir, "%.*s/%s", (int)(n ? n : 1), n ? path : ".", prog);
        if (access(dir, X_OK) == 0)
            return 1;
        path += n + (path[n] == ':');
    }
    return 0;
}

static int write_plot_script(const fhd_host_runlog *r, const fhd_host_eval_result *eval,
                             const char *script, const char *png) {
    FILE *f = fopen(script, "w");
    if (!f)
        return -1;
    char csv[4200];
    snprintf(csv, sizeof csv, "%s/episodes.csv", r->dir);
    fputs("# learning curve of a fhd-host training run; rerun with: gnuplot THIS_FILE\n"
          "if (strstrt(GPVAL_TERMINALS, 'pngcairo') > 0) {\n"
          "    set terminal pngcairo size 960,540 noenhanced\n"
          "} else {\n"
          "    set terminal png size 960,540 noenhanced\n"
          "}\n",
          f);
    fputs("set output ", f);
    gp_quoted(f, png);
    fprintf(f, "\nset title '%s: episode returns during training'\n", r->env_id);
    fputs("set xlabel 'env steps'\nset ylabel 'return'\nset grid\nset key outside bottom center "
          "horizontal\nset datafile separator ','\n$curve << EOD\n",
          f);
    for (size_t i = 0; i < r->curve_n; i++)
        fprintf(f, "%.0f,%.6g\n", r->curve[3 * i], r->curve[3 * i + 1]);
    fputs("EOD\n", f);
    if (eval)
        fprintf(f, "$eval << EOD\n%.0f,%.6g,%.6g\nEOD\n",
                r->curve_n ? r->curve[3 * (r->curve_n - 1)] : 0.0, eval->mean, eval->std);
    fputs("plot ", f);
    gp_quoted(f, csv);
    fputs(" skip 1 using 3:4 with points pt 7 ps 0.35 lc rgb '#9aa5c8' title 'episode return'", f);
    if (r->curve_n)
        fputs(", \\\n     $curve using 1:2 with lines lw 2 lc rgb '#c0392b' "
              "title 'mean of the last 100 episodes'",
              f);
    if (eval)
        fprintf(f,
                ", \\\n     $eval using 1:2:3 with yerrorbars pt 5 ps 1.2 lc rgb '#1e8449' "
                "title 'greedy evaluation (%u episodes)'",
                eval->episodes);
    fputs("\n", f);
    return fclose(f) == 0 ? 0 : -1;
}

void fhd_host_runlog_plot(fhd_host_runlog *r, const fhd_host_eval_result *eval) {
    char script[4200], png[4200], log[4200];
    snprintf(script, sizeof script, "%s/learning_curve.gp", r->dir);
    snprintf(png, sizeof png, "%s/learning_curve.png", r->dir);
    snprintf(log, sizeof log, "%s/learning_curve.log", r->dir);
    if (!find_in_path("gnuplot")) {
        fprintf(stderr, "warning: gnuplot not found on PATH; %s not written\n", png);
        return;
    }
    fflush(r->episodes);
    if (write_plot_script(r, eval, script, png) != 0) {
        fprintf(stderr, "warning: cannot write %s: %s; %s not written\n", script, strerror(errno),
                png);
        return;
    }
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, STDIN_FILENO, "/dev/null", O_RDONLY, 0);
    posix_spawn_file_actions_addopen(&fa, STDOUT_FILENO, log, O_WRONLY | O_CREAT | O_TRUNC, 0666);
    posix_spawn_file_actions_adddup2(&fa, STDOUT_FILENO, STDERR_FILENO);
    char *argv[] = {"gnuplot", script, NULL};
    pid_t pid;
    int rc = posix_spawnp(&pid, "gnuplot", &fa, NULL, argv, environ);
    posix_spawn_file_actions_destroy(&fa);
    int status = 0;
    if (rc == 0) {
        while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
            ;
    }
    if (rc != 0 || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        fprintf(stderr, "warning: gnuplot failed (see %s); %s not written\n", log, png);
        return;
    }
    unlink(log);
}

int fhd_host_runlog_close(fhd_host_runlog *r) {
    if (r->metrics && fclose(r->metrics) != 0)
        r->io_error = 1;
    if (r->episodes && fclose(r->episodes) != 0)
        r->io_error = 1;
    r->metrics = r->episodes = NULL;
    free(r->curve);
    r->curve = NULL;
    r->curve_n = r->curve_cap = 0;
    if (r->io_error) {
        fprintf(stderr, "error: writing the run's files in %s failed\n", r->dir);
        return FHD_EXIT_IO;
    }
    return FHD_EXIT_OK;
}
