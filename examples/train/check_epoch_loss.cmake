# ctest helper for examples/pipeprop_train_pb.cmake: the epoch's training loss is the same in the metrics file and in
# the JSON result, and the same for the sequential and the concurrent executor (PB learns a micro-batch's loss when
# its backward completes, some only in the end-of-epoch drain; every one of them counts). Inputs: PROGRAM, DATA, WORK.
set(quick --mode pb --network mlp --reference-batch 32 --max-samples 500 --max-test-samples 100 --progress none
          --data ${DATA})
file(REMOVE_RECURSE ${WORK})
file(MAKE_DIRECTORY ${WORK})
foreach(executor sequential concurrent)
  execute_process(COMMAND ${PROGRAM} ${quick} --executor ${executor} --metrics ${WORK}/${executor}.jsonl
                  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "${executor} run failed (exit code ${rc}):\n${out}\n${err}")
  endif()
  string(STRIP "${out}" out)
  string(REGEX MATCH "[^\n]*$" last "${out}")
  string(REGEX MATCH "\"train_loss\":[^,}]*" result_loss "${last}")
  file(READ ${WORK}/${executor}.jsonl metrics)
  string(REGEX MATCH "\"train_loss\":[^,}]*" metrics_loss "${metrics}")
  if(result_loss STREQUAL "" OR NOT result_loss STREQUAL metrics_loss)
    message(FATAL_ERROR "${executor}: JSON result ${result_loss}, metrics file ${metrics_loss}")
  endif()
  set(loss_${executor} "${result_loss}")
endforeach()
if(NOT loss_sequential STREQUAL loss_concurrent)
  message(FATAL_ERROR "sequential ${loss_sequential}, concurrent ${loss_concurrent}")
endif()
message("epoch loss: ${loss_concurrent} in the result and the metrics file of both executors")
