# Compile-fail cases ("Errors" in DEVELOPERS.md): each tests/compile_fail/<name>.cpp is an object library
# cf_<name> that is NOT part of the default build (EXCLUDE_FROM_ALL). The ctest test compile_fail_<name> builds it
# and passes only when the compiler output matches the expected diagnostic (PASS_REGULAR_EXPRESSION; the text only
# appears when the static_assert fails, i.e. when the build fails for the intended reason).
# The tests share the build tree, so they hold a RESOURCE_LOCK and run one at a time.

function(pipeprop_compile_fail name regex)
  add_library(cf_${name} OBJECT EXCLUDE_FROM_ALL ${CMAKE_CURRENT_SOURCE_DIR}/compile_fail/${name}.cpp)
  target_link_libraries(cf_${name} PRIVATE pipeprop::pipeprop)
  add_test(NAME compile_fail_${name}
           COMMAND ${CMAKE_COMMAND} --build ${CMAKE_BINARY_DIR} --target cf_${name} --config $<CONFIG>)
  set_tests_properties(compile_fail_${name} PROPERTIES
    PASS_REGULAR_EXPRESSION "${regex}"
    RESOURCE_LOCK pipeprop_build_tree
    LABELS compile_fail
    TIMEOUT 300)
endfunction()

# The position N of the offending layer must appear as layer_at_position<N, ...> before the sentence. ".*" after
# "static assertion failed" also accepts clang's "static assertion failed due to requirement ...: ".
pipeprop_compile_fail(missing_backward_input
  "layer_at_position<1, scale_without_p1.*static assertion failed.*pipeprop: this layer has no backward-p1 member")
pipeprop_compile_fail(missing_backward_weight
  "layer_at_position<2, learned_scale.*static assertion failed.*pipeprop: this layer has parameters but no backward-p2 member")
pipeprop_compile_fail(input_shape_mismatch
  "layer_at_position<2, five_features_identity.*static assertion failed.*pipeprop: this layer's input_shape does not match the output shape of the layer before it")
pipeprop_compile_fail(dense_after_image
  "layer_at_position<2, pipeprop::dense<10>.*static assertion failed.*pipeprop::dense: the input of a dense layer must be rank 1 \\[features\\]; put pipeprop::flatten before it")
pipeprop_compile_fail(conv2d_rank1
  "layer_at_position<1, pipeprop::conv2d<4, 3>.*static assertion failed.*pipeprop::conv2d: the input of a conv2d layer must be rank 3 \\[channels, height, width\\]")
pipeprop_compile_fail(group_norm_groups
  "layer_at_position<1, pipeprop::group_norm<4>.*static assertion failed.*pipeprop::group_norm: the number of channels C \\(the first input dimension\\) must be divisible by the number of groups")
pipeprop_compile_fail(split_at_order
  "static assertion failed.*pipeprop::split_at: split points must be strictly increasing")
pipeprop_compile_fail(online_norm_rank2
  "layer_at_position<0, pipeprop::online_norm<.*static assertion failed.*pipeprop::online_norm: the input must be rank 3 \\[channels, height, width\\]")
pipeprop_compile_fail(attention_heads
  "layer_at_position<1, pipeprop::causal_self_attention<5>.*static assertion failed.*pipeprop::causal_self_attention: the number of features D must be divisible by the number of heads")
pipeprop_compile_fail(attention_odd_head_dim
  "layer_at_position<0, pipeprop::causal_self_attention<4>.*static assertion failed.*pipeprop::causal_self_attention: the head dimension D / Heads must be even")
pipeprop_compile_fail(token_loss_rank1_output
  "static assertion failed.*pipeprop: the loss does not fit the network's output: their ranks differ")
pipeprop_compile_fail(pb_adamw_spike_compensation
  "static assertion failed.*pipeprop::pb: spike compensation and the velocity form of linear weight prediction are defined for momentum SGD only")
pipeprop_compile_fail(pb_sgd_momentum_one
  "static assertion failed.*pipeprop::pb: a policy's compile-time momentum of 1 does not decay momentum SGD's velocity")
