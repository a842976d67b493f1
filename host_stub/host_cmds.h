/* host_cmds.h - the fhd-host subcommands. Each returns an FHD_EXIT_* code. */
#ifndef FHD_HOST_CMDS_H
#define FHD_HOST_CMDS_H

int fhd_cmd_info(int argc, char **argv);
int fhd_cmd_check_config(int argc, char **argv);
int fhd_cmd_train(int argc, char **argv);
int fhd_cmd_eval(int argc, char **argv);
int fhd_cmd_bench(int argc, char **argv);

/* Shared option parsing: returns the value of --name VALUE or --name=VALUE at argv[*i],
 * advancing *i; NULL if argv[*i] is not that option. Prints a usage error and sets *bad
 * when the value is missing. */
const char *fhd_opt(int argc, char **argv, int *i, const char *name, int *bad);

#endif
