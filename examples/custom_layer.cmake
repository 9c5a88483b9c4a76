# examples/custom_layer.cpp checks its user-defined layer with pipeprop::testing::check_gradients and exits non-zero
# on failure; run it as a test.
if(PIPEPROP_BUILD_TESTS)
  add_test(NAME example_custom_layer COMMAND custom_layer)
  set_tests_properties(example_custom_layer PROPERTIES ENVIRONMENT "OPENBLAS_NUM_THREADS=1")
endif()
