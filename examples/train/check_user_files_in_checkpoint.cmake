# ctest helper for examples/pipeprop_train_reliability.cmake: saving a checkpoint never destroys the user's files.
# 1. A --metrics file inside the --checkpoint-out directory (a resumed run that saves twice into the directory it
#    writes its metrics to) holds every epoch's line afterwards, and a file of the user's there is untouched.
# 2. A --checkpoint-out that is a symbolic link stays a link; the directory it points to holds the new checkpoint,
#    which resumes.
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

# 1. metrics inside the checkpoint directory
run_program(first --epochs 1 --checkpoint-out ${WORK}/ck)
file(WRITE ${WORK}/ck/notes.txt "keep me\n")
run_program(resumed --epochs 3 --checkpoint-in ${WORK}/ck --checkpoint-out ${WORK}/ck --metrics ${WORK}/ck/metrics.jsonl)
if(NOT EXISTS ${WORK}/ck/metrics.jsonl)
  message(FATAL_ERROR "the --metrics file inside the --checkpoint-out directory is gone after the run")
endif()
file(STRINGS ${WORK}/ck/metrics.jsonl lines REGEX "^\\{\"epoch\":")
list(LENGTH lines n)
if(NOT n EQUAL 2 OR NOT "${lines}" MATCHES "^\\{\"epoch\":2,.*;\\{\"epoch\":3,")
  message(FATAL_ERROR "the --metrics file inside the checkpoint directory should hold epochs 2 and 3, holds:\n"
                      "${lines}")
endif()
file(READ ${WORK}/ck/notes.txt notes)
if(NOT notes STREQUAL "keep me\n")
  message(FATAL_ERROR "a file of the user's inside the checkpoint directory was changed or removed")
endif()
file(GLOB leftovers ${WORK}/ck.*)
if(leftovers)
  message(FATAL_ERROR "leftover save directories: ${leftovers}")
endif()

# 2. --checkpoint-out through a symbolic link
file(MAKE_DIRECTORY ${WORK}/disk)
file(CREATE_LINK ${WORK}/disk/real ${WORK}/link SYMBOLIC)
run_program(link1 --epochs 1 --checkpoint-out ${WORK}/link)
run_program(link2 --epochs 2 --checkpoint-in ${WORK}/link --checkpoint-out ${WORK}/link)
if(NOT IS_SYMLINK ${WORK}/link)
  message(FATAL_ERROR "the --checkpoint-out symbolic link was replaced")
endif()
file(READ ${WORK}/disk/real/manifest.txt manifest)
if(NOT manifest MATCHES "scalar epoch 2\n")
  message(FATAL_ERROR "the directory the link points to does not hold the epoch-2 checkpoint:\n${manifest}")
endif()
run_program(link3 --epochs 3 --checkpoint-in ${WORK}/link)
message("the metrics file and the user's file inside the checkpoint directory survived; the link was written through")
