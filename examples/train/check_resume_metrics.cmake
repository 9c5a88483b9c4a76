# ctest helper for examples/pipeprop_train_inputs.cmake: a run resumed from a checkpoint with the same --metrics file
# appends to it (the earlier epochs' lines were erased). A: epochs 1-2 straight; B: epoch 1 with a
# checkpoint, then epoch 2 resumed from it, both with one metrics file: B's file has the lines of epochs 1 and 2, in
# order; the 'epoch' and 'train_loss' of each equal A's. C: resuming from the epoch-1 checkpoint once more into B's
# file (now holding epochs 1 and 2) drops its epoch-2 line and writes it again: still two lines.
# Inputs: PROGRAM, DATA, WORK.
set(quick --network mlp --batch 32 --max-samples 320 --max-test-samples 100 --progress log --data ${DATA})
file(REMOVE_RECURSE ${WORK})
file(MAKE_DIRECTORY ${WORK})

function(run_program name)
  execute_process(COMMAND ${PROGRAM} ${quick} ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "run ${name} failed (exit code ${rc}):\n${out}\n${err}")
  endif()
endfunction()

# The lines of a metrics file reduced to their epoch and train_loss.
function(epochs_and_losses file out_var)
  file(STRINGS ${file} lines)
  set(result "")
  foreach(line IN LISTS lines)
    string(REGEX MATCH "\"epoch\":[0-9]+" e "${line}")
    string(REGEX MATCH "\"train_loss\":[^,}]*" l "${line}")
    list(APPEND result "${e} ${l}")
  endforeach()
  set(${out_var} "${result}" PARENT_SCOPE)
endfunction()

run_program(a --epochs 2 --metrics ${WORK}/a.jsonl)
run_program(b1 --epochs 1 --metrics ${WORK}/b.jsonl --checkpoint-out ${WORK}/ckpt1)
file(COPY ${WORK}/ckpt1 DESTINATION ${WORK}/keep)
run_program(b2 --epochs 2 --metrics ${WORK}/b.jsonl --checkpoint-in ${WORK}/ckpt1 --checkpoint-out ${WORK}/ckpt1)
epochs_and_losses(${WORK}/a.jsonl a)
epochs_and_losses(${WORK}/b.jsonl b)
list(LENGTH a na)
if(NOT na EQUAL 2 OR NOT "${a}" STREQUAL "${b}")
  message(FATAL_ERROR "resumed metrics file differs from the straight run's:\n  straight: ${a}\n  resumed:  ${b}")
endif()
run_program(c --epochs 2 --metrics ${WORK}/b.jsonl --checkpoint-in ${WORK}/keep/ckpt1)
epochs_and_losses(${WORK}/b.jsonl c)
if(NOT "${a}" STREQUAL "${c}")
  message(FATAL_ERROR "resuming again from epoch 1:\n  straight: ${a}\n  resumed:  ${c}")
endif()
message("resumed metrics: ${b}")
