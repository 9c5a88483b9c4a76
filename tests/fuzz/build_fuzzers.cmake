# cmake -DSOURCE=<tests/fuzz> -DBINARY=<dir> -DCXX=<clang++> -P build_fuzzers.cmake: configures and builds the
# libFuzzer project tests/fuzz with clang (the ctest fixture fuzz_build of tests/fuzz.cmake; one job, since ctest
# runs other tests beside it).
execute_process(COMMAND ${CMAKE_COMMAND} -S ${SOURCE} -B ${BINARY} -DCMAKE_CXX_COMPILER=${CXX}
                        -DCMAKE_BUILD_TYPE=RelWithDebInfo
                RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "configuring the fuzz targets failed")
endif()
execute_process(COMMAND ${CMAKE_COMMAND} --build ${BINARY} -j1 RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "building the fuzz targets failed")
endif()
