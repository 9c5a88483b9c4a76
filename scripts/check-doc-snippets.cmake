# ctest helper: every C++ code block of README.md and docs/*.md that is a whole program (blocks marked
# <!-- snippet: fragment --> are skipped; <!-- snippet: part NAME --> blocks are joined) is extracted by
# scripts/extract-doc-snippets.py and compiled (-fsyntax-only: GCC checks and instantiates every template) against
# include/ with the project's compiler; a block that does not compile fails the test, naming the page.
#   cmake -DPYTHON=... -DSOURCE=<project root> -DCXX=<compiler> -DWORK=<scratch dir> -P check-doc-snippets.cmake
file(REMOVE_RECURSE ${WORK})
file(MAKE_DIRECTORY ${WORK})
execute_process(COMMAND ${PYTHON} ${SOURCE}/scripts/extract-doc-snippets.py ${WORK} WORKING_DIRECTORY ${SOURCE}
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "extract-doc-snippets.py failed (${rc}):\n${out}${err}")
endif()
message(STATUS "${out}${err}")
file(GLOB snippets ${WORK}/*.cpp)
list(LENGTH snippets count)
if(count EQUAL 0)
  message(FATAL_ERROR "no C++ program found in README.md and docs/ (the extractor found nothing to compile)")
endif()
set(failed "")
foreach(snippet IN LISTS snippets)
  execute_process(COMMAND ${CXX} -std=c++20 -march=native -ffp-contract=off -fsyntax-only -I${SOURCE}/include
                          -I${SOURCE}/examples ${snippet}
                  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  get_filename_component(name ${snippet} NAME)
  if(NOT rc EQUAL 0)
    string(APPEND failed "${name}:\n${err}\n")
  else()
    message(STATUS "${name}: compiles")
  endif()
endforeach()
if(failed)
  message(FATAL_ERROR "documentation code that does not compile:\n${failed}")
endif()
