/* host_bench.c - `fhd-host bench` (not yet implemented). */
#include <stdio.h>

#include "host_cmds.h"
#include "host_plugin.h"

int fhd_cmd_bench(int argc, char **argv) {
    fprintf(stderr, "error: fhd-host bench is not implemented yet\n");
    return FHD_EXIT_FAILURE;
}
