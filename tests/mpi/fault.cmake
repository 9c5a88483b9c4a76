# One fault case of tests/mpi/test_mpi_pb.cpp or test_mpi_sync.cpp: rank 1 of 3 fails (FAULT = kill, throw or stall)
# the job must end with a non-zero exit within 30 s and say which rank failed. Arguments: MPIRUN (the mpirun command
# with its -np), PROGRAM, FAULT.
string(TIMESTAMP t0 "%s")
execute_process(COMMAND ${MPIRUN} ${PROGRAM} --fault ${FAULT} 1 RESULT_VARIABLE rc OUTPUT_VARIABLE out
                ERROR_VARIABLE err TIMEOUT 90)
string(TIMESTAMP t1 "%s")
math(EXPR seconds "${t1} - ${t0}")
message(STATUS "fault ${FAULT}: exit ${rc} after ${seconds} s\n${out}${err}")
if(rc EQUAL 0 OR rc MATCHES "timeout")
  message(FATAL_ERROR "fault ${FAULT}: the job did not end with an error (exit '${rc}')")
endif()
if(seconds GREATER 30)
  message(FATAL_ERROR "fault ${FAULT}: the job took ${seconds} s to end (limit 30 s)")
endif()
if(FAULT STREQUAL "stall" AND NOT err MATCHES "no message from another process[^\n]*on rank 1")
  message(FATAL_ERROR "fault stall: no other rank reported the missing message of rank 1")
endif()
# Named by someone other than the victim: mpirun for a killed rank; for a rank that throws, another rank, which
# took its failure note (mpirun's own "MPI_ABORT was invoked" text is not relied on: OpenMPI 4.1 sometimes prints
# "ORTE_ERROR_LOG: Data unpack would read past end of buffer ... show_help.c" instead).
if(FAULT STREQUAL "kill" AND NOT "${out}${err}" MATCHES "process rank 1 [^\n]*signal 9")
  message(FATAL_ERROR "fault kill: mpirun did not name the killed rank 1")
endif()
if(FAULT STREQUAL "throw" AND NOT err MATCHES "rank [02]: pipeprop::mpi: rank [02]: rank 1 \\(stages? [0-9]+[^\n]* failed: ")
  message(FATAL_ERROR "fault throw: no other rank named rank 1 and its stages")
endif()
