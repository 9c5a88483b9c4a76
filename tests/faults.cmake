# Fault tests of the main program: kill -9 at random times while it writes checkpoints (the
# checkpoint directory always loads: old or new, never half), 20 kills, about 15 s.
if(PIPEPROP_BUILD_EXAMPLES)
  add_test(NAME pipeprop_train_kill_during_checkpoint
           COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/faults/kill_during_checkpoint.sh $<TARGET_FILE:pipeprop_train>
                   /usr/share/datasets/fashion-mnist ${CMAKE_CURRENT_BINARY_DIR}/kill_during_checkpoint 20 12)
  set_tests_properties(pipeprop_train_kill_during_checkpoint PROPERTIES
    ENVIRONMENT "OPENBLAS_NUM_THREADS=1" TIMEOUT 240)
endif()
