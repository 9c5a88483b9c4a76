# --mode pb of the main program (examples/train/mode_pb.hpp): ctest runs. Included after pipeprop_train.cmake (the
# globbed extras are sorted), whose pipeprop_train_test() helper and variables it uses. (No unbalanced '[' in the
# regular expressions: CMake would not split the argument list there.)
if(PIPEPROP_BUILD_TESTS)
  set(num "-?[0-9][0-9.e+-]*")
  # Quick PB run of the MLP: 3 fine-grained stages (delays 4,2,0), b = 1, SC+LWP, scaled hyperparameters printed.
  pipeprop_train_test(pb_smoke_mlp EXPECT 0
    ARGS --mode pb --network mlp --stages fine --mitigation sc_lwp --reference-batch 32 --max-samples 1500
         --max-test-samples 1000 --progress log --data ${pipeprop_train_data}
    REGEX "hyperparameters scaled from B = 32 .* to b = 1: lr 5.136.e-05, momentum 0.99671.*pb: stage  0 layers .0, 3.  D =  4.*pb: stage  2 busy"
    LAST_LINE_REGEX "^\\{\"mode\":\"pb\",\"network\":\"mlp\",\"batch\":1,\"epochs\":1,\"samples\":1500,.*\"test_accuracy\":0\\.[5-9][0-9]*,.*\"mitigation\":\"sc_lwp\",\"executor\":\"concurrent\",\"reference_batch\":32,\"stages\":3,\"delays\":\"4,2,0\",\"utilization\":\"${num},${num},${num}\",\"lanes\":\"0,[0-2],[0-2]\",\"pb_samples_per_second\":${num},.*\\}$")

  # --flush-subnormals reaches the engine and the JSON result (pb::options::flush_subnormals).
  pipeprop_train_test(pb_flush_subnormals EXPECT 0
    ARGS --mode pb --network mlp --stages fine --mitigation sc_lwp --reference-batch 32 --max-samples 1500
         --max-test-samples 1000 --progress log --flush-subnormals --data ${pipeprop_train_data}
    LAST_LINE_REGEX "^\\{\"mode\":\"pb\",.*\"test_accuracy\":0\\.[5-9][0-9]*,.*\"flush_subnormals\":true.*\\}$")

  # The load adaptation (pb/load_adaptation.hpp) runs both ways with a probe after every measured run, and says so.
  pipeprop_train_test(pb_load_adaptation EXPECT 0
    ARGS --mode pb --network mlp --stages fine --mitigation sc_lwp --reference-batch 32 --max-samples 1500
         --max-test-samples 1000 --progress log --lanes 2 --push-buffer 4 --load-probe-period 1
         --data ${pipeprop_train_data}
    REGEX "pb: load adaptation: [1-9][0-9]* graph runs on the lanes, [1-9][0-9]* inline on one thread .[1-9][0-9]* of them probes., [0-9]+ switches"
    LAST_LINE_REGEX "^\\{\"mode\":\"pb\",.*\"test_accuracy\":0\\.[5-9][0-9]*,.*\"inline_runs\":[1-9][0-9]*,\"load_switches\":[0-9]+.*\\}$")

  # Bit-identical resume from PB checkpoints, both executors, policies with and without extra state.
  foreach(case IN ITEMS concurrent:sc_lwp sequential:pipemare concurrent:nesterov sequential:2bw)
    string(REPLACE ":" ";" parts ${case})
    list(GET parts 0 executor)
    list(GET parts 1 mitigation)
    add_test(NAME pipeprop_train_pb_resume_${executor}_${mitigation}
             COMMAND ${CMAKE_COMMAND} -DPROGRAM=$<TARGET_FILE:pipeprop_train> -DDATA=${pipeprop_train_data}
                     -DWORK=${CMAKE_CURRENT_BINARY_DIR}/pipeprop_train_pb_resume_${executor}_${mitigation}
                     -DEXECUTOR=${executor} -DMITIGATION=${mitigation}
                     -P ${CMAKE_CURRENT_SOURCE_DIR}/train/check_resume_pb.cmake)
    set_tests_properties(pipeprop_train_pb_resume_${executor}_${mitigation}
                         PROPERTIES ENVIRONMENT "OPENBLAS_NUM_THREADS=1" TIMEOUT 300)
  endforeach()

  # The epoch's training loss: the same in the metrics file and the result, for both executors.
  add_test(NAME pipeprop_train_pb_epoch_loss
           COMMAND ${CMAKE_COMMAND} -DPROGRAM=$<TARGET_FILE:pipeprop_train> -DDATA=${pipeprop_train_data}
                   -DWORK=${CMAKE_CURRENT_BINARY_DIR}/pipeprop_train_pb_epoch_loss
                   -P ${CMAKE_CURRENT_SOURCE_DIR}/train/check_epoch_loss.cmake)
  set_tests_properties(pipeprop_train_pb_epoch_loss PROPERTIES ENVIRONMENT "OPENBLAS_NUM_THREADS=1" TIMEOUT 300)

  # Bad PB options: usage text and exit code 2.
  pipeprop_train_test(pb_bad_stages EXPECT 2 ARGS --mode pb --stages 5,2 REGEX "--stages.*split point 1 \\(2\\).*Usage:")
  pipeprop_train_test(pb_bad_stages_text EXPECT 2 ARGS --mode pb --stages fine,x REGEX "--stages.*'fine'.*Usage:")
  pipeprop_train_test(pb_bad_mitigation EXPECT 2 ARGS --mode pb --mitigation magic REGEX "--mitigation.*Usage:")
  pipeprop_train_test(pb_bad_executor EXPECT 2 ARGS --mode pb --executor gpu REGEX "--executor.*Usage:")
  pipeprop_train_test(pb_option_in_sgd_mode EXPECT 2 ARGS --mode sgd --mitigation sc
    REGEX "--mitigation: is an option of --mode pb.*Usage:")
  # PipeDream-2BW needs at least D_0 micro-batches per update (--stages fine on the MLP: D_0 = 4).
  pipeprop_train_test(pb_2bw_accumulation EXPECT 2 ARGS --network mlp --mode pb --stages fine --mitigation 2bw
    --2bw-accumulation 3 REGEX "--2bw-accumulation: 3 micro-batches per update is below the first stage's delay D_0 = 4.*Usage:")
  pipeprop_train_test(pb_nesterov EXPECT 2 ARGS --network mlp --mode pb --nesterov
    REGEX "--nesterov: is not available in --mode pb.*use --mitigation nesterov.*Usage:")
endif()

# A diverging run exits 1 with the divergence message, and leaves the last good checkpoint byte-identical (docs/main-program.md),
# for --mode sgd and --mode pb (PB cannot undo its updates, so nothing may be saved after the divergence).
if(PIPEPROP_BUILD_TESTS)
  pipeprop_train_test(pb_diverged EXPECT 1
    ARGS --mode pb --network mlp --lr 1000 --max-samples 500 --max-test-samples 100 --progress none
         --data ${pipeprop_train_data}
    REGEX "training diverged: pipeprop::pb::engine: the loss of micro-batch [0-9]+ became (NaN|infinite)")
  foreach(case IN ITEMS "sgd:--batch|32|--lr|0.05" "pb:--mode|pb|--lr|0.001|--momentum|0.9")
    string(REGEX REPLACE ":.*" "" mode "${case}")
    string(REGEX REPLACE "^[a-z]*:" "" options "${case}")
    add_test(NAME pipeprop_train_divergence_keeps_checkpoint_${mode}
             COMMAND ${CMAKE_COMMAND} -DPROGRAM=$<TARGET_FILE:pipeprop_train> -DDATA=${pipeprop_train_data}
                     -DWORK=${CMAKE_CURRENT_BINARY_DIR}/pipeprop_train_divergence_${mode}
                     "-DOPTIONS=--network|mlp|--max-samples|500|--max-test-samples|100|${options}"
                     -P ${CMAKE_CURRENT_SOURCE_DIR}/train/check_divergence_keeps_checkpoint.cmake)
    set_tests_properties(pipeprop_train_divergence_keeps_checkpoint_${mode}
                         PROPERTIES ENVIRONMENT "OPENBLAS_NUM_THREADS=1" TIMEOUT 300)
  endforeach()
endif()
