/* The public header must compile cleanly as C11 with -Wall -Wextra -pedantic -Werror. */
#include "foxhunt_dqn.h"

int fhd_header_check(void);
int fhd_header_check(void) {
    fhd_error e = FHD_ERROR_INIT;
    fhd_act_args a = FHD_ACT_ARGS_INIT;
    fhd_transitions t = FHD_TRANSITIONS_INIT;
    fhd_step_args s = FHD_STEP_ARGS_INIT;
    fhd_batch b = FHD_BATCH_INIT;
    fhd_obs_info o = FHD_OBS_INFO_INIT;
    return (int)(e.struct_size + a.struct_size + t.struct_size + s.struct_size + b.struct_size +
                 o.struct_size) +
           FHD_ERR_INTERNAL;
}
