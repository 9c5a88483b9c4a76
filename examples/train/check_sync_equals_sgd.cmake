# ctest helper for examples/pipeprop_train_llama.cmake: llama-tiny trained by --mode sync with one micro-batch per
# step (m = 1), cut into 3 stages inside the transformer blocks (4 for the virtual-stage schedules), gives the same
# train loss and validation loss as --mode sgd (the sequential trainer), to every printed digit, under each schedule
# with 2BP on and with 1F1B and ZB-V with 2BP off: pipelining changes where the ops run, not what they compute (AdamW acts per element). Inputs: PROGRAM,
# DATA (text corpus directory).
set(common --network llama-tiny --batch 8 --max-samples 96 --max-test-samples 32 --progress none --data ${DATA})
function(losses_of out_var)
  execute_process(COMMAND ${PROGRAM} ${common} ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "${ARGN}: exit code ${rc}:\n${out}\n${err}")
  endif()
  string(STRIP "${out}" out)
  string(REGEX MATCH "[^\n]*$" last "${out}")
  string(REGEX MATCH "\"train_loss\":([^,}]*)" m "${last}")
  set(train ${CMAKE_MATCH_1})
  string(REGEX MATCH "\"validation_loss\":([^,}]*)" m "${last}")
  set(validation ${CMAKE_MATCH_1})
  if(train STREQUAL "" OR validation STREQUAL "")
    message(FATAL_ERROR "${ARGN}: no train_loss / validation_loss in the result line ${last}")
  endif()
  set(${out_var} "train ${train} validation ${validation}" PARENT_SCOPE)
endfunction()
losses_of(reference --mode sgd)
message("--mode sgd: ${reference}")
# The virtual-stage schedules (2 stages per device) on 4 stages: 2 devices.
foreach(run "gpipe;on;3,9" "1f1b;on;3,9" "zb_h1;on;3,9" "zb_h2;on;3,9" "1f1b;off;3,9" "interleaved_1f1b;on;3,9,14"
            "zb_v;on;3,9,14" "zb_v;off;3,9,14")
  list(GET run 0 schedule)
  list(GET run 1 two)
  list(GET run 2 cut)
  losses_of(got --mode sync --micro-batches 1 --stages ${cut} --schedule ${schedule} --two-stage-bp ${two})
  message("--mode sync --schedule ${schedule} --two-stage-bp ${two}: ${got}")
  if(NOT got STREQUAL reference)
    message(FATAL_ERROR "--mode sync (${schedule}, 2BP ${two}, m = 1) differs from --mode sgd: ${got} vs ${reference}")
  endif()
endforeach()
