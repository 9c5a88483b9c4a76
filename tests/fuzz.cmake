# Fuzzing: short fixed-seed runs of every fuzz target, label fuzz. The long runs (1e5+ inputs per
# target) are scripts/fuzz.sh, not CI.
#   fuzz_build                 fixture: configures and builds the libFuzzer project tests/fuzz with clang into
#                              <build>/fuzz (fuzz_idx, fuzz_cifar10, fuzz_checkpoint: ASan + UBSan + libFuzzer)
#   fuzz_<target>_smoke        libFuzzer, -seed=1, a fixed number of inputs from the seed corpus
#                              tests/fuzz/corpus/<target> (tests/fuzz/run_fuzzer.cmake has the limits)
#   fuzz_<target>_known_crashes  replays tests/fuzz/crashes/<target>/: inputs that crashed the readers before their
#                              fixes, kept as regression inputs (tests/fuzz/crashes/README.md).
#   fuzz_options_smoke         tests/fuzz/fuzz_options.cpp: mutated command lines on the built main program
# Without clang (no clang++-14 / clang++ found) the libFuzzer tests are not registered; a configure message says so.
find_program(PIPEPROP_FUZZ_CXX NAMES clang++-14 clang++ DOC "clang for the libFuzzer targets (tests/fuzz)")
set(pipeprop_fuzz_src ${CMAKE_CURRENT_SOURCE_DIR}/fuzz)
set(pipeprop_fuzz_bin ${CMAKE_BINARY_DIR}/fuzz)

if(PIPEPROP_FUZZ_CXX)
  add_test(NAME fuzz_build
           COMMAND ${CMAKE_COMMAND} -DSOURCE=${pipeprop_fuzz_src} -DBINARY=${pipeprop_fuzz_bin}
                   -DCXX=${PIPEPROP_FUZZ_CXX} -P ${pipeprop_fuzz_src}/build_fuzzers.cmake)
  set_tests_properties(fuzz_build PROPERTIES FIXTURES_SETUP pipeprop_fuzzers LABELS fuzz TIMEOUT 1200)

  # Inputs per smoke run: past the seeds into mutations, ~5-40 s each on the 2-core CI machine (the IDX and CIFAR-10
  # readers cost ~1-20 ms per input under ASan: they read in 1 MiB chunks).
  set(pipeprop_fuzz_runs_idx 2000)
  set(pipeprop_fuzz_runs_cifar10 1000)
  set(pipeprop_fuzz_runs_checkpoint 10000)
  foreach(target idx cifar10 checkpoint)
    add_test(NAME fuzz_${target}_smoke
             COMMAND ${CMAKE_COMMAND} -DFUZZER=${pipeprop_fuzz_bin}/fuzz_${target}
                     -DWORK=${pipeprop_fuzz_bin}/smoke-${target} -DSEEDS=${pipeprop_fuzz_src}/corpus/${target}
                     -DRUNS=${pipeprop_fuzz_runs_${target}} -DSEED=1 -P ${pipeprop_fuzz_src}/run_fuzzer.cmake)
    set_tests_properties(fuzz_${target}_smoke PROPERTIES FIXTURES_REQUIRED pipeprop_fuzzers LABELS fuzz TIMEOUT 600
)
    if(EXISTS ${pipeprop_fuzz_src}/crashes/${target})
      file(GLOB crashes ${pipeprop_fuzz_src}/crashes/${target}/*)
      add_test(NAME fuzz_${target}_known_crashes
               COMMAND ${pipeprop_fuzz_bin}/fuzz_${target} -malloc_limit_mb=64 -rss_limit_mb=2048 ${crashes})
      set_tests_properties(fuzz_${target}_known_crashes PROPERTIES
        FIXTURES_REQUIRED pipeprop_fuzzers LABELS fuzz TIMEOUT 300)
    endif()
  endforeach()
else()
  message(STATUS "pipeprop: no clang++ found: the libFuzzer tests (tests/fuzz) are not registered")
endif()

if(PIPEPROP_BUILD_EXAMPLES)
  add_executable(fuzz_options ${pipeprop_fuzz_src}/fuzz_options.cpp)
  target_compile_features(fuzz_options PRIVATE cxx_std_20)
  target_compile_options(fuzz_options PRIVATE -Wall -Wextra)
  add_test(NAME fuzz_options_smoke
           COMMAND fuzz_options --program $<TARGET_FILE:pipeprop_train> --runs 300 --seed 1 --jobs 2
                   --corpus ${pipeprop_fuzz_src}/corpus/options)
  set_tests_properties(fuzz_options_smoke PROPERTIES LABELS fuzz TIMEOUT 600)

  # The main program with ASan + UBSan, for scripts/fuzz.sh's long option run only (not built by default: its
  # compile costs minutes).
  find_package(CLI11 REQUIRED)
  find_package(fmt REQUIRED)
  add_executable(pipeprop_train_asan EXCLUDE_FROM_ALL ${PROJECT_SOURCE_DIR}/examples/pipeprop_train.cpp
                                                  ${PROJECT_SOURCE_DIR}/examples/train/run_files.cpp
                                                  ${PROJECT_SOURCE_DIR}/examples/train/training_loop.cpp)
  target_link_libraries(pipeprop_train_asan PRIVATE pipeprop::pipeprop CLI11::CLI11 fmt::fmt)
  target_include_directories(pipeprop_train_asan PRIVATE ${PROJECT_SOURCE_DIR}/examples)
  target_compile_options(pipeprop_train_asan PRIVATE -O1 -g -fno-omit-frame-pointer -fsanitize=address,undefined
                         -fno-sanitize-recover=all)
  target_link_options(pipeprop_train_asan PRIVATE -fsanitize=address,undefined)
endif()
