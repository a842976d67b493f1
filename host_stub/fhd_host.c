/* fhd_host.c - fhd-host, the reference host: loads the plugin as real hosts do and drives it. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "host_cmds.h"
#include "host_plugin.h"

static const char usage[] =
    "usage: fhd-host COMMAND [OPTIONS]\n"
    "\n"
    "commands:\n"
    "  info [--plugin PATH]                 manifest summary, negotiated ABI, usable backends\n"
    "  check-config FILE [--plugin PATH]    validate a learner config as the library does\n"
    "  train --env ENV [--config FILE] [--backend cpu|cuda|auto] [--steps N] [--envs N]\n"
    "        [--seed S] [--out DIR] [--resume CHECKPOINT] [--checkpoint-every N]\n"
    "        [--eval-episodes N] [--log-every N] [--plugin PATH]\n"
    "  eval --checkpoint FILE --env ENV [--episodes N] [--render-ascii] [--config FILE]\n"
    "       [--backend cpu|cuda|auto] [--seed S] [--plugin PATH]\n"
    "  bench --preset C0|B1|B1-sn|B2|B3 [--backend cpu|cuda] [--updates N] [--repeats N]\n"
    "        [--json] [--plugin PATH]      (fhd-host bench --help lists every option)\n"
    "\n"
    "environments: CartPole-v1, Acrobot-v1, MountainCar-v0 (Gymnasium's dynamics, in C)\n"
    "\n"
    "The plugin is --plugin PATH, else $FHD_PLUGIN, else libfoxhunt_dqn.so beside fhd-host;\n"
    "its manifest.json is read from the same directory before the library is loaded.\n"
    "\n"
    "exit codes: 0 success, 1 runtime failure, 2 bad command line, 3 plugin or manifest not\n"
    "found or invalid, 4 ABI mismatch, 5 config rejected, 6 unknown environment,\n"
    "7 output or checkpoint I/O error, 130 interrupted (checkpoint saved)\n";

const char *fhd_opt(int argc, char **argv, int *i, const char *name, int *bad) {
    const char *a = argv[*i];
    size_t n = strlen(name);
    if (strncmp(a, name, n) != 0)
        return NULL;
    if (a[n] == '=')
        return a + n + 1;
    if (a[n] != '\0')
        return NULL;
    if (*i + 1 >= argc) {
        fprintf(stderr, "error: %s needs a value\n", name);
        *bad = 1;
        return NULL;
    }
    return argv[++*i];
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fputs(usage, stderr);
        return FHD_EXIT_USAGE;
    }
    const char *cmd = argv[1];
    if (!strcmp(cmd, "-h") || !strcmp(cmd, "--help") || !strcmp(cmd, "help")) {
        fputs(usage, stdout);
        return FHD_EXIT_OK;
    }
    if (!strcmp(cmd, "info"))
        return fhd_cmd_info(argc - 1, argv + 1);
    if (!strcmp(cmd, "check-config"))
        return fhd_cmd_check_config(argc - 1, argv + 1);
    if (!strcmp(cmd, "train"))
        return fhd_cmd_train(argc - 1, argv + 1);
    if (!strcmp(cmd, "eval"))
        return fhd_cmd_eval(argc - 1, argv + 1);
    if (!strcmp(cmd, "bench"))
        return fhd_cmd_bench(argc - 1, argv + 1);
    fprintf(stderr, "error: unknown command \"%s\"; run fhd-host --help\n", cmd);
    return FHD_EXIT_USAGE;
}
