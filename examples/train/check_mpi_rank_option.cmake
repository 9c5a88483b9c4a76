# ctest script for examples/pipeprop_train_mpi.cmake: a rank whose own command line is refused ends the job at once.
# With MPIRUN (the mpirun command, without -np), PROGRAM, DATA, WORK: mpirun -np 2 runs a wrapper that gives rank 1
# one option more than rank 0: a bad value (--lr nan) and an option twice (--seed). Each job must end with exit code
# 2 within a few seconds (not after --remote-timeout, which is 30 s here), rank 1 naming the option and rank 0 naming
# rank 1. Rank 1 used to exit alone while rank 0 waited for it until the timeout, and the job ended with exit 1 and
# "a reduction over every rank did not complete", never naming the option.
file(REMOVE_RECURSE ${WORK})
file(MAKE_DIRECTORY ${WORK})
set(wrapper ${WORK}/rank1_adds.sh)
file(WRITE ${wrapper} [=[
# run "$@", with the options of RANK1_ADDS (space-separated) appended on rank 1 only
rank=${OMPI_COMM_WORLD_RANK:-${PMI_RANK:-0}}
if [ "$rank" = 1 ]; then exec "$@" $RANK1_ADDS; fi
exec "$@"
]=])
set(quick --mode pb --network mlp --batch 1 --reference-batch 32 --seed 1 --max-samples 64 --max-test-samples 10
          --progress none --remote-timeout 30 --transport mpi --data ${DATA})
foreach(case IN ITEMS "--lr nan@rank 1: --lr: must be a finite number, got nan" "--seed 7@rank 1: --seed: ")
  string(FIND "${case}" "@" at)
  string(SUBSTRING "${case}" 0 ${at} adds)
  math(EXPR at "${at} + 1")
  string(SUBSTRING "${case}" ${at} -1 expected)
  string(TIMESTAMP start "%s")
  execute_process(COMMAND ${CMAKE_COMMAND} -E env "RANK1_ADDS=${adds}" ${MPIRUN} -np 2 -x RANK1_ADDS /bin/sh ${wrapper}
                          ${PROGRAM} ${quick}
                  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err TIMEOUT 120)
  string(TIMESTAMP end "%s")
  math(EXPR seconds "${end} - ${start}")
  message("---- rank 1 adds ${adds}: exit code ${rc} after ${seconds} s ----\n${out}\n${err}")
  if(NOT rc EQUAL 2)
    message(FATAL_ERROR "rank 1 adds ${adds}: exit code ${rc}, expected 2")
  endif()
  if(seconds GREATER 20)
    message(FATAL_ERROR "rank 1 adds ${adds}: the job took ${seconds} s (rank 0 waited for rank 1)")
  endif()
  if(NOT err MATCHES "${expected}")
    message(FATAL_ERROR "rank 1 adds ${adds}: no message matching '${expected}'")
  endif()
  if(NOT err MATCHES "rank 1 refused its command line")
    message(FATAL_ERROR "rank 1 adds ${adds}: rank 0 does not name rank 1")
  endif()
endforeach()
message("a rank's own bad option ends the job at once, named by that rank (exit 2)")

# --log-stage-norms under --transport mpi (every rank): refused, exit 2 naming the option (the metrics lines would
# carry the initial norms of the stages other ranks train).
execute_process(COMMAND ${MPIRUN} -np 2 ${PROGRAM} ${quick} --log-stage-norms --metrics ${WORK}/m.jsonl --log-every 10
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err TIMEOUT 120)
if(NOT rc EQUAL 2 OR NOT err MATCHES "--log-stage-norms: is not available with --transport mpi")
  message(FATAL_ERROR "--log-stage-norms with --transport mpi: exit code ${rc}, expected 2 naming the option:\n${out}\n${err}")
endif()
message("--log-stage-norms with --transport mpi: refused (exit 2)")
