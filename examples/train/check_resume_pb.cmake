# ctest helper for examples/pipeprop_train_pb.cmake: a --mode pb run resumed from its checkpoint continues
# bit-identically (PB checkpoints are taken at the drained end of an epoch; docs/pb-semantics.md §1): weights,
# velocities and policy state byte-identical; train_loss, test_loss, test_accuracy and delays equal.
# Inputs: PROGRAM, DATA, WORK, EXECUTOR, MITIGATION. The comparison itself: resume_comparison.cmake.
set(quick --mode pb --network mlp --batch 2 --stages 2,4 --mitigation ${MITIGATION} --executor ${EXECUTOR}
          --reference-batch 32 --max-samples 600 --max-test-samples 500 --progress none --data ${DATA})
set(min_tensors 12)
set(tensors_what "weights and velocities of 3 dense layers")
set(keys train_loss test_loss test_accuracy delays)
set(label "pb resume (${EXECUTOR}, ${MITIGATION})")
include(${CMAKE_CURRENT_LIST_DIR}/resume_comparison.cmake)
