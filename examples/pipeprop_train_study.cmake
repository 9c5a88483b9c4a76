# bench/pb_fidelity.sh's resumable studies: a study killed in the middle of a run and invoked again ends
# with the same bits as an uninterrupted one (examples/train/check_study_resume.sh: the small CNN, SGD B = 32 and
# PB + SC + LWP at b = 1, 3 epochs of 800 samples; about 40 s on the loaded 2-core host, mostly program start-up).
# Included after pipeprop_train.cmake (the globbed extras are sorted), whose pipeprop_train_data it uses.
if(PIPEPROP_BUILD_TESTS AND (NOT PIPEPROP_TRAIN_NETWORKS OR PIPEPROP_TRAIN_NETWORKS STREQUAL "all" OR
                             "cnn" IN_LIST PIPEPROP_TRAIN_NETWORKS))
  find_program(PIPEPROP_BASH bash)
  if(PIPEPROP_BASH)
    add_test(NAME pipeprop_train_study_resume
             COMMAND ${PIPEPROP_BASH} ${CMAKE_CURRENT_SOURCE_DIR}/train/check_study_resume.sh
                     $<TARGET_FILE:pipeprop_train> ${pipeprop_train_data}
                     ${CMAKE_CURRENT_BINARY_DIR}/pipeprop_train_study_resume)
    set_tests_properties(pipeprop_train_study_resume PROPERTIES ENVIRONMENT "OPENBLAS_NUM_THREADS=1" TIMEOUT 300)
  endif()
endif()
