# test_simd_gemm_x86_64_v3 and test_layers_image_x86_64_v3: the GEMM kernel test and the image layers' gradient
# tests compiled for x86-64-v3 (AVX2 + FMA, 8 floats per vector, 16 vector registers; the main job's build),
# whatever the build machine, so that the AVX2 register blocking (kernels/simd_gemm.hpp: its block sizes depend on
# the vector width and register count) and the AVX2 path of conv2d (layers/conv2d_direct.hpp) are tested on an
# AVX-512 machine too. The program skips
# (exit 77) on a CPU without AVX2 and FMA; tests/x86_64_v3_arch_check.cpp also refuses to compile it with AVX-512.
include(CheckCXXCompilerFlag)
check_cxx_compiler_flag(-march=x86-64-v3 PIPEPROP_TESTS_HAVE_X86_64_V3)
if(NOT PIPEPROP_TESTS_HAVE_X86_64_V3)
  return()
endif()
foreach(test IN ITEMS test_simd_gemm test_layers_image)
  add_executable(${test}_x86_64_v3 ${CMAKE_CURRENT_SOURCE_DIR}/unit/${test}.cpp
                                   ${CMAKE_CURRENT_SOURCE_DIR}/x86_64_v3_arch_check.cpp)
  # pipeprop_build_flags is left out: it adds PIPEPROP_ARCH's -march.
  target_link_libraries(${test}_x86_64_v3 PRIVATE pipeprop::pipeprop pipeprop_catch_main Catch2::Catch2)
  target_include_directories(${test}_x86_64_v3 PRIVATE ${CMAKE_CURRENT_SOURCE_DIR})
  target_compile_options(${test}_x86_64_v3 PRIVATE -Wall -Wextra -Wno-unused-parameter
                         -Wno-maybe-uninitialized -march=x86-64-v3 ${PIPEPROP_UNIT_TEST_FLAGS})
  add_test(NAME ${test}_x86_64_v3 COMMAND ${test}_x86_64_v3)
  set_tests_properties(${test}_x86_64_v3 PROPERTIES ENVIRONMENT "OPENBLAS_NUM_THREADS=1" SKIP_RETURN_CODE 77)
endforeach()
