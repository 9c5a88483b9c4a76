# The main program's --transport mpi: PB on 2 and 3 ranks equals one process, a resumed multi-rank run equals an
# uninterrupted one, errors are said once (train/check_mpi_train.cmake); a rank whose own command line is refused
# (rank 1 adds --lr nan, or an option twice) ends the job at once with exit 2, naming the option, and
# --log-stage-norms is refused (train/check_mpi_rank_option.cmake). Only in a build with -DPIPEPROP_WITH_MPI=ON
# (pipeprop_train.cmake links MPI then).
if(PIPEPROP_BUILD_TESTS AND PIPEPROP_WITH_MPI)
  foreach(case IN ITEMS "pipeprop_train_mpi:check_mpi_train:600" "pipeprop_train_mpi_rank_bad_option:check_mpi_rank_option:300")
    string(REPLACE ":" ";" parts "${case}")
    list(GET parts 0 name)
    list(GET parts 1 script)
    list(GET parts 2 timeout)
    add_test(NAME ${name}
             COMMAND ${CMAKE_COMMAND}
                     "-DMPIRUN=${MPIEXEC_EXECUTABLE};--allow-run-as-root;--oversubscribe;${MPIEXEC_PREFLAGS}"
                     -DPROGRAM=$<TARGET_FILE:pipeprop_train> -DDATA=${pipeprop_train_data}
                     -DWORK=${CMAKE_CURRENT_BINARY_DIR}/${name}
                     -P ${CMAKE_CURRENT_SOURCE_DIR}/train/${script}.cmake)
    set_tests_properties(${name} PROPERTIES ENVIRONMENT "OPENBLAS_NUM_THREADS=1" TIMEOUT ${timeout} PROCESSORS 2)
  endforeach()
endif()
