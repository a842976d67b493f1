/* The public header must compile cleanly as C++17 with -Wall -Wextra -pedantic -Werror. */
#include "foxhunt_dqn.h"

int fhd_header_check(void);
int fhd_header_check(void) {
    fhd_error e = FHD_ERROR_INIT;
    fhd_act_args a = FHD_ACT_ARGS_INIT;
    return (int)(e.struct_size + a.struct_size) + FHD_ERR_INTERNAL;
}
