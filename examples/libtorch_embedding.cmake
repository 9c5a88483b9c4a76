# examples/libtorch/libtorch_embedding.cpp: the PB engine training weights that libtorch owns, fed by a torch DataLoader
# (docs/howto-libtorch.md). Built only when libtorch's CMake package is found (Debian: libtorch-dev); the
# library itself never needs libtorch. The program lives in a subdirectory so that the *.cpp glob of
# examples/CMakeLists.txt does not build it without libtorch.
# Tests: example_libtorch_embedding (the torch-owned weights equal pipeprop's own run bit for bit, torch's evaluation
# agrees with pipeprop's) and example_libtorch_embedding_order_matters (fed in torch's RandomSampler order, the same
# check reports different weights: it can fail).
find_package(Torch QUIET)
if(Torch_FOUND)
  find_package(CLI11 REQUIRED)
  message(STATUS "pipeprop: libtorch ${Torch_VERSION} found: building examples/libtorch/libtorch_embedding.cpp")
  add_executable(libtorch_embedding ${CMAKE_CURRENT_SOURCE_DIR}/libtorch/libtorch_embedding.cpp)
  target_link_libraries(libtorch_embedding PRIVATE pipeprop::pipeprop pipeprop_build_flags CLI11::CLI11
                                                   ${TORCH_LIBRARIES})
  if(PIPEPROP_BUILD_TESTS)
    add_test(NAME example_libtorch_embedding COMMAND libtorch_embedding)
    set_tests_properties(example_libtorch_embedding PROPERTIES ENVIRONMENT "OPENBLAS_NUM_THREADS=1" TIMEOUT 300)
    add_test(NAME example_libtorch_embedding_order_matters
             COMMAND libtorch_embedding --samples 300 --order random)
    set_tests_properties(example_libtorch_embedding_order_matters PROPERTIES ENVIRONMENT "OPENBLAS_NUM_THREADS=1"
                         TIMEOUT 300 PASS_REGULAR_EXPRESSION "weights differ from pipeprop's own run")
  endif()
else()
  message(STATUS "pipeprop: libtorch not found (Debian: libtorch-dev; or set Torch_DIR): the libtorch embedding "
                 "example (examples/libtorch/) and its tests are not built")
endif()
