# The main program's refusals of what would be saved, read or run silently wrong: ctest runs. Included after
# pipeprop_train.cmake (the globbed extras are sorted), whose pipeprop_train_test() helper and variables it uses.
if(PIPEPROP_BUILD_TESTS)
  # A run whose epoch 2 is one update (one PB micro-batch) diverges in that update: every loss computed was finite,
  # the state or evaluation loss at the end of epoch 2 is not. Exit 1 naming the epoch and the update, nothing saved:
  # the epoch-1 checkpoint stays byte-identical. The learning rate of epoch 2 is 0.05 * 9e4^8 = 2.2e38 (8 steps of the
  # step schedule per epoch), still a float; epoch 1 trains at 0.05.
  set(last_update_message "the state at the end of epoch 2 is not finite: .*(update|micro-batch) 1 .the last of epoch 2")
  foreach(case IN ITEMS "sgd:--batch|32|--max-samples|32"
                        "sync:--mode|sync|--batch|32|--max-samples|32"
                        "pb_sequential:--mode|pb|--executor|sequential|--batch|8|--max-samples|8"
                        "pb_concurrent:--mode|pb|--executor|concurrent|--batch|8|--max-samples|8")
    string(REGEX REPLACE ":.*" "" name "${case}")
    string(REGEX REPLACE "^[a-z_]*:" "" options "${case}")
    add_test(NAME pipeprop_train_last_update_divergence_keeps_checkpoint_${name}
             COMMAND ${CMAKE_COMMAND} -DPROGRAM=$<TARGET_FILE:pipeprop_train> -DDATA=${pipeprop_train_data}
                     -DWORK=${CMAKE_CURRENT_BINARY_DIR}/pipeprop_train_last_update_divergence_${name}
                     "-DOPTIONS=--network|mlp|--max-test-samples|100|--lr|0.05|--momentum|0.9|${options}"
                     -DSTEP_EPOCHS=0.125 -DGAMMA=9e4 "-DMESSAGE=${last_update_message}"
                     -P ${CMAKE_CURRENT_SOURCE_DIR}/train/check_divergence_keeps_checkpoint.cmake)
    set_tests_properties(pipeprop_train_last_update_divergence_keeps_checkpoint_${name}
                         PROPERTIES ENVIRONMENT "OPENBLAS_NUM_THREADS=1" TIMEOUT 300)
  endforeach()

  # An empty path, --stages, count or seed is a bad option (exit 2), not "not given" (CLI11 read an empty
  # --max-samples, --max-test-samples or --seed as 0: every sample, seed 0).
  foreach(case IN ITEMS "data:--data:" "checkpoint_in:--checkpoint-in:" "checkpoint_out:--checkpoint-out:"
                        "metrics:--metrics:" "trace:--trace:--mode|sync" "stages_pb:--stages:--mode|pb"
                        "stages_sync:--stages:--mode|sync" "max_samples:--max-samples:"
                        "max_test_samples:--max-test-samples:" "seed:--seed:")
    string(REPLACE ":" ";" parts "${case}")
    list(GET parts 0 name)
    list(GET parts 1 option)
    list(LENGTH parts n)
    set(extra "")
    if(n GREATER 2)
      list(GET parts 2 extra)
    endif()
    add_test(NAME pipeprop_train_empty_${name}
             COMMAND ${CMAKE_COMMAND} -DPROGRAM=$<TARGET_FILE:pipeprop_train> -DDATA=${pipeprop_train_data}
                     -DOPTION=${option} "-DEXTRA=${extra}"
                     -P ${CMAKE_CURRENT_SOURCE_DIR}/train/check_empty_option.cmake)
    set_tests_properties(pipeprop_train_empty_${name} PROPERTIES ENVIRONMENT "OPENBLAS_NUM_THREADS=1" TIMEOUT 120)
  endforeach()

  # Options refused at parse time with a sentence (exit 2), before the data are loaded. The quick options after
  # them would train (exit 0, or 1 after the data load) if the value got through.
  set(quick --network mlp --max-samples 64 --max-test-samples 10 --progress log --data ${pipeprop_train_data})
  pipeprop_train_test(eps_nan_pb EXPECT 2 ARGS --mode pb --eps nan ${quick} REGEX "--eps: must be a finite number.*Usage:")
  pipeprop_train_test(eps_nan_sync EXPECT 2 ARGS --mode sync --eps nan ${quick}
    REGEX "--eps: must be a finite number.*Usage:")
  pipeprop_train_test(pipemare_decay_inf EXPECT 2 ARGS --mode pb --pipemare-decay -inf ${quick}
    REGEX "--pipemare-decay: must be a finite number.*Usage:")
  pipeprop_train_test(momentum_rounds_to_one EXPECT 2 ARGS --momentum 0.9999999999 ${quick}
    REGEX "--momentum: must be below 1 also in single precision, got 0.9999999999.*Usage:" NOT_REGEX "data:")
  pipeprop_train_test(momentum_scaled_rounds_to_one EXPECT 2
    ARGS --mode pb --momentum 0.9999999 --reference-batch 32 ${quick}
    REGEX "--momentum: 0.9999999 scaled from B = 32 to b = 1 is 0.99999999" NOT_REGEX "data:")
  pipeprop_train_test(momentum_below_one_in_float EXPECT 0 ARGS --momentum 0.9999999 ${quick})
  pipeprop_train_test(stages_negative EXPECT 2 ARGS --mode pb --stages -1 ${quick}
    REGEX "--stages.*'-1' is not a split point.*Usage:" NOT_REGEX "18446744073709551615")
  pipeprop_train_test(stages_trailing_comma EXPECT 2 ARGS --mode pb --stages 2, ${quick}
    REGEX "--stages.*'' is not a split point.*Usage:")

  # --mode pb with the default --lr / --momentum (batch-32 values) diverges at b = 1: the message says so and gives
  # the --reference-batch 32 values.
  pipeprop_train_test(pb_default_lr_hint EXPECT 1 ARGS --mode pb --network mlp --max-samples 500
    --max-test-samples 10 --progress none --data ${pipeprop_train_data}
    REGEX "training diverged: .*the defaults --lr 0.05 --momentum 0.9 are values for a batch of 32: add --reference-batch 32 .* lr 5.136.e-05, momentum 0.99671")

  # A checkpoint of another network is refused naming both networks.
  add_test(NAME pipeprop_train_other_network_checkpoint
           COMMAND ${CMAKE_COMMAND} -DPROGRAM=$<TARGET_FILE:pipeprop_train> -DDATA=${pipeprop_train_data}
                   -DWORK=${CMAKE_CURRENT_BINARY_DIR}/pipeprop_train_other_network_checkpoint
                   -P ${CMAKE_CURRENT_SOURCE_DIR}/train/check_other_network_checkpoint.cmake)
  set_tests_properties(pipeprop_train_other_network_checkpoint PROPERTIES ENVIRONMENT "OPENBLAS_NUM_THREADS=1"
                       TIMEOUT 300)
endif()

if(PIPEPROP_BUILD_TESTS)
  # Saving a checkpoint never destroys the user's files: a --metrics file inside the --checkpoint-out directory, a
  # file of the user's there, a --checkpoint-out that is a symbolic link (written through).
  add_test(NAME pipeprop_train_user_files_in_checkpoint
           COMMAND ${CMAKE_COMMAND} -DPROGRAM=$<TARGET_FILE:pipeprop_train> -DDATA=${pipeprop_train_data}
                   -DWORK=${CMAKE_CURRENT_BINARY_DIR}/pipeprop_train_user_files_in_checkpoint
                   -P ${CMAKE_CURRENT_SOURCE_DIR}/train/check_user_files_in_checkpoint.cmake)
  set_tests_properties(pipeprop_train_user_files_in_checkpoint PROPERTIES ENVIRONMENT "OPENBLAS_NUM_THREADS=1"
                       TIMEOUT 300)
endif()

if(PIPEPROP_BUILD_TESTS AND EXISTS /usr/bin/python3)
  # SIGINT / SIGTERM stop the run between two batches (PB: after draining), save where it stopped, say so, leave no
  # temporary directory and exit 130 / 143; the checkpoint resumes. A file size limit makes the save fail with a
  # message (SIGXFSZ ignored), not kill the program.
  foreach(case IN ITEMS "sgd:TERM:--batch|32|--max-samples|60000"
                        "pb:INT:--mode|pb|--reference-batch|32|--max-samples|3000"
                        "sync:TERM:--mode|sync|--batch|32|--micro-batches|2|--max-samples|60000"
                        "file_size_limit:XFSZ:--batch|32|--max-samples|320")
    string(REPLACE ":" ";" parts "${case}")
    list(GET parts 0 name)
    list(GET parts 1 signal)
    list(GET parts 2 options)
    string(REPLACE "|" ";" options "${options}")
    add_test(NAME pipeprop_train_stop_signal_${name}
             COMMAND /usr/bin/python3 ${CMAKE_CURRENT_SOURCE_DIR}/train/check_stop_signal.py
                     $<TARGET_FILE:pipeprop_train> ${pipeprop_train_data}
                     ${CMAKE_CURRENT_BINARY_DIR}/pipeprop_train_stop_signal_${name} ${signal} ${options})
    set_tests_properties(pipeprop_train_stop_signal_${name} PROPERTIES ENVIRONMENT "OPENBLAS_NUM_THREADS=1"
                         TIMEOUT 600)
  endforeach()
endif()

if(PIPEPROP_BUILD_TESTS AND EXISTS /proc/self)
  # Output paths are checked by creating or opening them, not with access() (which says yes to root on /proc):
  # refused before the data are loaded, exit 2.
  pipeprop_train_test(checkpoint_out_proc EXPECT 2
    ARGS --network mlp --max-samples 320 --data ${pipeprop_train_data} --checkpoint-out /proc/ck
    REGEX "--checkpoint-out: /proc/ck: cannot save a checkpoint here" NOT_REGEX "data: |epoch 1/1")
  pipeprop_train_test(trace_proc EXPECT 2
    ARGS --mode sync --network mlp --max-samples 320 --data ${pipeprop_train_data} --trace /proc/X.svg
    REGEX "--trace: cannot write /proc/X\\.(json|svg): cannot create a file in /proc" NOT_REGEX "data: |epoch 1/1")
  pipeprop_train_test(metrics_proc EXPECT 2
    ARGS --network mlp --max-samples 320 --data ${pipeprop_train_data} --metrics /proc/m.jsonl
    REGEX "--metrics: cannot write /proc/m\\.jsonl: cannot create a file in /proc" NOT_REGEX "data: |epoch 1/1")
endif()

if(PIPEPROP_BUILD_TESTS)
  # A resume recognises the mode from the checkpoint's content (an edited "mode" line is refused) and refuses a
  # data position beyond the epoch.
  add_test(NAME pipeprop_train_checkpoint_content
           COMMAND ${CMAKE_COMMAND} -DPROGRAM=$<TARGET_FILE:pipeprop_train> -DDATA=${pipeprop_train_data}
                   -DWORK=${CMAKE_CURRENT_BINARY_DIR}/pipeprop_train_checkpoint_content
                   -P ${CMAKE_CURRENT_SOURCE_DIR}/train/check_checkpoint_content.cmake)
  set_tests_properties(pipeprop_train_checkpoint_content PROPERTIES ENVIRONMENT "OPENBLAS_NUM_THREADS=1" TIMEOUT 300)
endif()

if(PIPEPROP_BUILD_TESTS AND EXISTS /usr/bin/python3)
  # Out of memory (an address-space limit, as `ulimit -v` sets) is reported with what was being built or loaded,
  # the network and mode, and the options that lower it. 780 MiB: the program with Fashion-MNIST loaded trains
  # --batch 32 (a control run checks it), not --batch 60000; 200 MiB: the data do not fit (they need about 350).
  foreach(case IN ITEMS "trainer:780:yes:building the --mode sgd trainer .batch 60000.:--batch|60000|--epochs|1"
                        "data:200:no:loading the data from:--batch|32|--epochs|1")
    string(REPLACE ":" ";" parts "${case}")
    list(GET parts 0 name)
    list(GET parts 1 limit)
    list(GET parts 2 control)
    list(GET parts 3 activity)
    list(GET parts 4 options)
    string(REPLACE "|" ";" options "${options}")
    add_test(NAME pipeprop_train_out_of_memory_${name}
             COMMAND /usr/bin/python3 ${CMAKE_CURRENT_SOURCE_DIR}/train/check_out_of_memory.py
                     $<TARGET_FILE:pipeprop_train> ${pipeprop_train_data} ${limit} ${control} "${activity}"
                     ${options})
    set_tests_properties(pipeprop_train_out_of_memory_${name} PROPERTIES ENVIRONMENT "OPENBLAS_NUM_THREADS=1"
                         TIMEOUT 300)
  endforeach()
endif()

if(PIPEPROP_BUILD_TESTS AND EXISTS /usr/bin/python3)
  # An engine that cannot fit is refused before it is allocated, with its memory estimate, what is available and
  # the options that lower it (train/memory_check.hpp); where a larger limit is given, the same run under it trains.
  # With the data loaded the program uses about 290 MB of address space before the engine: under 700 MiB, about
  # 450 MB are left.
  # - memory_refused_pb / _sync: the PB engine's (concurrent, b = 2000, 3 stages, --push-buffer 64: about 0.6 GB,
  #   mostly the input channel of 64 micro-batches) and the sync engine's (GPipe, B = 16000: about 0.6 GB)
  #   estimates; under 1400 MiB both fit.
  # - sync_many_micro_batches: the estimate's cost does not grow with m (it built a plan per micro-batch count, past
  #   21 GB for m = 60000); sync_balanced_cut_large_batch: a micro-batch of 60000 samples under the default balanced
  #   cut (its layer costs are measured at a few samples: at the full micro-batch the probe ran out of memory first).
  foreach(case IN ITEMS
          "memory_refused_pb:1400:--push-buffer:300:--mode|pb|--stages|fine|--batch|2000|--push-buffer|64"
          "memory_refused_sync:1400:--schedule 1f1b:300:--mode|sync|--stages|2,4|--schedule|gpipe|--micro-batches|4|--batch|16000"
          "sync_many_micro_batches:none:a smaller --batch:60:--mode|sync|--micro-batches|60000|--batch|60000"
          "sync_balanced_cut_large_batch:none:a smaller --batch:60:--mode|sync|--micro-batches|1|--batch|60000")
    string(REPLACE ":" ";" parts "${case}")
    list(GET parts 0 name)
    list(GET parts 1 larger)
    list(GET parts 2 remedy)
    list(GET parts 3 timeout)
    list(GET parts 4 options)
    string(REPLACE "|" ";" options "${options}")
    add_test(NAME pipeprop_train_${name}
             COMMAND /usr/bin/python3 ${CMAKE_CURRENT_SOURCE_DIR}/train/check_memory_refusal.py
                     $<TARGET_FILE:pipeprop_train> ${pipeprop_train_data} 700 ${larger} "${remedy}" ${options}
                     --epochs 0)
    set_tests_properties(pipeprop_train_${name} PROPERTIES ENVIRONMENT "OPENBLAS_NUM_THREADS=1" TIMEOUT ${timeout})
  endforeach()
endif()
if(PIPEPROP_BUILD_TESTS)
  # --mode sync with a batch larger than the epoch is a bad option (exit 2) before the balanced cut measures
  # anything (as in --mode sgd and pb): it measured its costs at B / m = 262144 samples first.
  pipeprop_train_test(sync_batch_above_epoch EXPECT 2 ADDRESS_LIMIT_MIB 700
    ARGS --mode sync --network mlp --batch 1048576 --progress log --data ${pipeprop_train_data}
    REGEX "--batch: 1048576 is larger than the 60000 training samples of an epoch" NOT_REGEX "out of memory")
  set_tests_properties(pipeprop_train_sync_batch_above_epoch PROPERTIES TIMEOUT 60)
endif()
