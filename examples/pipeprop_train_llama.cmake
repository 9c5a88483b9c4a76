# --network llama-tiny of the main program (train/networks.hpp: a 2-block LLaMA-like byte-level decoder) in
# --mode sgd, --mode pb and --mode sync (AdamW by default) on Debian's fortunes corpus: ctest runs. Included after pipeprop_train.cmake (the
# globbed extras are sorted), whose pipeprop_train_test() helper it uses.
if(PIPEPROP_BUILD_TESTS)
  set(pipeprop_text_data /usr/share/games/fortunes)
  # A validation loss (nats per byte) below 5.545, the uniform-byte baseline ln(256) = 5.5452.
  set(below_uniform "([0-4]\\.[0-9]+|5\\.[0-4][0-9]*|5\\.5[0-3][0-9]*|5\\.54[0-4][0-9]*)")
  # Quick run (a few hundred sequences, one epoch): the JSON result with the validation keys, below the baseline.
  pipeprop_train_test(llama_smoke EXPECT 0
    ARGS --network llama-tiny --mode sgd --batch 16 --max-samples 320 --max-test-samples 64 --progress log
         --data ${pipeprop_text_data}
    REGEX "data: [0-9]+ training and [0-9]+ validation sequences of 64 tokens.*optimizer: AdamW.*epoch 1/1: train loss [0-9.]+, validation loss [0-9.]+ .perplexity"
    LAST_LINE_REGEX "^\\{\"mode\":\"sgd\",\"network\":\"llama-tiny\",\"batch\":16,\"epochs\":1,\"samples\":320,.*\"validation_loss\":${below_uniform},\"validation_perplexity\":[0-9.e+-]+,\"validation_token_accuracy\":0\\.[0-9]+,\"validation_sequences\":64,\"validation_tokens\":4096,.*\"optimizer\":\"adamw\",\"beta1\":0\\.9,\"beta2\":0\\.99,.*\\}$")
  set_tests_properties(pipeprop_train_llama_smoke PROPERTIES TIMEOUT 120)

  # The validation loss falls between epoch 1 and epoch 2.
  add_test(NAME pipeprop_train_llama_validation_falls
           COMMAND ${CMAKE_COMMAND} -DPROGRAM=$<TARGET_FILE:pipeprop_train> -DDATA=${pipeprop_text_data}
                   -DWORK=${CMAKE_CURRENT_BINARY_DIR}/pipeprop_train_llama_validation_falls
                   -P ${CMAKE_CURRENT_SOURCE_DIR}/train/check_validation_falls.cmake)
  set_tests_properties(pipeprop_train_llama_validation_falls PROPERTIES ENVIRONMENT "OPENBLAS_NUM_THREADS=1"
                       TIMEOUT 180)

  # Bit-identical resume (AdamW moments and step count in the checkpoint).
  add_test(NAME pipeprop_train_llama_resume
           COMMAND ${CMAKE_COMMAND} -DPROGRAM=$<TARGET_FILE:pipeprop_train> -DDATA=${pipeprop_text_data}
                   -DWORK=${CMAKE_CURRENT_BINARY_DIR}/pipeprop_train_llama_resume
                   -P ${CMAKE_CURRENT_SOURCE_DIR}/train/check_resume_llama.cmake)
  set_tests_properties(pipeprop_train_llama_resume PROPERTIES ENVIRONMENT "OPENBLAS_NUM_THREADS=1" TIMEOUT 180)

  # --mode sync: 1F1B with 2BP, m = 4, a cut inside the first transformer block (position 3: after its attention
  # residual's fork and norm), AdamW; below the baseline after one short epoch.
  pipeprop_train_test(llama_sync_smoke EXPECT 0
    ARGS --network llama-tiny --mode sync --schedule 1f1b --two-stage-bp on --micro-batches 4 --stages 3,9
         --batch 16 --max-samples 320 --max-test-samples 64 --progress log --data ${pipeprop_text_data}
    REGEX "optimizer: AdamW.*sync: schedule 1f1b\\+2bp, 3 stages.*epoch 1/1: train loss [0-9.]+, validation loss"
    LAST_LINE_REGEX "^\\{\"mode\":\"sync\",\"network\":\"llama-tiny\",.*\"validation_loss\":${below_uniform},.*\"schedule\":\"1f1b\\+2bp\",\"two_stage_bp\":true,\"micro_batches\":4,\"stages\":3,.*\"optimizer\":\"adamw\",\"beta1\":0\\.9,.*\\}$")
  set_tests_properties(pipeprop_train_llama_sync_smoke PROPERTIES TIMEOUT 180)
  # ZB-V (2 stages per device, V placement) on 4 stages = 2 devices, m = 4; an odd stage count is refused.
  pipeprop_train_test(llama_sync_zb_v EXPECT 0
    ARGS --network llama-tiny --mode sync --schedule zb_v --micro-batches 4 --stages 3,9,14
         --batch 16 --max-samples 160 --max-test-samples 32 --progress log --data ${pipeprop_text_data}
    REGEX "sync: schedule zb_v\\+2bp, 4 stages"
    LAST_LINE_REGEX "^\\{\"mode\":\"sync\",\"network\":\"llama-tiny\",.*\"validation_loss\":${below_uniform},.*\"schedule\":\"zb_v\\+2bp\",.*\"stages\":4,.*\\}$")
  set_tests_properties(pipeprop_train_llama_sync_zb_v PROPERTIES TIMEOUT 180)
  pipeprop_train_test(llama_sync_zb_v_odd_stages EXPECT 2
    ARGS --network llama-tiny --mode sync --schedule zb_v --stages 3,9 --batch 16 --max-samples 32
         --data ${pipeprop_text_data}
    REGEX "zb_v puts 2 stages on each device: it needs an even number of stages, got 3")
  pipeprop_train_test(llama_sync_interleaved_m EXPECT 2
    ARGS --network llama-tiny --mode sync --schedule interleaved_1f1b --stages 3,9,14 --micro-batches 3
         --batch 16 --max-samples 32 --data ${pipeprop_text_data}
    REGEX "interleaved_1f1b on 2 devices needs m a multiple of 2 \\(or below it\\), got 3")

  # --mode sync with m = 1 micro-batch is the sequential trainer bit for bit (same ops per layer, AdamW per
  # element): the same train and validation losses, to the last printed digit, for every schedule with 2BP on.
  add_test(NAME pipeprop_train_llama_sync_equals_sgd
           COMMAND ${CMAKE_COMMAND} -DPROGRAM=$<TARGET_FILE:pipeprop_train> -DDATA=${pipeprop_text_data}
                   -P ${CMAKE_CURRENT_SOURCE_DIR}/train/check_sync_equals_sgd.cmake)
  set_tests_properties(pipeprop_train_llama_sync_equals_sgd PROPERTIES ENVIRONMENT "OPENBLAS_NUM_THREADS=1"
                       TIMEOUT 300)

  # --mode pb: fine-grained PB at b = 1 (a stage per parametric layer: 11 stages, cuts inside both transformer
  # blocks), AdamW (the default optimizer of the text networks) with plain PB (the default mitigation with AdamW);
  # below the baseline after a few hundred sequences.
  pipeprop_train_test(llama_pb_smoke EXPECT 0
    ARGS --network llama-tiny --mode pb --stages fine --max-samples 240 --max-test-samples 64 --progress log
         --data ${pipeprop_text_data}
    REGEX "optimizer: AdamW, lr 0.003.*pb: 11 stages, mitigation none, executor concurrent, micro-batch b = 1.*epoch 1/1: train loss [0-9.]+, validation loss"
    LAST_LINE_REGEX "^\\{\"mode\":\"pb\",\"network\":\"llama-tiny\",\"batch\":1,.*\"validation_loss\":${below_uniform},.*\"mitigation\":\"none\",\"executor\":\"concurrent\",.*\"stages\":11,\"delays\":\"20,18,16,14,12,10,8,6,4,2,0\",.*\"optimizer\":\"adamw\",\"beta1\":0\\.9,.*\\}$")
  set_tests_properties(pipeprop_train_llama_pb_smoke PROPERTIES TIMEOUT 180)
  # Bit-identical resume of fine-grained PB with AdamW and weight stashing from its drained checkpoint.
  add_test(NAME pipeprop_train_llama_pb_resume
           COMMAND ${CMAKE_COMMAND} -DPROGRAM=$<TARGET_FILE:pipeprop_train> -DDATA=${pipeprop_text_data}
                   -DWORK=${CMAKE_CURRENT_BINARY_DIR}/pipeprop_train_llama_pb_resume -DMODE=pb
                   -P ${CMAKE_CURRENT_SOURCE_DIR}/train/check_resume_llama.cmake)
  set_tests_properties(pipeprop_train_llama_pb_resume PROPERTIES ENVIRONMENT "OPENBLAS_NUM_THREADS=1" TIMEOUT 180)
  # SC and LWP are momentum SGD's (PB-paper section 4): refused with AdamW (exit 2 with the usage text).
  pipeprop_train_test(llama_pb_sc_adamw EXPECT 2 ARGS --network llama-tiny --mode pb --mitigation sc_lwp
    REGEX "--mitigation: sc_lwp runs with momentum SGD only.*Usage:")
  # Every mitigation AdamW does not admit is refused with a sentence naming the ones it does (exit 2).
  foreach(m IN ITEMS sc lwp lwp_wd)
    pipeprop_train_test(llama_pb_${m}_adamw_refused EXPECT 2 ARGS --network llama-tiny --mode pb --mitigation ${m}
      REGEX "--mitigation: ${m} runs with momentum SGD only.*with AdamW use none, stash, pipemare, lwp_opt, nesterov or 2bw.*Usage:")
  endforeach()
  # The policies for adaptive optimizers with AdamW on llama-tiny: a short fine-grained run ends below the baseline.
  foreach(m IN ITEMS lwp_opt nesterov 2bw)
    pipeprop_train_test(llama_pb_${m}_adamw EXPECT 0
      ARGS --network llama-tiny --mode pb --stages fine --mitigation ${m} --max-samples 240 --max-test-samples 64
           --data ${pipeprop_text_data}
      LAST_LINE_REGEX "^\\{\"mode\":\"pb\",\"network\":\"llama-tiny\",.*\"validation_loss\":${below_uniform},.*\"mitigation\":\"${m}\",.*\"optimizer\":\"adamw\",.*\\}$")
    set_tests_properties(pipeprop_train_llama_pb_${m}_adamw PROPERTIES TIMEOUT 180)
  endforeach()
  # Not available yet: AdamW on the image networks (exit 2 with the usage text).
  pipeprop_train_test(adamw_image_network EXPECT 2 ARGS --network mlp --optimizer adamw
    REGEX "--optimizer: adamw is not available for the image networks yet.*Usage:")
  # Momentum SGD's options in a run that uses AdamW: refused (they would be ignored), in every mode.
  foreach(mode IN ITEMS sgd pb sync)
    pipeprop_train_test(llama_adamw_momentum_${mode} EXPECT 2 ARGS --network llama-tiny --mode ${mode} --momentum 0.5
      REGEX "--momentum: is an option of momentum SGD; this run uses AdamW.*Usage:")
  endforeach()
  pipeprop_train_test(llama_adamw_nesterov EXPECT 2 ARGS --network llama-tiny --mode sgd --nesterov
    REGEX "--nesterov: is an option of momentum SGD; this run uses AdamW.*Usage:")
  # A missing text corpus: a message naming the path, exit 1.
  pipeprop_train_test(llama_missing_corpus EXPECT 1
    ARGS --network llama-tiny --data ${CMAKE_CURRENT_BINARY_DIR}/no-such-corpus
    REGEX "no-such-corpus: text corpus directory not found")
  # llama-4x128 (4 blocks of width 128: 19 stages under --stages fine, first delay 36), in builds that compile it
  # (off by default): PB with AdamW and the optimizer-aware prediction, below the baseline after a short epoch; a
  # build without it names the CMake option (exit 2).
  if(PIPEPROP_TRAIN_NETWORKS STREQUAL "all" OR "llama-4x128" IN_LIST PIPEPROP_TRAIN_NETWORKS)
    pipeprop_train_test(llama_4x128_pb EXPECT 0
      ARGS --network llama-4x128 --mode pb --stages fine --mitigation lwp_opt --max-samples 320 --max-test-samples 64
           --progress log --data ${pipeprop_text_data}
      LAST_LINE_REGEX "^\\{\"mode\":\"pb\",\"network\":\"llama-4x128\",.*\"validation_loss\":${below_uniform},.*\"parameters\":857216,.*\"mitigation\":\"lwp_opt\",.*\"stages\":19,\"delays\":\"36,34,.*\"optimizer\":\"adamw\".*\\}$")
    set_tests_properties(pipeprop_train_llama_4x128_pb PROPERTIES TIMEOUT 180)
  else()
    pipeprop_train_test(llama_4x128_not_compiled EXPECT 2 ARGS --network llama-4x128 --data ${pipeprop_text_data}
      REGEX "--network: llama-4x128 is not compiled into this build.*PIPEPROP_TRAIN_NETWORKS")
  endif()
endif()
