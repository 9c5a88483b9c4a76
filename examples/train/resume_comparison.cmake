# Shared body of examples/train/check_resume.cmake and check_resume_pb.cmake (ctest -P scripts): a run resumed from a
# checkpoint continues bit-identically.
#   A: 2 epochs straight, checkpoint a       B: 1 epoch, checkpoint b       C: from b to 2 epochs, checkpoint c
# Every .npy file of a and c must be byte-identical, the result lines of A and C must agree on every key in `keys`,
# and the first epoch alone must differ from two (so that the comparison can fail).
# Set by the including script: PROGRAM, WORK, quick (options of every run), min_tensors, tensors_what, keys, label;
# optionally changed_tensor (a tensor the second epoch must change; default layer_01.weight.npy).
file(REMOVE_RECURSE ${WORK})
file(MAKE_DIRECTORY ${WORK})

function(run_program name)
  execute_process(COMMAND ${PROGRAM} ${quick} ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "run ${name} failed (exit code ${rc}):\n${out}\n${err}")
  endif()
  string(STRIP "${out}" out)
  string(REGEX MATCH "[^\n]*$" last "${out}")
  message("${name}: ${last}")
  set(result_${name} "${last}" PARENT_SCOPE)
endfunction()

run_program(a --epochs 2 --checkpoint-out ${WORK}/a)
run_program(b --epochs 1 --checkpoint-out ${WORK}/b)
run_program(c --epochs 2 --checkpoint-in ${WORK}/b --checkpoint-out ${WORK}/c)

include(${CMAKE_CURRENT_LIST_DIR}/same_tensors.cmake)
same_tensors(${WORK}/a ${WORK}/c ${min_tensors} "${tensors_what}")
set(count ${same_tensors_count})
foreach(key IN LISTS keys)
  string(REGEX MATCH "\"${key}\":[^,}]*" va "${result_a}")
  string(REGEX MATCH "\"${key}\":[^,}]*" vc "${result_c}")
  if(va STREQUAL "" OR NOT va STREQUAL vc)
    message(FATAL_ERROR "${key}: straight run '${va}', resumed run '${vc}'")
  endif()
endforeach()
if(NOT DEFINED changed_tensor)
  set(changed_tensor layer_01.weight.npy)
endif()
file(SHA256 ${WORK}/a/${changed_tensor} h2)
file(SHA256 ${WORK}/b/${changed_tensor} h1)
if(h1 STREQUAL h2)
  message(FATAL_ERROR "the second epoch did not change the weights")
endif()
message("${label}: ${count} tensors bit-identical")
