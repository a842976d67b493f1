# check_learning.cmake - train ENV for STEPS env steps with SEED and the shipped config, and
# require the greedy evaluation's mean return (100 episodes) to reach THRESHOLD.
# Inputs: HOST, PLUGIN, CONFIG_DIR, ENV, SEED, STEPS, THRESHOLD, WORK.
foreach(_v HOST PLUGIN CONFIG_DIR ENV SEED STEPS THRESHOLD WORK)
  if(NOT DEFINED ${_v})
    message(FATAL_ERROR "pass -D${_v}=...")
  endif()
endforeach()
file(REMOVE_RECURSE ${WORK})
file(MAKE_DIRECTORY ${WORK})
execute_process(
  COMMAND ${HOST} train --env ${ENV} --config ${CONFIG_DIR}/${ENV}.json --plugin ${PLUGIN}
          --backend cpu --seed ${SEED} --steps ${STEPS} --log-every 5000 --out ${WORK}/run
  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
message("${out}${err}")
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "fhd-host train exited with ${rc}")
endif()
string(REGEX MATCH "eval_return_mean=(-?[0-9]+\\.[0-9]+) eval_return_std=([0-9]+\\.[0-9]+) episodes=([0-9]+)\n$"
       line "${out}")
if(NOT line)
  message(FATAL_ERROR "no final eval line")
endif()
set(mean ${CMAKE_MATCH_1})
set(episodes ${CMAKE_MATCH_3})
if(NOT episodes EQUAL 100)
  message(FATAL_ERROR "evaluated ${episodes} episodes, expected 100")
endif()
# the final metrics line must be at the requested step count
file(STRINGS ${WORK}/run/metrics.jsonl lines)
list(GET lines -1 last)
string(JSON steps GET "${last}" env_steps)
if(NOT steps EQUAL STEPS)
  message(FATAL_ERROR "trained ${steps} env steps, expected ${STEPS}")
endif()
# compare as numbers: CMake's LESS handles decimals ("474.5" < "475")
if(mean LESS THRESHOLD)
  message(FATAL_ERROR "${ENV} seed ${SEED}: greedy mean return ${mean} < ${THRESHOLD} after ${STEPS} env steps")
endif()
message("${ENV} seed ${SEED}: greedy mean return ${mean} >= ${THRESHOLD} after ${STEPS} env steps")
