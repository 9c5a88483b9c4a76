# --mode sync of the main program (examples/train/mode_sync.hpp): a quick ZB-H1 + 2BP run on Fashion-MNIST with a
# batch that 4 micro-batches do not divide, writing a trace (exit 0, JSON result naming the schedule, the trace
# files exist); bad sync options give the usage text and exit code 2. Uses the main program's ctest helper.
if(PIPEPROP_BUILD_EXAMPLES)
  include(${PROJECT_SOURCE_DIR}/examples/train/pipeprop_train_test.cmake)

  set(trace ${CMAKE_CURRENT_BINARY_DIR}/pipeprop_train_sync_trace.json)
  pipeprop_train_test(sync_smoke EXPECT 0
    ARGS --mode sync --network mlp --batch 30 --micro-batches 4 --schedule zb_h1 --two-stage-bp on
         --max-samples 2000 --max-test-samples 2000 --progress log --data /usr/share/datasets/fashion-mnist
         --trace ${trace}
    REGEX "sync: schedule zb_h1\\+2bp, 2 stages.*activation slots per stage 2,2.*trace .*written"
    LAST_LINE_REGEX "^\\{\"mode\":\"sync\",.*\"test_accuracy\":0\\.[5-9][0-9]*,.*\"schedule\":\"zb_h1\\+2bp\",\"two_stage_bp\":true,\"micro_batches\":4,\"stages\":2,.*\\}$")
  add_test(NAME pipeprop_train_sync_trace_files
           COMMAND ${CMAKE_COMMAND} -E cat ${trace} ${CMAKE_CURRENT_BINARY_DIR}/pipeprop_train_sync_trace.svg)
  set_tests_properties(pipeprop_train_sync_trace_files PROPERTIES DEPENDS pipeprop_train_sync_smoke
                       PASS_REGULAR_EXPRESSION "traceEvents.*</svg>")
  # Messages have no length limit ({fmt}, no fixed buffers): a trace path of over 200 characters is named in full
  # (the "trace ... written" line was cut at a char[200] buffer, and sync_smoke failed in a long build directory).
  string(REPEAT "long_directory_name_" 10 long_name)
  set(long_dir ${CMAKE_CURRENT_BINARY_DIR}/${long_name})
  file(MAKE_DIRECTORY ${long_dir})
  pipeprop_train_test(sync_long_trace_path EXPECT 0
    ARGS --mode sync --network mlp --batch 32 --micro-batches 2 --max-samples 320 --max-test-samples 200
         --progress log --data /usr/share/datasets/fashion-mnist --trace ${long_dir}/trace.json
    REGEX "sync: trace ${long_dir}/trace\\.json and ${long_dir}/trace\\.svg written; last full step [0-9.]+ ms measured, [0-9.]+ ms simulated")
  # --trace X.svg: the SVG goes to X.svg and the Chrome trace to X.json (the SVG used to overwrite the JSON).
  set(svg_trace ${CMAKE_CURRENT_BINARY_DIR}/pipeprop_train_sync_gantt.svg)
  pipeprop_train_test(sync_trace_svg_path EXPECT 0
    ARGS --mode sync --network mlp --batch 32 --micro-batches 2 --max-samples 320 --max-test-samples 200
         --progress log --data /usr/share/datasets/fashion-mnist --trace ${svg_trace}
    REGEX "sync: trace .*pipeprop_train_sync_gantt\\.json and .*pipeprop_train_sync_gantt\\.svg written")
  add_test(NAME pipeprop_train_sync_trace_svg_path_files
           COMMAND ${CMAKE_COMMAND} -E cat ${CMAKE_CURRENT_BINARY_DIR}/pipeprop_train_sync_gantt.json ${svg_trace})
  set_tests_properties(pipeprop_train_sync_trace_svg_path_files PROPERTIES DEPENDS pipeprop_train_sync_trace_svg_path
                       PASS_REGULAR_EXPRESSION "traceEvents.*</svg>")
  pipeprop_train_test(sync_bad_schedule EXPECT 2 ARGS --mode sync --schedule zb_h3 REGEX "--schedule.*Usage:")
  pipeprop_train_test(sync_bad_two_stage_bp EXPECT 2 ARGS --mode sync --two-stage-bp maybe
    REGEX "--two-stage-bp.*Usage:")
  pipeprop_train_test(sync_too_many_micro_batches EXPECT 2 ARGS --mode sync --batch 4 --micro-batches 8
    REGEX "--micro-batches: 8 micro-batches cannot split a batch of 4 samples.*Usage:")
endif()

# --stages and --executor are registered by --mode pb and shared by --mode sync (not rejected there).
add_test(NAME pipeprop_train_sync_shared_options
         COMMAND pipeprop_train --mode sync --network mlp --stages 2 --executor sequential --batch 32
                 --micro-batches 4 --max-samples 640 --max-test-samples 500 --progress none)
set_tests_properties(pipeprop_train_sync_shared_options PROPERTIES
  ENVIRONMENT "OPENBLAS_NUM_THREADS=1"
  PASS_REGULAR_EXPRESSION "\"stage_cut\":\"\\[0,2\\) \\[2,6\\)\".*\"executor\":\"sequential\"")
