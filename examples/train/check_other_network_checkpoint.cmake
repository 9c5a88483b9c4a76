# ctest helper (examples/pipeprop_train_reliability.cmake): a checkpoint of one network given to a run of another
# (--network cnn's to --network cnn-on, whose group norm and Online Norm parameters have the same shapes) is refused
# with exit 1 and a message naming both networks, before anything is trained or written.
#   cmake -DPROGRAM=... -DDATA=... -DWORK=... -P check_other_network_checkpoint.cmake
file(REMOVE_RECURSE ${WORK})
file(MAKE_DIRECTORY ${WORK})
set(quick --batch 32 --max-samples 64 --max-test-samples 64 --progress log --data ${DATA})
execute_process(COMMAND ${PROGRAM} ${quick} --network cnn --checkpoint-out ${WORK}/cnn
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "the cnn run exited with ${rc}:\n${out}\n${err}")
endif()
file(SHA256 ${WORK}/cnn/manifest.txt before)
execute_process(COMMAND ${PROGRAM} ${quick} --network cnn-on --epochs 2 --checkpoint-in ${WORK}/cnn
                        --checkpoint-out ${WORK}/cnn
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
message("---- cnn-on from the cnn checkpoint: exit code ${rc} ----\n${out}\n${err}")
if(NOT rc EQUAL 1)
  message(FATAL_ERROR "exit code ${rc}, expected 1")
endif()
if(NOT "${err}" MATCHES "cnn: a checkpoint of --network cnn, but this run trains --network cnn-on")
  message(FATAL_ERROR "the message does not name both networks")
endif()
file(SHA256 ${WORK}/cnn/manifest.txt after)
if(NOT before STREQUAL after)
  message(FATAL_ERROR "the refused run changed the checkpoint")
endif()
