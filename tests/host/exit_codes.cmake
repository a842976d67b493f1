# exit_codes.cmake - every bad input to `fhd-host train` / `fhd-host eval` gets its documented
# exit code (fhd-host --help) and a one-line "error: ..." on stderr, never a crash.
include(${CMAKE_CURRENT_LIST_DIR}/host_common.cmake)
# also: MANIFEST (manifest.json), CONFIG_DIR (configs/)
file(REMOVE_RECURSE ${WORK})
file(MAKE_DIRECTORY ${WORK})
set(P --plugin ${PLUGIN})
set(CFG --config ${CONFIG_DIR}/CartPole-v1.json)
set(T ${HOST} train --env CartPole-v1 ${P} ${CFG} --steps 10 --eval-episodes 1)

# ---- 2: bad command line ------------------------------------------------------------------
fhd_expect_error(no_command_name 2 COMMAND ${HOST} frobnicate)
fhd_expect_error(train_no_env 2 ERR_REGEX "--env" COMMAND ${HOST} train ${P})
fhd_expect_error(train_unknown_flag 2 ERR_REGEX "--bogus" COMMAND ${T} --bogus)
fhd_expect_error(train_missing_value 2 ERR_REGEX "--steps needs a value" COMMAND ${T} --steps)
fhd_expect_error(train_steps_text 2 ERR_REGEX "abc" COMMAND ${T} --steps abc)
fhd_expect_error(train_steps_negative 2 COMMAND ${T} --steps -5)
fhd_expect_error(train_steps_zero 2 ERR_REGEX "allowed" COMMAND ${T} --steps 0)
fhd_expect_error(train_steps_suffix 2 COMMAND ${T} --steps 10k)
fhd_expect_error(train_steps_overflow 2 COMMAND ${T} --steps 99999999999999999999999)
fhd_expect_error(train_envs_range 2 COMMAND ${T} --envs 70000)
fhd_expect_error(train_seed_text 2 COMMAND ${T} --seed 1x)
fhd_expect_error(train_seed_range 2 COMMAND ${T} --seed 9007199254740992)
fhd_expect_error(train_backend 2 ERR_REGEX "cpu, cuda, auto" COMMAND ${T} --backend gpu)
fhd_expect_error(train_eval_episodes 2 COMMAND ${T} --eval-episodes many)
fhd_expect_error(train_ckpt_every 2 COMMAND ${T} --checkpoint-every=-1)
fhd_expect_error(train_eval_only_flag 2 COMMAND ${T} --render-ascii)
fhd_expect_error(eval_no_checkpoint 2 ERR_REGEX "--checkpoint" COMMAND ${HOST} eval --env CartPole-v1 ${P})
fhd_expect_error(eval_no_env 2 COMMAND ${HOST} eval --checkpoint x ${P})
fhd_expect_error(eval_episodes_zero 2 COMMAND ${HOST} eval --checkpoint x --env CartPole-v1 --episodes 0 ${P})
fhd_expect_error(eval_train_only_flag 2 COMMAND ${HOST} eval --checkpoint x --env CartPole-v1 --steps 5 ${P})

# ---- 6: unknown environment ---------------------------------------------------------------
fhd_expect_error(train_unknown_env 6 ERR_REGEX "Pong-v5.*CartPole-v1.*Acrobot-v1.*MountainCar-v0"
                 COMMAND ${HOST} train --env Pong-v5 ${P})
fhd_expect_error(eval_unknown_env 6 ERR_REGEX "CartPole-v1"
                 COMMAND ${HOST} eval --checkpoint x --env cartpole ${P})

# ---- 5: config rejected -------------------------------------------------------------------
file(WRITE ${WORK}/syntax.json "{\"lr\": 0.001,,}")
file(WRITE ${WORK}/array.json "[1, 2]")
file(WRITE ${WORK}/range.json "{\"lr\": -1}")
file(WRITE ${WORK}/unknown.json "{\"learning_rate\": 0.001}")
set(T2 ${HOST} train --env CartPole-v1 ${P} --steps 10)
fhd_expect_error(config_missing 5 ERR_REGEX "nonexistent" COMMAND ${T2} --config ${WORK}/nonexistent.json)
fhd_expect_error(config_directory 5 COMMAND ${T2} --config ${WORK})
fhd_expect_error(config_syntax 5 ERR_REGEX "line 1" COMMAND ${T2} --config ${WORK}/syntax.json)
fhd_expect_error(config_not_object 5 COMMAND ${T2} --config ${WORK}/array.json)
fhd_expect_error(config_range 5 ERR_REGEX "\\$\\.lr" COMMAND ${T2} --config ${WORK}/range.json)
fhd_expect_error(config_unknown_key 5 ERR_REGEX "learning_rate" COMMAND ${T2} --config ${WORK}/unknown.json)
file(WRITE ${WORK}/garbage.safetensors "this is not a checkpoint")
fhd_expect_error(eval_config_missing 5 COMMAND ${HOST} eval --checkpoint ${WORK}/garbage.safetensors
                 --env CartPole-v1 ${P} --config ${WORK}/nonexistent.json)
# no default config anywhere: FHD_CONFIG_DIR and the working directory have none, and a copy
# of fhd-host and the plugin lives in a directory without configs/
file(MAKE_DIRECTORY ${WORK}/lonely/bin)
file(COPY ${HOST} ${PLUGIN} ${MANIFEST} DESTINATION ${WORK}/lonely/bin)
get_filename_component(_host_name ${HOST} NAME)
fhd_expect_error(config_no_default 5 ERR_REGEX "--config"
                 COMMAND ${CMAKE_COMMAND} -E env FHD_CONFIG_DIR=${WORK}/lonely FHD_PLUGIN=
                         ${WORK}/lonely/bin/${_host_name} train --env Acrobot-v1 --steps 10)

# ---- 3: plugin or manifest not found or invalid --------------------------------------------
fhd_expect_error(plugin_missing 3 ERR_REGEX "not found"
                 COMMAND ${T2} ${CFG} --plugin ${WORK}/nowhere/libfoxhunt_dqn.so)
file(MAKE_DIRECTORY ${WORK}/badmanifest)
file(COPY ${PLUGIN} DESTINATION ${WORK}/badmanifest)
file(WRITE ${WORK}/badmanifest/manifest.json "{not json")
get_filename_component(_lib_name ${PLUGIN} NAME)
fhd_expect_error(plugin_bad_manifest 3 ERR_REGEX "manifest"
                 COMMAND ${T2} ${CFG} --plugin ${WORK}/badmanifest/${_lib_name})
fhd_expect_error(eval_plugin_missing 3
                 COMMAND ${HOST} eval --checkpoint ${WORK}/garbage.safetensors --env CartPole-v1
                         ${CFG} --plugin ${WORK}/nowhere.so)

# ---- 4: ABI mismatch ------------------------------------------------------------------------
file(READ ${MANIFEST} _manifest)
foreach(_case major2 entry)
  file(MAKE_DIRECTORY ${WORK}/${_case})
  file(COPY ${PLUGIN} DESTINATION ${WORK}/${_case})
endforeach()
string(JSON _m2 SET "${_manifest}" abi major 2)
file(WRITE ${WORK}/major2/manifest.json "${_m2}")
string(JSON _m3 SET "${_manifest}" entry_symbol "\"fhd_other_entry\"")
file(WRITE ${WORK}/entry/manifest.json "${_m3}")
fhd_expect_error(abi_major 4 ERR_REGEX "ABI mismatch"
                 COMMAND ${T2} ${CFG} --plugin ${WORK}/major2/${_lib_name})
fhd_expect_error(abi_entry 4 ERR_REGEX "fhd_other_entry"
                 COMMAND ${T2} ${CFG} --plugin ${WORK}/entry/${_lib_name})

# ---- 7: output directory or checkpoint --------------------------------------------------
file(WRITE ${WORK}/a_file "x")
fhd_expect_error(out_not_dir 7 ERR_REGEX "a_file" COMMAND ${T} --out ${WORK}/a_file/run)
fhd_expect_error(resume_missing 7 ERR_REGEX "missing.safetensors"
                 COMMAND ${T} --out ${WORK}/r --resume ${WORK}/missing.safetensors)
fhd_expect_error(eval_checkpoint_missing 7 ERR_REGEX "missing.safetensors"
                 COMMAND ${HOST} eval --checkpoint ${WORK}/missing.safetensors --env CartPole-v1 ${P} ${CFG})
fhd_expect_error(eval_checkpoint_garbage 7 ERR_REGEX "garbage.safetensors"
                 COMMAND ${HOST} eval --checkpoint ${WORK}/garbage.safetensors --env CartPole-v1 ${P} ${CFG})
fhd_expect_error(resume_garbage 7
                 COMMAND ${T} --out ${WORK}/r2 --resume ${WORK}/garbage.safetensors)

fhd_t_finish()
