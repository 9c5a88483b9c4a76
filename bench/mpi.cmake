# bench/mpi/mpi_pipeline.cpp: only with -DPIPEPROP_WITH_MPI=ON; run by bench/mpi_pipeline.sh.
if(PIPEPROP_WITH_MPI)
  add_executable(mpi_pipeline ${CMAKE_CURRENT_SOURCE_DIR}/mpi/mpi_pipeline.cpp)
  target_link_libraries(mpi_pipeline PRIVATE pipeprop::mpi pipeprop_build_flags)
  target_include_directories(mpi_pipeline PRIVATE ${CMAKE_CURRENT_SOURCE_DIR} ${PROJECT_SOURCE_DIR}/examples)
endif()
