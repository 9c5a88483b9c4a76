# The main program's --transport mpi (examples/train/check_mpi_train.cmake): PB on 2 and 3 ranks
# equals one process, a resumed multi-rank run equals an uninterrupted one, errors are said once. Only in a build
# with -DPIPEPROP_WITH_MPI=ON (pipeprop_train.cmake links MPI then).
if(PIPEPROP_BUILD_TESTS AND PIPEPROP_WITH_MPI)
  add_test(NAME pipeprop_train_mpi
           COMMAND ${CMAKE_COMMAND}
                   "-DMPIRUN=${MPIEXEC_EXECUTABLE};--allow-run-as-root;--oversubscribe;${MPIEXEC_PREFLAGS}"
                   -DPROGRAM=$<TARGET_FILE:pipeprop_train> -DDATA=${pipeprop_train_data}
                   -DWORK=${CMAKE_CURRENT_BINARY_DIR}/pipeprop_train_mpi
                   -P ${CMAKE_CURRENT_SOURCE_DIR}/train/check_mpi_train.cmake)
  set_tests_properties(pipeprop_train_mpi PROPERTIES ENVIRONMENT "OPENBLAS_NUM_THREADS=1" TIMEOUT 600 PROCESSORS 2)
endif()
if(PIPEPROP_BUILD_TESTS AND PIPEPROP_WITH_MPI)
  # A rank whose own command line is refused (rank 1 adds --lr nan, or an option twice) ends the job at once with
  # exit 2, naming the option (examples/train/check_mpi_rank_option.cmake).
  add_test(NAME pipeprop_train_mpi_rank_bad_option
           COMMAND ${CMAKE_COMMAND}
                   "-DMPIRUN=${MPIEXEC_EXECUTABLE};--allow-run-as-root;--oversubscribe;${MPIEXEC_PREFLAGS}"
                   -DPROGRAM=$<TARGET_FILE:pipeprop_train> -DDATA=${pipeprop_train_data}
                   -DWORK=${CMAKE_CURRENT_BINARY_DIR}/pipeprop_train_mpi_rank_bad_option
                   -P ${CMAKE_CURRENT_SOURCE_DIR}/train/check_mpi_rank_option.cmake)
  set_tests_properties(pipeprop_train_mpi_rank_bad_option PROPERTIES ENVIRONMENT "OPENBLAS_NUM_THREADS=1" TIMEOUT 300
                       PROCESSORS 2)
endif()
