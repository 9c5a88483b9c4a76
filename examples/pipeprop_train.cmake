# examples/pipeprop_train.cpp: the main program (CLI11 for options). Tests: a quick MLP run on Fashion-MNIST whose
# last stdout line is the JSON result; bit-identical resume through --checkpoint-out / --checkpoint-in; exit code 2
# (with the usage text) for bad options; exit code 1 for a missing data directory, a missing checkpoint or a
# diverging run (NaN / inf loss).
# The helpers live in examples/train/ (not globbed as example extras).
find_package(CLI11 REQUIRED)
find_package(fmt REQUIRED)  # {fmt} (libfmt-dev): the main program's messages and files (the library needs none)
target_link_libraries(pipeprop_train PRIVATE CLI11::CLI11 fmt::fmt)
# The network-independent parts, compiled once instead of in every per-(mode, network) unit: the file input and
# output (checkpoints, data, metrics: train/run_files.hpp) and the epoch loop over type-erased engines
# (train/training_loop.cpp, train/run_engine.hpp).
target_sources(pipeprop_train PRIVATE ${CMAKE_CURRENT_SOURCE_DIR}/train/run_files.cpp
                                      ${CMAKE_CURRENT_SOURCE_DIR}/train/training_loop.cpp)
# Extra compile options of the main program (the main job builds it at -O3, scripts/test.sh at -O2).
set(PIPEPROP_TRAIN_FLAGS "" CACHE STRING "Extra compile options of the main program pipeprop_train (e.g. -O1)")
target_compile_options(pipeprop_train PRIVATE ${PIPEPROP_TRAIN_FLAGS})

# Which network types the program compiles: network type keys (train::network_type_key: cnn cnn32 cnn-on mlp
# llama-tiny llama-4x128, and resnetD[-on][-cifar] for D = 20, 32, 44, 56, 110), or "all". Empty (the default): every
# type except the ResNet variants of depth 32, 44 and 110 on CIFAR-10 or with Online Norm, ResNet-56 on CIFAR-10 with
# Online Norm and llama-4x128 (each network type is a copy of the engines' code, so the default keeps the build within
# CI's time; the program names the option for a type it was not built with, exit 2). A build that needs a few, like
# the main job's, is minutes faster.
set(PIPEPROP_TRAIN_NETWORKS "" CACHE STRING
    "Network type keys the main program compiles, ;-separated (empty: the default set; all: every one)")
set(pipeprop_train_default_off resnet32-on resnet32-cifar resnet32-on-cifar resnet44-on resnet44-cifar
    resnet44-on-cifar resnet110-on resnet110-cifar resnet110-on-cifar resnet56-on-cifar llama-4x128)
set(pipeprop_train_generated ${CMAKE_CURRENT_BINARY_DIR}/pipeprop_train_units)
target_include_directories(pipeprop_train PRIVATE ${pipeprop_train_generated})
set(pipeprop_train_compiled_sgd "")
set(pipeprop_train_compiled_pb "")
set(pipeprop_train_compiled_sync "")

# One translation unit per network family: train::run_on_network<mode_M, Net> for every network Net of the family
# and every mode M it is built in, instantiated in one file, so that the program builds in parallel and no unit holds
# every network (train/mode.hpp). A family is the ResNets of one norm and input shape (every depth has the same layer
# types, so their code is compiled once), the text networks, or the four small networks. The modes and networks of a
# family share most of their code (the layers, evaluation, checkpoints, the training loop's adapters, the PB
# policies' engine code over the same loss): a unit per (mode, network) compiled it once per mode and network
# (bench/README.md, "Compile time of CI").
set(pipeprop_train_small_networks mlp cnn cnn32 cnn-on)
# Keep in step with train::with_network (examples/train/networks.hpp) and train::sync_mode_trains.
# pipeprop_train_mode(mode key:type) records that the network is built in the mode (when this build compiles it).
function(pipeprop_train_mode unit_mode pair)
  string(REPLACE ":" ";" pair_list ${pair})
  list(GET pair_list 0 unit_network)
  list(GET pair_list 1 unit_type)
  if(PIPEPROP_TRAIN_NETWORKS STREQUAL "all")
    # every network type
  elseif(PIPEPROP_TRAIN_NETWORKS AND NOT unit_network IN_LIST PIPEPROP_TRAIN_NETWORKS)
    return()
  elseif(NOT PIPEPROP_TRAIN_NETWORKS AND unit_network IN_LIST pipeprop_train_default_off)
    return()
  endif()
  list(APPEND pipeprop_train_compiled_${unit_mode} train::${unit_type})
  set(pipeprop_train_compiled_${unit_mode} ${pipeprop_train_compiled_${unit_mode}} PARENT_SCOPE)
  string(REGEX REPLACE "^resnet[0-9]+" "resnet" family ${unit_network})
  string(REGEX REPLACE "^llama-.*" "llama" family ${family})
  string(REPLACE "-" "_" family ${family})
  if(unit_network IN_LIST pipeprop_train_small_networks)
    set(family small_networks)
  endif()
  get_property(families GLOBAL PROPERTY pipeprop_train_families)
  if(NOT family IN_LIST families)
    set_property(GLOBAL APPEND PROPERTY pipeprop_train_families ${family})
  endif()
  get_property(members GLOBAL PROPERTY pipeprop_train_family_${family})
  if(NOT pair IN_LIST members)
    set_property(GLOBAL APPEND PROPERTY pipeprop_train_family_${family} ${pair})
  endif()
  set_property(GLOBAL APPEND PROPERTY pipeprop_train_modes_${unit_network} ${unit_mode})
endfunction()
# pipeprop_train_family_unit(family) writes the family's unit (train/unit.cpp.in) with the networks and modes recorded.
function(pipeprop_train_family_unit family)
  get_property(members GLOBAL PROPERTY pipeprop_train_family_${family})
  set(unit_file ${CMAKE_CURRENT_BINARY_DIR}/pipeprop_train_units/${family}.cpp)
  set(unit_files ${unit_file})
  set(unit_networks_text "")
  set(unit_includes "")
  set(unit_body "")
  foreach(pair IN LISTS members)
    string(REPLACE ":" ";" pair_list ${pair})
    list(GET pair_list 0 unit_network)
    list(GET pair_list 1 unit_type)
    get_property(unit_modes GLOBAL PROPERTY pipeprop_train_modes_${unit_network})
    list(JOIN unit_modes ", " modes_text)
    string(APPEND unit_networks_text "\n//   --network ${unit_network} (train::${unit_type}): --mode ${modes_text}")
    foreach(unit_mode IN LISTS unit_modes)
      set(include_line "#include \"train/mode_${unit_mode}.hpp\"\n")
      string(FIND "${unit_includes}" "${include_line}" found)
      if(found EQUAL -1)
        string(APPEND unit_includes "${include_line}")
      endif()
      if(unit_mode STREQUAL "pb")
        # The unit compiles the network's stage code; the PB executors of the ten mitigations depend only on the
        # loss and compile in one unit per loss type (train/pb_executors.hpp): one for every image network (softmax
        # cross-entropy over ten classes), one for the text networks (per-token cross-entropy over 64 tokens of 256
        # symbols). A network with another loss would leave its executors undefined (a link error): give it a key
        # here.
        string(APPEND unit_body "PIPEPROP_TRAIN_PB_STAGE_PROGRAMS(, train::${unit_type});\n")
        string(APPEND unit_body "PIPEPROP_TRAIN_PB_EXECUTORS(extern, train::pb_loss_t<train::${unit_type}>);\n")
        set(executors_key image)
        if(unit_network MATCHES "^llama-")
          set(executors_key text)
        endif()
        get_property(executors_done GLOBAL PROPERTY pipeprop_train_executors_${executors_key})
        if(NOT executors_done)
          set_property(GLOBAL PROPERTY pipeprop_train_executors_${executors_key} TRUE)
          set(executors_file ${CMAKE_CURRENT_BINARY_DIR}/pipeprop_train_units/pb_executors_${executors_key}.cpp)
          configure_file(${CMAKE_CURRENT_SOURCE_DIR}/train/pb_executors.cpp.in ${executors_file} @ONLY)
          list(APPEND unit_files ${executors_file})
        endif()
      endif()
      string(APPEND unit_body "template train::json_line train::run_on_network<train::mode_${unit_mode}, "
                              "train::${unit_type}>(\n    train::mode_${unit_mode}&, const train::common_options&);\n")
    endforeach()
  endforeach()
  configure_file(${CMAKE_CURRENT_SOURCE_DIR}/train/unit.cpp.in ${unit_file} @ONLY)
  target_sources(pipeprop_train PRIVATE ${unit_files})
  if(TARGET pipeprop_train_asan)  # tests/fuzz.cmake: the ASan + UBSan main program of scripts/fuzz.sh
    target_sources(pipeprop_train_asan PRIVATE ${unit_files})
  endif()
endfunction()
# Image networks and the text network (next-token training on a text corpus) in every mode.
foreach(unit_mode IN ITEMS sgd pb sync)
  foreach(pair IN ITEMS cnn:small_cnn cnn32:small_cnn32 cnn-on:small_cnn_on mlp:mlp resnet20:resnet20)
    pipeprop_train_mode(${unit_mode} ${pair})
  endforeach()
endforeach()
# The other ResNets (depths 20, 32, 44, 56 and 110; Online Norm and the CIFAR-10 inputs: --norm and --data select
# them) in --mode sgd and --mode pb, the modes of the depth study (train::sync_mode_trains).
foreach(unit_mode IN ITEMS sgd pb)
  foreach(depth IN ITEMS 20 32 44 56 110)
    foreach(variant IN ITEMS "" "-on" "-cifar" "-on-cifar")
      if(depth STREQUAL "20" AND variant STREQUAL "")
        continue()  # resnet20 is built in every mode above
      endif()
      string(REPLACE "-" "_" type_suffix "${variant}")
      pipeprop_train_mode(${unit_mode} resnet${depth}${variant}:resnet${depth}${type_suffix})
    endforeach()
  endforeach()
endforeach()
# The text networks: llama-tiny, and llama-4x128 (off by default: two units for the transformer study only).
foreach(unit_mode IN ITEMS sgd pb sync)
  foreach(pair IN ITEMS llama-tiny:llama_tiny llama-4x128:llama_4x128)
    pipeprop_train_mode(${unit_mode} ${pair})
  endforeach()
endforeach()
get_property(pipeprop_train_families GLOBAL PROPERTY pipeprop_train_families)
foreach(family IN LISTS pipeprop_train_families)
  pipeprop_train_family_unit(${family})
endforeach()
# The compiled types per mode, for the program's dispatch (pipeprop_train.cpp: train::compiled).
foreach(unit_mode IN ITEMS sgd pb sync)
  list(JOIN pipeprop_train_compiled_${unit_mode} ", " pipeprop_train_list_${unit_mode})
endforeach()
set(pipeprop_train_networks_value "${PIPEPROP_TRAIN_NETWORKS}")
configure_file(${CMAKE_CURRENT_SOURCE_DIR}/train/compiled_networks.hpp.in ${pipeprop_train_generated}/compiled_networks.hpp
               @ONLY)
if(TARGET pipeprop_train_asan)
  target_include_directories(pipeprop_train_asan PRIVATE ${pipeprop_train_generated})
endif()

if(PIPEPROP_BUILD_TESTS)
  set(pipeprop_train_data /usr/share/datasets/fashion-mnist)
  set(pipeprop_train_quick --network mlp --batch 32 --max-samples 2000 --max-test-samples 2000 --progress log)

  include(${CMAKE_CURRENT_SOURCE_DIR}/train/pipeprop_train_test.cmake)

  # Quick run: exit 0, metrics written, last stdout line = the JSON result with the required keys in order.
  set(num "-?[0-9][0-9.e+-]*")
  pipeprop_train_test(smoke_mlp EXPECT 0
    ARGS ${pipeprop_train_quick} --data ${pipeprop_train_data}
         --metrics ${CMAKE_CURRENT_BINARY_DIR}/pipeprop_train_smoke_metrics.jsonl
    REGEX "epoch 1/1: train loss"
    LAST_LINE_REGEX "^\\{\"mode\":\"sgd\",\"network\":\"mlp\",\"batch\":32,\"epochs\":1,\"samples\":2000,\"seconds\":${num},\"samples_per_second\":${num},\"train_loss\":${num},\"test_loss\":${num},\"test_accuracy\":0\\.[5-9][0-9]*,.*\\}$")

  # Bit-identical resume through the program's own checkpoints.
  add_test(NAME pipeprop_train_resume
           COMMAND ${CMAKE_COMMAND} -DPROGRAM=$<TARGET_FILE:pipeprop_train> -DDATA=${pipeprop_train_data}
                   -DWORK=${CMAKE_CURRENT_BINARY_DIR}/pipeprop_train_resume
                   -P ${CMAKE_CURRENT_SOURCE_DIR}/train/check_resume.cmake)
  set_tests_properties(pipeprop_train_resume PROPERTIES ENVIRONMENT "OPENBLAS_NUM_THREADS=1" TIMEOUT 300
                       FIXTURES_SETUP pipeprop_train_checkpoint)

  # The checkpoint files are readable by numpy (Debian's python3-numpy, when installed).
  find_program(PIPEPROP_SYSTEM_PYTHON3 python3 PATHS /usr/bin NO_DEFAULT_PATH)
  if(PIPEPROP_SYSTEM_PYTHON3)
    execute_process(COMMAND ${PIPEPROP_SYSTEM_PYTHON3} -c "import numpy" RESULT_VARIABLE pipeprop_no_numpy
                    OUTPUT_QUIET ERROR_QUIET)
    if(pipeprop_no_numpy EQUAL 0)
      add_test(NAME pipeprop_train_checkpoint_numpy
               COMMAND ${PIPEPROP_SYSTEM_PYTHON3} ${CMAKE_CURRENT_SOURCE_DIR}/train/check_checkpoint_numpy.py
                       ${CMAKE_CURRENT_BINARY_DIR}/pipeprop_train_resume/a)
      set_tests_properties(pipeprop_train_checkpoint_numpy PROPERTIES FIXTURES_REQUIRED pipeprop_train_checkpoint)
    endif()
  endif()

  # Bad options: the usage text and exit code 2.
  pipeprop_train_test(bad_batch EXPECT 2 ARGS --batch 0 REGEX "--batch.*Usage:")
  pipeprop_train_test(bad_network EXPECT 2 ARGS --network resnet REGEX "--network.*Usage:")
  pipeprop_train_test(bad_mode EXPECT 2 ARGS --mode magic REGEX "--mode.*Usage:")
  pipeprop_train_test(bad_momentum EXPECT 2 ARGS --momentum 1.5 REGEX "--momentum.*Usage:")
  pipeprop_train_test(bad_epochs EXPECT 2 ARGS --epochs x REGEX "--epochs.*Usage:")
  pipeprop_train_test(unknown_option EXPECT 2 ARGS --no-such-option REGEX "no-such-option.*Usage:")
  pipeprop_train_test(negative_max_samples EXPECT 2 ARGS --max-samples -5 REGEX "--max-samples.*Usage:")
  pipeprop_train_test(negative_seed EXPECT 2 ARGS --seed -1 REGEX "--seed.*Usage:")
  pipeprop_train_test(batch_above_epoch EXPECT 2 ARGS --batch 5000 --max-samples 1000 --data ${pipeprop_train_data}
    REGEX "--batch: 5000 is larger than the 1000 training samples of an epoch")

  # Runtime errors: a message naming the path and exit code 1.
  pipeprop_train_test(missing_data EXPECT 1
    ARGS --network mlp --data ${CMAKE_CURRENT_BINARY_DIR}/no-such-dataset
    REGEX "no-such-dataset: data directory not found")
  pipeprop_train_test(missing_checkpoint EXPECT 1
    ARGS ${pipeprop_train_quick} --data ${pipeprop_train_data}
         --checkpoint-in ${CMAKE_CURRENT_BINARY_DIR}/no-such-checkpoint
    REGEX "no-such-checkpoint: checkpoint directory not found")
  pipeprop_train_test(diverged EXPECT 1
    ARGS ${pipeprop_train_quick} --data ${pipeprop_train_data} --lr 500
    REGEX "training diverged: .*the loss became (NaN|infinite)")
endif()

# NaN passes CLI11's range checks; the program rejects it as a bad option (exit 2).
add_test(NAME pipeprop_train_bad_lr_nan COMMAND pipeprop_train --lr nan --max-samples 10)
set_tests_properties(pipeprop_train_bad_lr_nan PROPERTIES WILL_FAIL TRUE)
add_test(NAME pipeprop_train_bad_lr_nan_exit_code
         COMMAND ${CMAKE_COMMAND} -DPROGRAM=$<TARGET_FILE:pipeprop_train> -P ${CMAKE_CURRENT_LIST_DIR}/train/expect_exit_2.cmake)

# --transport mpi: with -DPIPEPROP_WITH_MPI=ON the program links MPI, and pipeprop_train.cpp (the only
# unit that includes MPI: train/mpi_cluster.hpp) starts it when the option is given; the per-network units see only
# train/cluster.hpp.
if(PIPEPROP_WITH_MPI)
  target_link_libraries(pipeprop_train PRIVATE pipeprop::mpi)
  set_source_files_properties(${CMAKE_CURRENT_SOURCE_DIR}/pipeprop_train.cpp TARGET_DIRECTORY pipeprop_train
                              PROPERTIES COMPILE_DEFINITIONS PIPEPROP_TRAIN_MPI=1)
endif()
