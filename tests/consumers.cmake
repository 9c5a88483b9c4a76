# Consumer projects: the INTERFACE target pipeprop::pipeprop used three ways, each a tiny program
# (tests/consumers/forward_pass.cpp: one forward pass of a tiny CNN through the umbrella header):
#   consumer_find_package      find_package(pipeprop CONFIG REQUIRED) after `cmake --install` into a temporary prefix
#                              (fixture consumer_install)
#   consumer_add_subdirectory  add_subdirectory(<this repository>)
#   consumer_plain_include     one compiler command with the include dir and the dependency flags, no pipeprop CMake
# Each configures, builds and runs its program in ${CMAKE_BINARY_DIR}/consumers/<name>.
set(pipeprop_consumers_dir ${CMAKE_BINARY_DIR}/consumers)

add_test(NAME consumer_install
         COMMAND ${CMAKE_COMMAND} -DBUILD_DIR=${CMAKE_BINARY_DIR} -DPREFIX=${pipeprop_consumers_dir}/prefix
                 -P ${CMAKE_CURRENT_SOURCE_DIR}/consumers/install_fresh.cmake)
set_tests_properties(consumer_install PROPERTIES FIXTURES_SETUP pipeprop_installed LABELS consumer)

add_test(NAME consumer_find_package
         COMMAND ${CMAKE_CTEST_COMMAND}
                 --build-and-test ${CMAKE_CURRENT_SOURCE_DIR}/consumers/find_package
                                  ${pipeprop_consumers_dir}/find_package
                 --build-generator ${CMAKE_GENERATOR}
                 --build-options -DCMAKE_PREFIX_PATH=${pipeprop_consumers_dir}/prefix -DCMAKE_BUILD_TYPE=Release
                                 -DCMAKE_CXX_COMPILER=${CMAKE_CXX_COMPILER}
                 --test-command consumer_find_package)
set_tests_properties(consumer_find_package PROPERTIES
  FIXTURES_REQUIRED pipeprop_installed
  PASS_REGULAR_EXPRESSION "pipeprop consumer: forward pass OK"
  LABELS consumer TIMEOUT 300)

add_test(NAME consumer_add_subdirectory
         COMMAND ${CMAKE_CTEST_COMMAND}
                 --build-and-test ${CMAKE_CURRENT_SOURCE_DIR}/consumers/add_subdirectory
                                  ${pipeprop_consumers_dir}/add_subdirectory
                 --build-generator ${CMAKE_GENERATOR}
                 --build-options -DPIPEPROP_ROOT=${PROJECT_SOURCE_DIR} -DCMAKE_BUILD_TYPE=Release
                                 -DCMAKE_CXX_COMPILER=${CMAKE_CXX_COMPILER}
                 --test-command consumer_add_subdirectory)
set_tests_properties(consumer_add_subdirectory PROPERTIES
  PASS_REGULAR_EXPRESSION "pipeprop consumer: forward pass OK"
  LABELS consumer TIMEOUT 300)

add_test(NAME consumer_plain_include
         COMMAND sh ${CMAKE_CURRENT_SOURCE_DIR}/consumers/plain_include/build_and_run.sh ${CMAKE_CXX_COMPILER}
                 ${PROJECT_SOURCE_DIR}/include ${CMAKE_CURRENT_SOURCE_DIR}/consumers/forward_pass.cpp
                 ${pipeprop_consumers_dir}/plain_include)
set_tests_properties(consumer_plain_include PROPERTIES
  PASS_REGULAR_EXPRESSION "pipeprop consumer: forward pass OK"
  LABELS consumer TIMEOUT 300)
