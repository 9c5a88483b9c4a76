// pipeprop/pb/policy_pipedream_2bw.hpp: PipeDream-2BW's double-buffered weights with a fixed one-step delay, a PB
// mitigation policy (a baseline).
//
// Narayanan et al., "Memory-Efficient Pipeline-Parallel DNN Training", ICML 2021 (arXiv 2006.09503), §3.1: the
// gradients of N micro-batches are accumulated into one update, and every micro-batch of batch g uses the weights
// of the version before the newest, W(t + 1) = W(t) - eta grad f(W(t - 1)). In PB's clock (docs/pb-semantics.md §1),
// with k updates counted per micro-batch and N = parameters::accumulation >= D_s at every stage:
//   batch g          micro-batches n = g N ... g N + N - 1; W(j) = the weights after j batch updates
//   forward          W(g - 1) (W(-1) = W(0)), at every stage, also the last: the stage keeps W(j) and W(j - 1)
//   backward         the same W(g - 1) (the older of the two versions: no stash)
//   update           after the backward of micro-batch g N + N - 1: the optimizer's step (momentum SGD or AdamW)
//                    with the mean of the N micro-batches' gradients and that micro-batch's hyperparameters; the
//                    other micro-batches only add their gradient
// N < D_0 would need a third version at stage 0: std::invalid_argument at construction (pb/policy_parameters.hpp).
// After a drain or load_parameters the versions continue from the stage's state (the forward of the micro-batches
// right after a drain may see the newer version); checkpoints hold the older version and the gradient accumulated
// so far.
#pragma once

#include <cstddef>
#include <string_view>

#include "pipeprop/pb/policies.hpp"

namespace pipeprop::pb::policy {

/// PipeDream-2BW (see the file comment). Works with optim::sgd<T> and optim::adamw<T>.
struct pipedream_2bw : policy_base {
    static constexpr std::string_view name = "2bw";  ///< the --mitigation key and checkpoint tag
    static constexpr bool double_buffered = true;     ///< two weight versions; updates once per N micro-batches
    /// The policy's runtime knob.
    struct parameters {
        std::size_t accumulation = 0;  ///< N micro-batches per update, >= every stage's D_s (0: D_0, at least 1)
    };
};

}  // namespace pipeprop::pb::policy
