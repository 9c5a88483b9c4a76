# ctest helper for examples/pipeprop_train_reliability.cmake: a resume trusts the checkpoint's content, not single
# manifest lines a user can edit. Inputs: PROGRAM, DATA, WORK.
# 1. A --mode pb checkpoint whose manifest line "scalar mode pb" was edited to sgd is still refused by --mode sgd
#    (its PB state gives it away), and an sgd checkpoint edited to "mode pb" is refused as edited.
# 2. A position beyond the epoch (edited to 1000000000) is refused instead of silently skipping the epoch.
# Each refusal: exit 1, a message naming the checkpoint and the contradiction.
set(quick --network mlp --max-samples 320 --max-test-samples 100 --progress log --data ${DATA})
file(REMOVE_RECURSE ${WORK})
file(MAKE_DIRECTORY ${WORK})

function(run_program name expect regex)
  execute_process(COMMAND ${PROGRAM} ${quick} ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  message("---- ${name}: exit code ${rc} ----\n${err}")
  if(NOT rc EQUAL expect OR NOT "${out}${err}" MATCHES "${regex}")
    message(FATAL_ERROR "run ${name}: exit code ${rc}, expected ${expect} and output matching '${regex}'")
  endif()
endfunction()

# Replaces the manifest line matching `from` of checkpoint `dir` by `to` (the tensor checksums are left valid).
function(edit_manifest dir from to)
  file(READ ${dir}/manifest.txt text)
  string(REGEX REPLACE "${from}" "${to}" edited "${text}")
  if(edited STREQUAL text)
    message(FATAL_ERROR "${dir}/manifest.txt has no line matching '${from}'")
  endif()
  file(WRITE ${dir}/manifest.txt "${edited}")
endfunction()

run_program(pb_save 0 "checkpoint: saved" --mode pb --reference-batch 32 --epochs 1 --checkpoint-out ${WORK}/pb)
edit_manifest(${WORK}/pb "scalar mode pb\n" "scalar mode sgd\n")
run_program(pb_as_sgd 1 "checkpoint error: .*pb: its manifest says mode sgd, but it holds PB's per-stage state"
            --batch 32 --epochs 2 --checkpoint-in ${WORK}/pb)

run_program(sgd_save 0 "checkpoint: saved" --batch 32 --epochs 1 --checkpoint-out ${WORK}/sgd)
file(COPY ${WORK}/sgd/ DESTINATION ${WORK}/sgd_position)
edit_manifest(${WORK}/sgd "scalar mode sgd\n" "scalar mode pb\n")
run_program(sgd_as_pb 1 "checkpoint error: .*sgd: its manifest says mode pb, but it does not hold PB's per-stage"
            --batch 32 --epochs 2 --checkpoint-in ${WORK}/sgd)

edit_manifest(${WORK}/sgd_position "scalar position 0\n" "scalar position 1000000000\n")
run_program(position 1 "checkpoint error: .*sgd_position: position 1000000000 lies beyond the epoch it was saved in .320 samples"
            --batch 32 --epochs 2 --checkpoint-in ${WORK}/sgd_position)
message("edited modes and positions were refused")
