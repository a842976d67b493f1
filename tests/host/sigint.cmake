# sigint.cmake - Ctrl-C (SIGINT) during `fhd-host train` stops the loop, saves the checkpoint
# (or warns once that checkpoints are unsupported), flushes the run's files and exits 130.
include(${CMAKE_CURRENT_LIST_DIR}/host_common.cmake)
# also: CONFIG_DIR (configs/), TIMEOUT (coreutils timeout)
file(REMOVE_RECURSE ${WORK})
file(MAKE_DIRECTORY ${WORK})

# a run far longer than the test; SIGINT after 3 s, SIGKILL 30 s later if it ignores it.
# --foreground: the signal goes to the host alone. Without it timeout signals the child and then
# its own process group, so the host can get two SIGINTs, and the second one ends it at once
# (SA_RESETHAND: a second Ctrl-C means "stop now") before it has saved.
fhd_run(s COMMAND ${TIMEOUT} --foreground --preserve-status -s INT -k 30 3
        ${HOST} train --env CartPole-v1 --config ${CONFIG_DIR}/CartPole-v1.json
        --plugin ${PLUGIN} --steps 100000000 --log-every 500 --out ${WORK}/run)
if(NOT s_RC EQUAL 130)
  fhd_t_fail("exit code ${s_RC} after SIGINT, expected 130: ${s_ERR}")
else()
  fhd_t_pass()
endif()
if(NOT s_OUT MATCHES "interrupted at [0-9]+ env steps")
  fhd_t_fail("no \"interrupted at N env steps\" line: ${s_OUT}")
else()
  fhd_t_pass()
endif()
if(s_OUT MATCHES "eval_return_mean=")
  fhd_t_fail("an interrupted run must not evaluate")
endif()
if(NOT EXISTS ${WORK}/run/checkpoint.safetensors AND NOT s_ERR MATCHES "warning: checkpoints are not supported")
  fhd_t_fail("no checkpoint and no warning after SIGINT: ${s_ERR}")
else()
  fhd_t_pass()
endif()
# the files are complete: the last metrics line is whole JSON with the final step count
file(STRINGS ${WORK}/run/metrics.jsonl lines)
list(LENGTH lines n)
if(n LESS 1)
  fhd_t_fail("metrics.jsonl is empty after SIGINT")
else()
  list(GET lines -1 last)
  string(JSON steps ERROR_VARIABLE jerr GET "${last}" env_steps)
  if(jerr OR NOT s_OUT MATCHES "interrupted at ${steps} env steps")
    fhd_t_fail("the last metrics line (${last}) does not hold the interrupted step count")
  else()
    fhd_t_pass()
  endif()
endif()
fhd_t_finish()
