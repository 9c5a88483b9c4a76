// pipeprop/pb/policy_nesterov.hpp: the Nesterov look-ahead for asynchronous pipelines, a PB mitigation policy.
//
// Ajanthan et al., "Nesterov Method for Asynchronous Pipeline Parallel Optimization", ICML 2025 (arXiv 2505.01099):
// its method section replaces the gradient at NAG's look-ahead point by the delayed gradient, so that the momentum
// look-ahead (momentum near 1) carries the weights past the delay; its experiments (§5) train with NAdam (decoupled
// weight decay, beta1 = 0.99) and the PipeDream runtime, whose backward uses the weights its forward used. Here:
//   update        optim::sgd<T>:   PyTorch's Nesterov momentum, v <- m v + g ; w <- w - eta (g + m v), g with L2
//                 optim::adamw<T>: NAdamW (optim/nadam.hpp), the engine's betas and eps, momentum decay psi
//                                  (parameters::momentum_decay, torch's 0.004)
//   forward       w(n - D_s), as the pipeline delivers it
//   backward      the same w(n - D_s), stashed (D_s + 1 weight copies per stage, as weight_stashing)
// docs/pb-semantics.md §3 "Nesterov look-ahead" lists what the paper leaves open and what is chosen here.
#pragma once

#include <string_view>

#include "pipeprop/pb/policies.hpp"

namespace pipeprop::pb::policy {

/// Nesterov / NAdam look-ahead with weight stashing (see the file comment). Works with optim::sgd<T> (momentum from
/// optim::hyperparameters) and optim::adamw<T> (beta1 of options::adamw; 0.99 in the paper's runs).
struct nesterov : policy_base {
    static constexpr std::string_view name = "nesterov";  ///< the --mitigation key and checkpoint tag
    static constexpr bool nesterov_update = true;   ///< Nesterov momentum SGD, or NAdamW with AdamW
    static constexpr bool stashes_weights = true;   ///< the backward uses the weights of its forward
    /// The policy's runtime knob.
    struct parameters {
        double momentum_decay = 0.004;  ///< NAdam's psi, >= 0 (AdamW engines only; dimensionless, per step)
    };
};

}  // namespace pipeprop::pb::policy
