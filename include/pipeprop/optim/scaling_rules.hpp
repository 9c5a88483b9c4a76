// pipeprop/optim/scaling_rules.hpp: the B -> b hyperparameter scaling rules of momentum SGD
// (shared/docs/pb-semantics.md §4; PB-paper, Kosson et al. arXiv 2003.11666, "training without batches").
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

namespace pipeprop::optim {

/// Learning rate (per mean-loss gradient) and momentum of momentum SGD.
struct momentum_hyperparameters {
    double learning_rate = 0.0;
    double momentum = 0.0;
};

/// Hyperparameters for batch size `to_batch` (b) equivalent to `from` at batch size `from_batch` (B), by the rules
/// above. Works in both directions (b < B or b > B); b == B returns `from` unchanged.
/// Throws std::invalid_argument when a batch size is 0, momentum is outside [0, 1) or the learning rate is
/// negative or not finite.
[[nodiscard]] inline momentum_hyperparameters scale_hyperparameters(momentum_hyperparameters from,
                                                                    std::size_t from_batch, std::size_t to_batch) {
    if (from_batch == 0 || to_batch == 0)
        throw std::invalid_argument("pipeprop::optim::scale_hyperparameters: batch sizes must be >= 1 (got B = " +
                                    std::to_string(from_batch) + ", b = " + std::to_string(to_batch) + ")");
    if (!(from.momentum >= 0.0 && from.momentum < 1.0))
        throw std::invalid_argument("pipeprop::optim::scale_hyperparameters: momentum " +
                                    std::to_string(from.momentum) + " is outside [0, 1)");
    if (!(from.learning_rate >= 0.0) || !std::isfinite(from.learning_rate))
        throw std::invalid_argument("pipeprop::optim::scale_hyperparameters: learning rate " +
                                    std::to_string(from.learning_rate) + " must be a finite value >= 0");
    if (from_batch == to_batch) return from;
    const double ratio = static_cast<double>(to_batch) / static_cast<double>(from_batch);
    momentum_hyperparameters to;
    to.momentum = std::pow(from.momentum, ratio);  // 0^ratio = 0: no momentum stays no momentum
    to.learning_rate = ratio * from.learning_rate * (1.0 - to.momentum) / (1.0 - from.momentum);
    return to;
}

}  // namespace pipeprop::optim
