# README.md's example is a program; the test runs it, so the README cannot drift from the library.
if(PIPEPROP_BUILD_TESTS)
  add_test(NAME example_readme COMMAND readme_example)
  set_tests_properties(example_readme PROPERTIES ENVIRONMENT "OPENBLAS_NUM_THREADS=1" TIMEOUT 120)
endif()
