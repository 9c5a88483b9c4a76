# ctest helper (examples/pipeprop_train_pb.cmake): a run that diverges after writing a checkpoint exits 1 and leaves
# that checkpoint byte-identical (docs/main-program.md: "the last good checkpoint is left as it was").
#   cmake -DPROGRAM=... -DDATA=... -DWORK=... "-DOPTIONS=a|b|c" [-DSTEP_EPOCHS=1 -DGAMMA=1e6 -DMESSAGE=regex]
#         -P check_divergence_keeps_checkpoint.cmake
# OPTIONS ('|'-separated) are the run's options; a step schedule multiplies the learning rate by GAMMA every
# STEP_EPOCHS epochs (default: by 1e6 after epoch 1), so epoch 1 trains and is checkpointed and epoch 2 diverges.
# MESSAGE: how the divergence is reported after "training diverged: " (default: a loss became NaN or infinite; a
# run whose epoch 2 is one update, or one PB micro-batch, diverges in an update no loss is computed after: the state
# or evaluation loss at the end of epoch 2 is not finite). The checkpoint left by the diverging run must equal, file
# for file and byte for byte, the one of a run of epoch 1 alone (the program is deterministic): nothing was written
# into it after epoch 1.
string(REPLACE "|" ";" OPTIONS "${OPTIONS}")
if(NOT DEFINED STEP_EPOCHS)
  set(STEP_EPOCHS 1)
endif()
if(NOT DEFINED GAMMA)
  set(GAMMA 1e6)
endif()
if(NOT DEFINED MESSAGE)
  set(MESSAGE "the loss [^\n]*became (NaN|infinite)")
endif()
file(REMOVE_RECURSE ${WORK})
file(MAKE_DIRECTORY ${WORK})
set(common ${OPTIONS} --data ${DATA} --lr-schedule step --lr-step-epochs ${STEP_EPOCHS} --lr-gamma ${GAMMA}
    --progress log)

execute_process(COMMAND ${PROGRAM} ${common} --epochs 2 --checkpoint-out ${WORK}/diverged
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
message("---- diverging run: exit code ${rc} ----\n${out}\n${err}")
if(NOT rc EQUAL 1)
  message(FATAL_ERROR "the diverging run exited with ${rc}, expected 1")
endif()
if(NOT "${out}${err}" MATCHES "checkpoint: saved to [^\n]*diverged.*epoch 2/2.*training diverged: .*${MESSAGE}")
  message(FATAL_ERROR "the run did not save after epoch 1 and then diverge in epoch 2 with the divergence message")
endif()
if(NOT "${err}" MATCHES "The last good checkpoint in [^\n]*diverged \\(if one was written\\) was left untouched")
  message(FATAL_ERROR "the message does not name the checkpoint left untouched")
endif()

execute_process(COMMAND ${PROGRAM} ${common} --epochs 1 --checkpoint-out ${WORK}/epoch1
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "the epoch-1 run exited with ${rc}:\n${out}\n${err}")
endif()

file(GLOB a RELATIVE ${WORK}/diverged ${WORK}/diverged/*)
file(GLOB b RELATIVE ${WORK}/epoch1 ${WORK}/epoch1/*)
list(SORT a)
list(SORT b)
if(NOT a STREQUAL b)
  message(FATAL_ERROR "the checkpoint's files differ from the epoch-1 checkpoint's:\n  ${a}\n  ${b}")
endif()
list(LENGTH a count)
if(count LESS 2)
  message(FATAL_ERROR "the checkpoint holds ${count} files")
endif()
foreach(f IN LISTS a)
  file(SHA256 ${WORK}/diverged/${f} ha)
  file(SHA256 ${WORK}/epoch1/${f} hb)
  if(NOT ha STREQUAL hb)
    message(FATAL_ERROR "${f} differs from the epoch-1 checkpoint's (written after the divergence?)")
  endif()
endforeach()
message("the checkpoint after the divergence equals the epoch-1 checkpoint: ${count} files, byte for byte")
