# ctest helper for examples/pipeprop_train_llama.cmake: a --network llama-tiny run (AdamW) resumed from a checkpoint
# continues bit-identically: parameters and AdamW's first and second moments byte-identical, the step count restored
# (the bias corrections depend on it); train_loss and validation_loss equal. Few steps: 2 epochs of 48 sequences.
# MODE sgd (default): batch 16; MODE pb: fine-grained PB (11 stages, cuts inside both blocks) with weight stashing,
# micro-batches of 2 sequences, the PB checkpoint at the drained end of epoch 1 (pb/checkpoint.hpp).
# Inputs: PROGRAM, DATA (text corpus directory), WORK, MODE. The comparison: resume_comparison.cmake.
if(NOT DEFINED MODE)
  set(MODE sgd)
endif()
if(MODE STREQUAL "pb")
  set(mode_options --mode pb --stages fine --mitigation stash --batch 2)
else()
  set(mode_options --mode sgd --batch 16)
endif()
set(quick --network llama-tiny ${mode_options} --max-samples 48 --max-test-samples 16 --progress none
          --data ${DATA})
set(min_tensors 63)
set(tensors_what "parameters, first and second moments of the 21 parameter tensors of llama-tiny")
set(keys train_loss validation_loss validation_token_accuracy)
set(changed_tensor layer_00.table.npy)
set(label "llama-tiny resume (${MODE}, AdamW)")
include(${CMAKE_CURRENT_LIST_DIR}/resume_comparison.cmake)
