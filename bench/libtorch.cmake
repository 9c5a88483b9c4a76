# bench/libtorch/libtorch_side_by_side.cpp (the CNN / ResNet-20 side-by-side trainer) and
# bench/libtorch/libtorch_llama_side_by_side.cpp (llama-tiny's) in libtorch, PyTorch's C++ frontend. Built only
# when CMake finds libtorch (Debian's libtorch-dev, installed by scripts/install-deps.sh --with-torch; its config is
# /usr/lib/x86_64-linux-gnu/cmake/Torch/TorchConfig.cmake); nothing else needs them. They read the npy files of
# side_by_side_train / llama_side_by_side_train --export with xtensor's npy I/O and do not use pipeprop itself.
find_package(Torch QUIET)
if(Torch_FOUND)
  find_package(CLI11 REQUIRED)
  message(STATUS "pipeprop bench: libtorch ${Torch_VERSION} found: building bench/libtorch/libtorch_side_by_side.cpp "
                 "and libtorch_llama_side_by_side.cpp")
  add_executable(libtorch_side_by_side ${CMAKE_CURRENT_SOURCE_DIR}/libtorch/libtorch_side_by_side.cpp)
  target_link_libraries(libtorch_side_by_side PRIVATE ${TORCH_LIBRARIES} xtensor CLI11::CLI11
                                                      pipeprop_build_flags)
  target_compile_features(libtorch_side_by_side PRIVATE cxx_std_20)
  add_executable(libtorch_llama_side_by_side ${CMAKE_CURRENT_SOURCE_DIR}/libtorch/libtorch_llama_side_by_side.cpp)
  target_link_libraries(libtorch_llama_side_by_side PRIVATE ${TORCH_LIBRARIES} xtensor CLI11::CLI11
                                                            pipeprop_build_flags)
  target_compile_features(libtorch_llama_side_by_side PRIVATE cxx_std_20)
else()
  message(STATUS "pipeprop bench: libtorch not found (Debian: libtorch-dev, scripts/install-deps.sh --with-torch): "
                 "bench/libtorch/libtorch_side_by_side.cpp and libtorch_llama_side_by_side.cpp are not built")
endif()
