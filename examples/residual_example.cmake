# docs/concepts.md's residual-network example is a program; the test runs it (fine-grained PB across residual blocks).
if(PIPEPROP_BUILD_TESTS)
  add_test(NAME example_residual COMMAND residual_example)
  set_tests_properties(example_residual PROPERTIES ENVIRONMENT "OPENBLAS_NUM_THREADS=1" TIMEOUT 300)
endif()
