# ctest helper for examples/pipeprop_train_llama.cmake: a --network llama-tiny --mode sgd run (AdamW) resumed from a
# checkpoint continues bit-identically: parameters and AdamW's first and second moments byte-identical, the step
# count restored (the bias corrections depend on it); train_loss and validation_loss equal. Few steps: 2 epochs of
# 48 sequences, batch 16. Inputs: PROGRAM, DATA (text corpus directory), WORK. The comparison: resume_comparison.cmake.
set(quick --network llama-tiny --mode sgd --batch 16 --max-samples 48 --max-test-samples 16 --progress none
          --data ${DATA})
set(min_tensors 63)
set(tensors_what "parameters, first and second moments of the 21 parameter tensors of llama-tiny")
set(keys train_loss validation_loss validation_token_accuracy)
set(changed_tensor layer_00.table.npy)
set(label "llama-tiny resume (AdamW)")
include(${CMAKE_CURRENT_LIST_DIR}/resume_comparison.cmake)
