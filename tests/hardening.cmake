# Hardening builds of chosen unit tests, built in the same build tree as every other test
# and run by the same ctest (labels asan, tsan, baseline). Each variant compiles its own copy of the test sources with
# its own flags, the files of a variant in one or two unity programs (pipeprop_variant_group); each file keeps its
# ctest <file>_<variant>. They link the uninstrumented Catch2 main (pipeprop_catch_main), harmless for every variant.
# docs/testing.md says what runs here and what does not.
#
#   <test>_asan      ASan + UBSan (-O0, UBSan errors fatal, libstdc++ assertions): the cheap-to-compile unit tests
#                    and the executor tests; tests/ubsan.supp holds the one suppression (inside oneTBB, explained).
#                    Not test_no_allocation / test_pb_no_allocation: their harness replaces malloc and operator new,
#                    which ASan must own (tests/unit/allocation_counter.hpp exits with the skip code 77 when it is
#                    compiled under a sanitizer).
#   <test>_tsan      TSan (-O1) of the concurrent executor tests (PB and sync), run against a libtbb built with TSan
#                    from Debian's source package of the installed version (fixture tsan_tbb_build:
#                    scripts/build-tsan-tbb.sh into PIPEPROP_TSAN_TBB_DIR, loaded through LD_LIBRARY_PATH), with
#                    the suppressions of tests/tsan.supp (reports inside oneTBB or OpenBLAS only, each explained).
#   <test>_baseline  -O3 -march=x86-64-v2 (SSE4.2, no FMA, no AVX), not PIPEPROP_ARCH: the executor bit-identity tests
#                    on baseline x86-64, where pipeprop::kernels::fma must compute its single rounding itself.
option(PIPEPROP_HARDENING_TESTS "Build the sanitizer (ASan+UBSan, TSan) and baseline-architecture test variants" ON)
if(NOT PIPEPROP_HARDENING_TESTS)
  return()
endif()

set(pipeprop_asan_tests test_data_readers test_checkpoint test_optim test_layers_basic test_simd_gemm
    test_sync_schedule test_sync_simulator test_runtime_layer_stack)
# The executor tests under ASan: on by default and in CI (scripts/test.sh); OFF saves about 2 CPU-minutes.
option(PIPEPROP_ASAN_EXECUTOR_TESTS "Also build test_pb_executors and test_sync_executor with ASan + UBSan" ON)
set(pipeprop_asan_executor_tests "")
if(PIPEPROP_ASAN_EXECUTOR_TESTS)
  set(pipeprop_asan_executor_tests test_pb_executors test_sync_executor)
endif()
set(pipeprop_tsan_tests test_pb_executors test_sync_executor test_sync_consecutive_steps)
set(pipeprop_baseline_tests test_pb_executors test_sync_executor)

set(pipeprop_warnings -Wall -Wextra -Wno-unused-parameter -Wno-maybe-uninitialized)
# -g1: line tables only (file:line in every sanitizer report); full -g costs half again the compile time
# (test_pb_executors_asan: 214 s with -g, 148 s with -g1, on this project's 2-core machine). ASan at -O0: no access
# is optimized away, and test_pb_executors_asan compiles in 64 CPU-s instead of 165 at -O1, for 16 s of run time
# instead of 3 (bench/README.md, "Compile time of CI").
set(pipeprop_variant_asan_flags -O0 -g1 -fno-omit-frame-pointer -fsanitize=address,undefined
    -fno-sanitize-recover=all -D_GLIBCXX_ASSERTIONS)
set(pipeprop_variant_asan_link -fsanitize=address,undefined)
set(pipeprop_variant_tsan_flags -O1 -g1 -fno-omit-frame-pointer -fsanitize=thread)
set(pipeprop_variant_tsan_link -fsanitize=thread)
set(pipeprop_variant_baseline_flags -O3 -march=x86-64-v2)  # -O3 whatever the build type (scripts/test.sh: -O2)
set(pipeprop_variant_baseline_link "")

# ASan: abort on the first report, check leaks; UBSan: print the stack. TSan: the oneTBB suppressions, a non-zero
# exit on any report (TSan's default exitcode 66) and the history needed for useful second stacks.
set(pipeprop_variant_asan_env
    "ASAN_OPTIONS=detect_leaks=1:abort_on_error=0:detect_stack_use_after_return=1:strict_string_checks=1"
    "UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1:suppressions=${CMAKE_CURRENT_SOURCE_DIR}/ubsan.supp")
set(PIPEPROP_TSAN_TBB_DIR ${CMAKE_BINARY_DIR}/tsan-tbb CACHE PATH
    "Where scripts/build-tsan-tbb.sh puts the TSan build of libtbb (point it outside the build tree to keep it)")
set(pipeprop_variant_tsan_env
    "TSAN_OPTIONS=suppressions=${CMAKE_CURRENT_SOURCE_DIR}/tsan.supp:halt_on_error=0:exitcode=66:history_size=4"
    "LD_LIBRARY_PATH=${PIPEPROP_TSAN_TBB_DIR}/lib")
add_test(NAME tsan_tbb_build COMMAND bash ${PROJECT_SOURCE_DIR}/scripts/build-tsan-tbb.sh ${PIPEPROP_TSAN_TBB_DIR})
set_tests_properties(tsan_tbb_build PROPERTIES FIXTURES_SETUP pipeprop_tsan_tbb LABELS tsan TIMEOUT 1800)

# pipeprop_variant_group(variant group files...): the variant's program of the files (one unity source, as the unit
# test groups of tests/CMakeLists.txt: the code they share compiled once) and a ctest <file>_<variant> per file.
function(pipeprop_variant_group variant group)
  set(target test_group_${group}_${variant})
  pipeprop_unit_test_unity_source(${CMAKE_CURRENT_BINARY_DIR}/${target}.cpp ${target} ${ARGN})
  add_executable(${target} ${CMAKE_CURRENT_BINARY_DIR}/${target}.cpp)
  if(variant STREQUAL "baseline")
    target_sources(${target} PRIVATE ${CMAKE_CURRENT_SOURCE_DIR}/baseline_arch_check.cpp)
  endif()
  # pipeprop_build_flags is left out on purpose: its PIPEPROP_ARCH -march must not reach the baseline variant.
  target_link_libraries(${target} PRIVATE pipeprop::pipeprop pipeprop_catch_main Catch2::Catch2)
  target_include_directories(${target} PRIVATE ${CMAKE_CURRENT_SOURCE_DIR} ${CMAKE_CURRENT_SOURCE_DIR}/unit)
  target_compile_definitions(${target} PRIVATE PIPEPROP_GOLDEN_DIR="${CMAKE_CURRENT_SOURCE_DIR}/golden"
                                               PIPEPROP_HARDENING_VARIANT=1)
  target_compile_options(${target} PRIVATE ${pipeprop_warnings} ${pipeprop_variant_${variant}_flags})
  if(NOT variant STREQUAL "baseline")
    target_compile_options(${target} PRIVATE ${PIPEPROP_ARCH_FLAGS})  # the project's PIPEPROP_ARCH
  endif()
  target_link_options(${target} PRIVATE ${pipeprop_variant_${variant}_link})
  set(env OPENBLAS_NUM_THREADS=1 ${pipeprop_variant_${variant}_env})
  foreach(name IN LISTS ARGN)
    add_test(NAME ${name}_${variant} COMMAND ${target} "-#" "[#${name}]" -w NoTests)
    set_tests_properties(${name}_${variant} PROPERTIES ENVIRONMENT "${env}" LABELS ${variant} TIMEOUT 900)
    if(variant STREQUAL "tsan")
      set_tests_properties(${name}_${variant} PROPERTIES FIXTURES_REQUIRED pipeprop_tsan_tbb)
    endif()
  endforeach()
endfunction()

# Under ASan the executor tests are a program apart from the cheap ones, so that neither is the build's longest unit.
pipeprop_variant_group(asan files_and_layers ${pipeprop_asan_tests})
if(pipeprop_asan_executor_tests)
  pipeprop_variant_group(asan executors ${pipeprop_asan_executor_tests})
endif()
pipeprop_variant_group(tsan executors ${pipeprop_tsan_tests})
pipeprop_variant_group(baseline executors ${pipeprop_baseline_tests})
