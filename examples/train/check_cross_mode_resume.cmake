# ctest helper for examples/pipeprop_train_pb.cmake: a --mode pb checkpoint resumed with --mode sgd or --mode sync is
# refused (exit 1, a message naming both modes; its per-micro-batch velocity would wreck batch SGD), and the
# checkpoint is left as it was; an sgd checkpoint still resumes in --mode sync and in --mode pb (weights only, with a
# note). Inputs: PROGRAM, DATA, WORK.
set(quick --network mlp --max-samples 320 --max-test-samples 100 --progress log --data ${DATA})
file(REMOVE_RECURSE ${WORK})
file(MAKE_DIRECTORY ${WORK})

function(run_program expect name)
  execute_process(COMMAND ${PROGRAM} ${quick} ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL expect)
    message(FATAL_ERROR "${name}: exit code ${rc}, expected ${expect}:\n${out}\n${err}")
  endif()
  set(out_${name} "${out}${err}" PARENT_SCOPE)
endfunction()

run_program(0 pb --mode pb --batch 2 --stages 2,4 --reference-batch 32 --checkpoint-out ${WORK}/pb)
file(SHA256 ${WORK}/pb/manifest.txt before)
foreach(other sgd sync)
  run_program(1 ${other} --mode ${other} --batch 32 --epochs 2 --checkpoint-in ${WORK}/pb --checkpoint-out ${WORK}/pb)
  if(NOT out_${other} MATCHES "a --mode pb checkpoint cannot be resumed with --mode ${other}")
    message(FATAL_ERROR "--mode ${other} from a pb checkpoint: no refusal naming both modes:\n${out_${other}}")
  endif()
  if(out_${other} MATCHES "epoch 2/2")
    message(FATAL_ERROR "--mode ${other} trained from a pb checkpoint:\n${out_${other}}")
  endif()
endforeach()
file(SHA256 ${WORK}/pb/manifest.txt after)
if(NOT before STREQUAL after)
  message(FATAL_ERROR "the refused runs changed the pb checkpoint")
endif()

run_program(0 sgd1 --mode sgd --batch 32 --checkpoint-out ${WORK}/sgd)
run_program(0 sync2 --mode sync --batch 32 --epochs 2 --checkpoint-in ${WORK}/sgd)
run_program(0 pb2 --mode pb --batch 2 --stages 2,4 --reference-batch 32 --epochs 2 --checkpoint-in ${WORK}/sgd)
if(NOT out_pb2 MATCHES "note: --mode pb starts from the weights and data position of the --mode sgd checkpoint")
  message(FATAL_ERROR "--mode pb from an sgd checkpoint: no note:\n${out_pb2}")
endif()
message("cross-mode resume: pb -> sgd / sync refused, sgd -> sync / pb resumed")
