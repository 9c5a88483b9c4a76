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
endif()
