/* host_train.c - `fhd-host train` and `fhd-host eval` (not yet implemented). */
#include <stdio.h>

#include "host_cmds.h"
#include "host_plugin.h"

int fhd_cmd_train(int argc, char **argv) {
    fprintf(stderr, "error: fhd-host train is not implemented yet\n");
    return FHD_EXIT_FAILURE;
}

int fhd_cmd_eval(int argc, char **argv) {
    fprintf(stderr, "error: fhd-host eval is not implemented yet\n");
    return FHD_EXIT_FAILURE;
}
