# The main program on bad input and output: each test failed before its fix. Included after
# pipeprop_train.cmake (the globbed extras are sorted), whose pipeprop_train_test() helper and variables it uses.
if(PIPEPROP_BUILD_TESTS)
  include(${CMAKE_CURRENT_SOURCE_DIR}/train/pipeprop_train_test.cmake)

  # A --mode pb checkpoint is refused by --mode sgd / sync (exit 1, both modes named); sgd -> sync / pb still works.
  add_test(NAME pipeprop_train_cross_mode_resume
           COMMAND ${CMAKE_COMMAND} -DPROGRAM=$<TARGET_FILE:pipeprop_train> -DDATA=${pipeprop_train_data}
                   -DWORK=${CMAKE_CURRENT_BINARY_DIR}/pipeprop_train_cross_mode_resume
                   -P ${CMAKE_CURRENT_SOURCE_DIR}/train/check_cross_mode_resume.cmake)
  set_tests_properties(pipeprop_train_cross_mode_resume PROPERTIES ENVIRONMENT "OPENBLAS_NUM_THREADS=1" TIMEOUT 300)

  # A resumed run appends to its --metrics file (the earlier epochs' lines were erased).
  add_test(NAME pipeprop_train_resume_metrics
           COMMAND ${CMAKE_COMMAND} -DPROGRAM=$<TARGET_FILE:pipeprop_train> -DDATA=${pipeprop_train_data}
                   -DWORK=${CMAKE_CURRENT_BINARY_DIR}/pipeprop_train_resume_metrics
                   -P ${CMAKE_CURRENT_SOURCE_DIR}/train/check_resume_metrics.cmake)
  set_tests_properties(pipeprop_train_resume_metrics PROPERTIES ENVIRONMENT "OPENBLAS_NUM_THREADS=1" TIMEOUT 300)

  # Output paths that cannot be written are reported before the data are loaded (exit 2, option and path named): a
  # path below a regular file (works for root too, unlike permissions).
  set(not_a_dir ${CMAKE_CURRENT_BINARY_DIR}/pipeprop_train_not_a_directory)
  file(WRITE ${not_a_dir} "a file\n")
  foreach(case IN ITEMS trace:--mode|sync|--trace:trace.json checkpoint_out:--checkpoint-out:ckpt
                        metrics:--metrics:m.jsonl)
    string(REPLACE ":" ";" parts "${case}")
    list(GET parts 0 name)
    list(GET parts 1 options)
    list(GET parts 2 file)
    string(REPLACE "|" ";" options "${options}")
    list(GET options -1 option)
    pipeprop_train_test(${name}_unwritable EXPECT 2
      ARGS --network mlp --max-samples 320 --data ${pipeprop_train_data} ${options} ${not_a_dir}/${file}
      REGEX "${option}: .*pipeprop_train_not_a_directory.* is not a directory"
      NOT_REGEX "data: |epoch 1/1")
  endforeach()
  # Training finished, then writing the trace failed (a trace path that is a link to /dev/full: it opens, every write
  # fails with ENOSPC; its .svg is a plain file next to it): the JSON result line is still printed, naming the
  # failure, then the error; exit 1.
  if(EXISTS /dev/full)
    set(full_trace ${CMAKE_CURRENT_BINARY_DIR}/pipeprop_train_trace_full.json)
    file(CREATE_LINK /dev/full ${full_trace} SYMBOLIC)
    pipeprop_train_test(trace_write_fails EXPECT 1
      ARGS --mode sync --network mlp --batch 32 --micro-batches 2 --max-samples 320 --max-test-samples 100
           --progress log --data ${pipeprop_train_data} --trace ${full_trace}
      REGEX "pipeprop_train: error: --trace: .*writing '.*pipeprop_train_trace_full\\.json' failed"
      LAST_LINE_REGEX "^\\{\"mode\":\"sync\",.*\"test_accuracy\":.*\"trace_error\":\".*trace_full\\.json.*\\}$")
  endif()

  # CIFAR-10 with --network cnn32 (3x32x32), on a tiny synthetic dataset the test writes (with perl: NUL bytes).
  find_program(PIPEPROP_PERL perl)
  if(PIPEPROP_PERL)
    add_test(NAME pipeprop_train_cifar10_cnn32
             COMMAND ${CMAKE_COMMAND} -DPROGRAM=$<TARGET_FILE:pipeprop_train> -DPERL=${PIPEPROP_PERL}
                     -DWORK=${CMAKE_CURRENT_BINARY_DIR}/pipeprop_train_cifar10_cnn32
                     -P ${CMAKE_CURRENT_SOURCE_DIR}/train/check_cifar10.cmake)
    set_tests_properties(pipeprop_train_cifar10_cnn32 PROPERTIES ENVIRONMENT "OPENBLAS_NUM_THREADS=1" TIMEOUT 300)
  endif()

  # NaN passes CLI11's range checks: --pipemare-warmup / --pipemare-decay nan are bad options (exit 2 at parsing,
  # before the data are loaded: no data directory is needed).
  foreach(option pipemare-warmup pipemare-decay)
    pipeprop_train_test(pb_${option}_nan EXPECT 2
      ARGS --mode pb --mitigation pipemare --${option} nan --data ${CMAKE_CURRENT_BINARY_DIR}/no-such-dataset
      REGEX "--${option}: must be a finite number, got nan.*Usage:")
  endforeach()

  # A seed (or sample count) above 2^64 - 1 is a bad option, not silently capped.
  pipeprop_train_test(seed_too_large EXPECT 2
    ARGS --seed 99999999999999999999 --data ${CMAKE_CURRENT_BINARY_DIR}/no-such-dataset
    REGEX "--seed: must be at most 18446744073709551615 \\(2\\^64 - 1\\), got 99999999999999999999.*Usage:")
  pipeprop_train_test(max_samples_too_large EXPECT 2 ARGS --max-samples 18446744073709551616
    --data ${CMAKE_CURRENT_BINARY_DIR}/no-such-dataset
    REGEX "--max-samples: must be at most 18446744073709551615.*Usage:")
endif()
