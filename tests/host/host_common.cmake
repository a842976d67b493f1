# host_common.cmake - helpers for the fhd-host command tests (cmake -P scripts).
# Inputs: HOST (fhd-host), PLUGIN (libfoxhunt_dqn.so), WORK (a scratch directory).

foreach(_v HOST PLUGIN WORK)
  if(NOT DEFINED ${_v})
    message(FATAL_ERROR "pass -D${_v}=...")
  endif()
endforeach()

set(FHD_T_FAILED 0)
set(FHD_T_PASSED 0)

function(fhd_t_fail msg)
  message("FAIL: ${msg}")
  math(EXPR _n "${FHD_T_FAILED} + 1")
  set(FHD_T_FAILED ${_n} PARENT_SCOPE)
endfunction()

function(fhd_t_pass)
  math(EXPR _n "${FHD_T_PASSED} + 1")
  set(FHD_T_PASSED ${_n} PARENT_SCOPE)
endfunction()

# fhd_run(NAME [WORKDIR dir] COMMAND args...): runs a command; sets NAME_RC, NAME_OUT, NAME_ERR.
function(fhd_run name)
  cmake_parse_arguments(R "" "WORKDIR" "COMMAND" ${ARGN})
  if(NOT R_WORKDIR)
    set(R_WORKDIR ${WORK})
  endif()
  execute_process(COMMAND ${R_COMMAND} WORKING_DIRECTORY ${R_WORKDIR}
                  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  set(${name}_RC "${rc}" PARENT_SCOPE)
  set(${name}_OUT "${out}" PARENT_SCOPE)
  set(${name}_ERR "${err}" PARENT_SCOPE)
endfunction()

# fhd_expect_error(NAME EXPECTED_RC [ERR_REGEX] COMMAND args...): the command exits with
# EXPECTED_RC and prints exactly one line, "error: ...", on stderr (matching ERR_REGEX if given).
function(fhd_expect_error name expected)
  cmake_parse_arguments(E "" "ERR_REGEX" "COMMAND" ${ARGN})
  fhd_run(r COMMAND ${E_COMMAND})
  if(NOT "${r_RC}" STREQUAL "${expected}")
    fhd_t_fail("${name}: exit code ${r_RC}, expected ${expected}; stderr: ${r_ERR}")
  else()
    fhd_t_pass()
  endif()
  string(REGEX MATCHALL "\n" _nl "${r_ERR}")
  list(LENGTH _nl _lines)
  if(NOT _lines EQUAL 1 OR NOT r_ERR MATCHES "^error: ")
    fhd_t_fail("${name}: stderr is not one \"error: \" line: [${r_ERR}]")
  else()
    fhd_t_pass()
  endif()
  if(E_ERR_REGEX AND NOT r_ERR MATCHES "${E_ERR_REGEX}")
    fhd_t_fail("${name}: stderr does not match \"${E_ERR_REGEX}\": ${r_ERR}")
  endif()
  set(FHD_T_FAILED ${FHD_T_FAILED} PARENT_SCOPE)
  set(FHD_T_PASSED ${FHD_T_PASSED} PARENT_SCOPE)
endfunction()

# The final line of train and eval; sets NAME_MEAN, NAME_STD, NAME_EPISODES.
function(fhd_parse_eval_line name text)
  string(REGEX MATCH
         "(^|\n)eval_return_mean=(-?[0-9]+\\.[0-9]+) eval_return_std=([0-9]+\\.[0-9]+) episodes=([0-9]+)\n$"
         _m "${text}")
  if(NOT _m)
    set(${name}_MEAN "" PARENT_SCOPE)
    return()
  endif()
  set(${name}_MEAN "${CMAKE_MATCH_2}" PARENT_SCOPE)
  set(${name}_STD "${CMAKE_MATCH_3}" PARENT_SCOPE)
  set(${name}_EPISODES "${CMAKE_MATCH_4}" PARENT_SCOPE)
endfunction()

macro(fhd_t_finish)
  message("${FHD_T_PASSED} passed, ${FHD_T_FAILED} failed")
  if(FHD_T_FAILED GREATER 0)
    message(FATAL_ERROR "${FHD_T_FAILED} check(s) failed")
  endif()
endmacro()
