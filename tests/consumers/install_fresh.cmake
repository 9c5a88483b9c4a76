# Fixture of the consumer tests: install pipeprop from the build tree BUILD_DIR into a fresh prefix PREFIX
# (removed first, so that files no longer installed cannot hide a broken install).
# Usage: cmake -DBUILD_DIR=<build> -DPREFIX=<prefix> -P install_fresh.cmake
file(REMOVE_RECURSE "${PREFIX}")
execute_process(COMMAND "${CMAKE_COMMAND}" --install "${BUILD_DIR}" --prefix "${PREFIX}" RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "cmake --install ${BUILD_DIR} --prefix ${PREFIX} failed (${rc})")
endif()
if(NOT EXISTS "${PREFIX}/include/pipeprop/pipeprop.hpp")
  message(FATAL_ERROR "the install into ${PREFIX} has no include/pipeprop/pipeprop.hpp")
endif()
