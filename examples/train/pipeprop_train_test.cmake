# pipeprop_train_test(<name> EXPECT <exit code> ARGS <options...> [REGEX <output regex>] [NOT_REGEX <regex>]
#                     [LAST_LINE_REGEX <regex>] [ADDRESS_LIMIT_MIB <MiB>]):
# a ctest named pipeprop_train_<name> that runs the main program with ARGS through run_and_check.cmake (under an
# address-space limit, ulimit -v, with ADDRESS_LIMIT_MIB) and checks its exit code, its output (matching REGEX, not
# matching NOT_REGEX) and its last stdout line. Included by examples/pipeprop_train.cmake and the tests' extras.
include_guard(GLOBAL)

function(pipeprop_train_test name)
  cmake_parse_arguments(T "" "EXPECT;REGEX;NOT_REGEX;LAST_LINE_REGEX;ADDRESS_LIMIT_MIB" "ARGS" ${ARGN})
  list(JOIN T_ARGS "|" joined)  # run_and_check.cmake splits at '|' (a ';' list would be split by add_test)
  set(defs -DPROGRAM=$<TARGET_FILE:pipeprop_train> -DEXPECT=${T_EXPECT} "-DARGS=${joined}")
  if(T_REGEX)
    list(APPEND defs "-DREGEX=${T_REGEX}")
  endif()
  if(T_NOT_REGEX)
    list(APPEND defs "-DNOT_REGEX=${T_NOT_REGEX}")
  endif()
  if(T_LAST_LINE_REGEX)
    list(APPEND defs "-DLAST_LINE_REGEX=${T_LAST_LINE_REGEX}")
  endif()
  if(T_ADDRESS_LIMIT_MIB)
    list(APPEND defs "-DADDRESS_LIMIT_MIB=${T_ADDRESS_LIMIT_MIB}")
  endif()
  add_test(NAME pipeprop_train_${name}
           COMMAND ${CMAKE_COMMAND} ${defs} -P ${CMAKE_CURRENT_FUNCTION_LIST_DIR}/run_and_check.cmake)
  set_tests_properties(pipeprop_train_${name} PROPERTIES ENVIRONMENT "OPENBLAS_NUM_THREADS=1" TIMEOUT 300)
endfunction()
