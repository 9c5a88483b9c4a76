# Stages in several processes over MPI: tests/mpi/test_mpi_pb.cpp and test_mpi_sync.cpp under mpirun on
# this machine, P = 2 and 3 (bitwise equal to one process), and the fault cases (tests/mpi/fault.cmake). Only with -DPIPEPROP_WITH_MPI=ON
# (scripts/test.sh; OpenMPI from Debian: libopenmpi-dev, openmpi-bin). --allow-run-as-root: CI runs as root;
# --oversubscribe: more ranks than cores.
if(PIPEPROP_WITH_MPI)
  add_executable(test_mpi_pb mpi/test_mpi_pb.cpp)
  target_link_libraries(test_mpi_pb PRIVATE pipeprop::mpi pipeprop_build_flags)
  target_include_directories(test_mpi_pb PRIVATE ${CMAKE_CURRENT_SOURCE_DIR})
  target_compile_options(test_mpi_pb PRIVATE ${PIPEPROP_UNIT_TEST_FLAGS})
  set(pipeprop_mpirun ${MPIEXEC_EXECUTABLE} --allow-run-as-root --oversubscribe ${MPIEXEC_PREFLAGS})
  foreach(P 2 3)
    add_test(NAME test_mpi_pb_P${P} COMMAND ${pipeprop_mpirun} ${MPIEXEC_NUMPROC_FLAG} ${P} $<TARGET_FILE:test_mpi_pb>)
    set_tests_properties(test_mpi_pb_P${P} PROPERTIES ENVIRONMENT "OPENBLAS_NUM_THREADS=1" TIMEOUT 300
                         PROCESSORS ${P})
  endforeach()
  # The same over TCP (ob1 + tcp, what crosses hosts; no shared memory): large messages need the receiver's and
  # the sender's progress, which the executor drives by receiving until its sends completed.
  add_test(NAME test_mpi_pb_P3_tcp
           COMMAND ${pipeprop_mpirun} --mca pml ob1 --mca btl self,tcp --mca btl_tcp_if_include lo
                   ${MPIEXEC_NUMPROC_FLAG} 3 $<TARGET_FILE:test_mpi_pb>)
  set_tests_properties(test_mpi_pb_P3_tcp PROPERTIES ENVIRONMENT "OPENBLAS_NUM_THREADS=1" TIMEOUT 300 PROCESSORS 3)
  # The synchronous schedules (every kind, 2BP on and off) across P = 2 and 3 ranks.
  add_executable(test_mpi_sync mpi/test_mpi_sync.cpp)
  target_link_libraries(test_mpi_sync PRIVATE pipeprop::mpi pipeprop_build_flags)
  target_include_directories(test_mpi_sync PRIVATE ${CMAKE_CURRENT_SOURCE_DIR})
  target_compile_options(test_mpi_sync PRIVATE ${PIPEPROP_UNIT_TEST_FLAGS})
  foreach(P 2 3)
    add_test(NAME test_mpi_sync_P${P} COMMAND ${pipeprop_mpirun} ${MPIEXEC_NUMPROC_FLAG} ${P} $<TARGET_FILE:test_mpi_sync>)
    set_tests_properties(test_mpi_sync_P${P} PROPERTIES ENVIRONMENT "OPENBLAS_NUM_THREADS=1" TIMEOUT 300
                         PROCESSORS ${P})
  endforeach()
  # Faults: PB (kill, throw, stall) and the synchronous executor (throw, stall; a killed rank: mpirun, as for PB).
  foreach(case IN ITEMS pb:kill pb:throw pb:stall sync:throw sync:stall)
    string(REPLACE ":" ";" parts ${case})
    list(GET parts 0 engine)
    list(GET parts 1 fault)
    add_test(NAME test_mpi_${engine}_fault_${fault}
             COMMAND ${CMAKE_COMMAND} "-DMPIRUN=${pipeprop_mpirun};${MPIEXEC_NUMPROC_FLAG};3"
                     -DPROGRAM=$<TARGET_FILE:test_mpi_${engine}> -DFAULT=${fault}
                     -P ${CMAKE_CURRENT_SOURCE_DIR}/mpi/fault.cmake)
    set_tests_properties(test_mpi_${engine}_fault_${fault} PROPERTIES ENVIRONMENT "OPENBLAS_NUM_THREADS=1"
                         TIMEOUT 120 PROCESSORS 3)
  endforeach()
endif()
