# ctest helper for examples/pipeprop_train.cmake: a --mode sgd run resumed from a checkpoint continues bit-identically
# (parameters and velocities byte-identical; train_loss, test_loss, test_accuracy equal). Inputs: PROGRAM, DATA, WORK
# (scratch directory). The comparison itself: resume_comparison.cmake.
set(quick --network mlp --batch 32 --max-samples 1000 --max-test-samples 1000 --progress none --data ${DATA})
set(min_tensors 6)
set(tensors_what "parameters and velocities of 3 dense layers")
set(keys train_loss test_loss test_accuracy)
set(label "resume")
include(${CMAKE_CURRENT_LIST_DIR}/resume_comparison.cmake)
