// pipeprop/optim/hyperparameters.hpp: the hyperparameters ONE optimizer update is applied with: one
// type, the same for every engine and optimizer.
//
// These are the values a caller's schedule evaluates per sample: a PB engine takes them per micro-batch (each
// micro-batch carries the values current when it was pushed, and every stage applies that micro-batch's update with
// them, whichever executor runs it; docs/pb-semantics.md §2), the synchronous executors and the sequential
// trainer per optimizer step. What stays fixed for a run (SGD's Nesterov flag, AdamW's betas and eps) is the
// optimizer's config (optim::sgd_config, optim::adamw_config), not here.
//
// Units and meaning per optimizer:
//   learning_rate  eta, per gradient of the MEAN loss of the batch / micro-batch (finite, >= 0).
//   momentum       m, dimensionless, in [0, 1]. Momentum SGD (optim::sgd): v <- m v + g (heavy-ball or Nesterov;
//                  optim::sgd needs m < 1, and m > 0 with Nesterov). AdamW (optim::adamw): must be 0 (its betas,
//                  in adamw_config, are its momentum); every engine rejects another value.
//   weight_decay   lambda (finite, >= 0). Momentum SGD: L2, lambda w added to the gradient from the current
//                  weights (g = g_loss + lambda w). AdamW: decoupled, w <- w (1 - eta lambda) before the Adam step.
// The B -> b scaling rules (optim/scaling_rules.hpp, docs/pb-semantics.md §4) map these values between batch sizes.
#pragma once

#include <cmath>
#include <stdexcept>
#include <string>

namespace pipeprop::optim {

/// Learning rate eta, momentum m and weight decay lambda of one update (see the file comment), in T: the engine's
/// value type for PB (the caller rounds its double schedule to T once, at the push), double for the synchronous
/// executors and the sequential trainer (the optimizer rounds to the parameters' type when it builds the update).
template <class T = double>
struct hyperparameters {
    T learning_rate = T(0.01);  ///< eta, per mean-loss gradient.
    T momentum = T(0);  ///< m, in [0, 1) (0 for AdamW).
    T weight_decay = T(0);  ///< lambda: L2 for SGD, decoupled for AdamW; >= 0.
    friend constexpr bool operator==(const hyperparameters&, const hyperparameters&) = default;
};

/// Throws std::invalid_argument naming the field unless the learning rate is finite and >= 0, the momentum in
/// [0, 1] and the weight decay finite and >= 0 (what every optimizer accepts; an optimizer may narrow it, e.g.
/// optim::sgd needs momentum < 1). `who` starts the message (the caller's name).
template <class T>
void validate(const hyperparameters<T>& h, const char* who = "pipeprop::optim::hyperparameters") {
    auto bad = [who](const char* what, T v, const char* range) {
        throw std::invalid_argument(std::string(who) + ": " + what + " = " + std::to_string(static_cast<double>(v)) +
                                    " must be " + range);
    };
    if (!std::isfinite(h.learning_rate) || h.learning_rate < T(0))
        bad("learning_rate", h.learning_rate, "finite and >= 0");
    if (!std::isfinite(h.momentum) || h.momentum < T(0) || h.momentum > T(1)) bad("momentum", h.momentum, "in [0, 1]");
    if (!std::isfinite(h.weight_decay) || h.weight_decay < T(0)) bad("weight_decay", h.weight_decay, "finite and >= 0");
}

}  // namespace pipeprop::optim
