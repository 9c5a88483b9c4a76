# ctest script for examples/pipeprop_train_mpi.cmake: the main program's --transport mpi (issue 15 item 2), with
# MPIRUN (the mpirun command, without -np), PROGRAM, DATA, WORK. First --mode pb:
#   X: one process, 2 epochs            A2 / A3: mpirun -np 2 / 3, 2 epochs (A2 writes checkpoint a)
#   B: -np 2, 1 epoch, checkpoint b     C: -np 2, from b to 2 epochs, checkpoint c
# A2 and A3 must print the same train_loss, test_loss and test_accuracy as X (the stages on several ranks compute
# the same bits), once (rank 0 only); C the same as A2, and every .npy file of a and c must be byte-identical (a
# resumed multi-rank run equals an uninterrupted one); B must differ from A2 (so that the comparison can fail). Then
# the errors: more ranks than stages and a bad option (exit 2, said once), b resumed with 3 ranks or by one process
# (exit 1, naming the cause).
file(REMOVE_RECURSE ${WORK})
file(MAKE_DIRECTORY ${WORK})
set(quick --mode pb --network cnn --reference-batch 32 --max-samples 400 --max-test-samples 300 --progress none
          --remote-timeout 60 --data ${DATA})
set(keys train_loss test_loss test_accuracy)

function(run name expect)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err TIMEOUT 240)
  if(expect STREQUAL "0" AND NOT rc EQUAL 0)
    message(FATAL_ERROR "run ${name} failed (exit code ${rc}):\n${out}\n${err}")
  elseif(NOT expect STREQUAL "0" AND (rc EQUAL 0 OR rc MATCHES "timeout"))
    message(FATAL_ERROR "run ${name}: expected a failure, got exit code '${rc}':\n${out}\n${err}")
  endif()
  string(STRIP "${out}" stripped)
  string(REGEX MATCHALL "\\{\"mode\"[^\n]*" results "${stripped}")
  list(LENGTH results n)
  if(expect STREQUAL "0" AND NOT n EQUAL 1)
    message(FATAL_ERROR "run ${name}: ${n} result lines, expected one (rank 0's):\n${out}")
  endif()
  message("${name}: exit ${rc}: ${results}")
  set(result_${name} "${results}" PARENT_SCOPE)
  set(err_${name} "${err}" PARENT_SCOPE)
endfunction()

function(same a b)
  foreach(key IN LISTS keys)
    string(REGEX MATCH "\"${key}\":[^,}]*" va "${result_${a}}")
    string(REGEX MATCH "\"${key}\":[^,}]*" vb "${result_${b}}")
    if(va STREQUAL "" OR NOT va STREQUAL vb)
      message(FATAL_ERROR "${key}: run ${a} '${va}', run ${b} '${vb}'")
    endif()
  endforeach()
endfunction()

run(x 0 ${PROGRAM} ${quick} --epochs 2)
run(a2 0 ${MPIRUN} -np 2 ${PROGRAM} ${quick} --transport mpi --epochs 2 --checkpoint-out ${WORK}/a)
run(a3 0 ${MPIRUN} -np 3 ${PROGRAM} ${quick} --transport mpi --epochs 2)
same(x a2)
same(x a3)
if(NOT result_a2 MATCHES "\"transport\":\"mpi\",\"ranks\":\"0,0,0,1,1,1\"")
  message(FATAL_ERROR "a2: the result does not name the ranks of the stages: ${result_a2}")
endif()
run(b 0 ${MPIRUN} -np 2 ${PROGRAM} ${quick} --transport mpi --epochs 1 --checkpoint-out ${WORK}/b)
run(c 0 ${MPIRUN} -np 2 ${PROGRAM} ${quick} --transport mpi --epochs 2 --checkpoint-in ${WORK}/b
        --checkpoint-out ${WORK}/c)
same(a2 c)
string(REGEX MATCH "\"test_loss\":[^,}]*" l1 "${result_b}")
string(REGEX MATCH "\"test_loss\":[^,}]*" l2 "${result_a2}")
if(l1 STREQUAL l2)
  message(FATAL_ERROR "one epoch and two gave the same test loss (${l1}): the comparison could not fail")
endif()
include(${CMAKE_CURRENT_LIST_DIR}/same_tensors.cmake)
same_tensors(${WORK}/a ${WORK}/c 40 "both ranks' weights and velocities")
set(count ${same_tensors_count})
file(READ ${WORK}/a/ranks.txt manifest)
if(NOT manifest MATCHES "ranks 2\nepoch 2\ndirectory epoch-0002\nrank 0 rank-0: stages 0-2\nrank 1 rank-1: stages 3-5")
  message(FATAL_ERROR "manifest of a:\n${manifest}")
endif()

# --mode sync: ZB-V on 4 stages (2 devices: rank 0 runs stages 0 and 3, rank 1 stages 1 and 2) on 2 ranks, 1F1B on
# 5 stages on 3 ranks: the same results as one process; a resumed ZB-V run equals the uninterrupted one
set(sync_quick --mode sync --network cnn --batch 16 --micro-batches 4 --max-samples 320 --max-test-samples 300
               --progress none --remote-timeout 60 --data ${DATA})
run(xs 0 ${PROGRAM} ${sync_quick} --schedule zb_v --stages 2,4,6 --epochs 2)
run(as 0 ${MPIRUN} -np 2 ${PROGRAM} ${sync_quick} --schedule zb_v --stages 2,4,6 --epochs 2 --transport mpi
         --checkpoint-out ${WORK}/as)
same(xs as)
if(NOT result_as MATCHES "\"transport\":\"mpi\",\"ranks\":\"0,1,1,0\"")
  message(FATAL_ERROR "as: the result does not name the ranks of the stages: ${result_as}")
endif()
run(x1f1b 0 ${PROGRAM} ${sync_quick} --schedule 1f1b --stages 2,4,6,9 --epochs 1)
run(a1f1b 0 ${MPIRUN} -np 3 ${PROGRAM} ${sync_quick} --schedule 1f1b --stages 2,4,6,9 --epochs 1 --transport mpi)
same(x1f1b a1f1b)
run(bs 0 ${MPIRUN} -np 2 ${PROGRAM} ${sync_quick} --schedule zb_v --stages 2,4,6 --epochs 1 --transport mpi
         --checkpoint-out ${WORK}/bs)
run(cs 0 ${MPIRUN} -np 2 ${PROGRAM} ${sync_quick} --schedule zb_v --stages 2,4,6 --epochs 2 --transport mpi
         --checkpoint-in ${WORK}/bs --checkpoint-out ${WORK}/cs)
same(as cs)
same_tensors(${WORK}/as ${WORK}/cs 20 "both ranks' parameters and velocities")
file(READ ${WORK}/as/ranks.txt manifest)
if(NOT manifest MATCHES "rank 0 rank-0: stages 0,3\nrank 1 rank-1: stages 1-2")
  message(FATAL_ERROR "manifest of as:\n${manifest}")
endif()

# errors: said once, the right exit code
run(too_many 2 ${MPIRUN} -np 7 ${PROGRAM} ${quick} --transport mpi --epochs 1)
string(REGEX MATCHALL "7 ranks for 6 stages" said "${err_too_many}")
list(LENGTH said n)
if(NOT n EQUAL 1)
  message(FATAL_ERROR "too_many: 'ranks for 6 stages' said ${n} times:\n${err_too_many}")
endif()
run(bad_option 2 ${MPIRUN} -np 2 ${PROGRAM} ${quick} --transport mpi --lr nope)
string(REGEX MATCHALL "--lr: Value nope" said "${err_bad_option}")
list(LENGTH said n)
if(NOT n EQUAL 1)
  message(FATAL_ERROR "bad_option: the error said ${n} times:\n${err_bad_option}")
endif()
run(other_p 1 ${MPIRUN} -np 3 ${PROGRAM} ${quick} --transport mpi --epochs 2 --checkpoint-in ${WORK}/b)
string(REGEX MATCHALL "written by 2 ranks, this run has 3" said "${err_other_p}")
list(LENGTH said n)
if(NOT n EQUAL 1)
  message(FATAL_ERROR "other_p: the error said ${n} times:\n${err_other_p}")
endif()
run(one_process 1 ${PROGRAM} ${quick} --epochs 2 --checkpoint-in ${WORK}/b)
if(NOT err_one_process MATCHES "a checkpoint of a --transport mpi run")
  message(FATAL_ERROR "one_process: ${err_one_process}")
endif()
message("--transport mpi: pb and sync (ZB-V, 1F1B) on P = 2 and 3 equal one process; resume bit-identical "
        "(pb ${count} tensors, sync ${same_tensors_count}); errors said once")
