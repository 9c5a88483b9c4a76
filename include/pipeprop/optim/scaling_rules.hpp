// pipeprop/optim/scaling_rules.hpp: the B -> b hyperparameter scaling rules of momentum SGD
// (docs/pb-semantics.md §4; PB-paper, Kosson et al. arXiv 2003.11666, "training without batches").
//
// Going from batch size B to micro-batch size b (b updates per B samples become B/b times as many updates),
// keep the momentum half-life in samples and the effective step per sample:
//     m_b = m_B^(b / B)
//     eta_b / (1 - m_b) = (b / B) * eta_B / (1 - m_B)
//     lambda unchanged (L2 in the gradient); schedules stay expressed in samples.
// Example of the doc (a test): B = 32, eta = 0.05, m = 0.9  ->  b = 1: m = 0.99671, eta = 5.14e-5.
#pragma once

#include <cmath>
#include <cstddef>
#include <stdexcept>
#include <string>

#include "pipeprop/optim/hyperparameters.hpp"

namespace pipeprop::optim {

/// Hyperparameters for batch size `to_batch` (b) equivalent to `from` at batch size `from_batch` (B), by the rules
/// above; the weight decay is returned unchanged. Works in both directions (b < B or b > B); b == B returns `from`
/// unchanged. Throws std::invalid_argument when a batch size is 0 or `from` is invalid (optim::validate, naming the
/// field) or its momentum is 1 (the rule divides by 1 - m).
[[nodiscard]] inline hyperparameters<double> scale_hyperparameters(const hyperparameters<double>& from,
                                                                   std::size_t from_batch, std::size_t to_batch) {
    constexpr const char* who = "pipeprop::optim::scale_hyperparameters";
    if (from_batch == 0 || to_batch == 0)
        throw std::invalid_argument(std::string(who) + ": batch sizes must be >= 1 (got B = " +
                                    std::to_string(from_batch) + ", b = " + std::to_string(to_batch) + ")");
    validate(from, who);
    if (!(from.momentum < 1.0))
        throw std::invalid_argument(std::string(who) + ": momentum = " + std::to_string(from.momentum) +
                                    " must be in [0, 1)");
    if (from_batch == to_batch) return from;
    const double ratio = static_cast<double>(to_batch) / static_cast<double>(from_batch);
    hyperparameters<double> to = from;  // weight decay unchanged (L2 in the gradient, docs/pb-semantics.md §4)
    to.momentum = std::pow(from.momentum, ratio);  // 0^ratio = 0: no momentum stays no momentum
    to.learning_rate = ratio * from.learning_rate * (1.0 - to.momentum) / (1.0 - from.momentum);
    return to;
}

}  // namespace pipeprop::optim
