# Runs PROGRAM with --lr nan and fails unless it exits with code 2 (a bad option) and says which option.
execute_process(COMMAND ${PROGRAM} --lr nan --weight-decay 0 --max-samples 10 RESULT_VARIABLE rc ERROR_VARIABLE err
                OUTPUT_QUIET)
if(NOT rc EQUAL 2 OR NOT err MATCHES "--lr: must be a finite number")
  message(FATAL_ERROR "expected exit 2 with '--lr: must be a finite number', got ${rc}: ${err}")
endif()
