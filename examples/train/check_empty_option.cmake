# ctest helper (examples/pipeprop_train_reliability.cmake): an option given an empty value (OPTION "", and the
# OPTION= form) is a bad option: exit 2, a message naming the option, the usage text. An empty path used to mean
# "not given" (training from scratch, writing no file, one stage).
#   cmake -DPROGRAM=... -DDATA=... -DOPTION=--metrics "-DEXTRA=a|b" -P check_empty_option.cmake
# EXTRA ('|'-separated, no empty items: run_and_check.cmake's ARGS cannot carry an empty one) comes first, then the
# options of a quick run (so that a program which lets the empty value through ends soon), less OPTION itself (given
# twice, CLI11 would refuse the repetition instead): for --max-samples the quick run only evaluates (--epochs 0).
string(REPLACE "|" ";" EXTRA "${EXTRA}")
list(APPEND EXTRA --network mlp --progress none)
foreach(quick IN ITEMS "--max-samples|64" "--max-test-samples|10")
  string(REPLACE "|" ";" pair "${quick}")
  list(GET pair 0 name)
  if(name STREQUAL OPTION)
    if(OPTION STREQUAL "--max-samples")
      list(APPEND EXTRA --epochs 0)
    endif()
  else()
    list(APPEND EXTRA ${pair})
  endif()
endforeach()
if(NOT OPTION STREQUAL "--data")
  list(APPEND EXTRA --data ${DATA})
endif()
foreach(form IN ITEMS separate joined)
  if(form STREQUAL "separate")
    execute_process(COMMAND ${PROGRAM} ${EXTRA} ${OPTION} "" RESULT_VARIABLE rc OUTPUT_VARIABLE out
                    ERROR_VARIABLE err)
  else()
    execute_process(COMMAND ${PROGRAM} ${EXTRA} "${OPTION}=" RESULT_VARIABLE rc OUTPUT_VARIABLE out
                    ERROR_VARIABLE err)
  endif()
  message("---- ${OPTION} empty (${form}): exit code ${rc} ----\n${out}\n${err}")
  if(NOT rc EQUAL 2)
    message(FATAL_ERROR "${OPTION} \"\" (${form}): exit code ${rc}, expected 2")
  endif()
  # (CLI11 itself refuses the joined form: "1 required TEXT missing")
  if(form STREQUAL "separate")
    set(expected "${OPTION}: must not be empty")
  else()
    set(expected "${OPTION}: ")
  endif()
  if(NOT "${err}" MATCHES "${expected}.*Usage:")
    message(FATAL_ERROR "${OPTION} \"\" (${form}): no message '${expected}' with the usage text")
  endif()
endforeach()
