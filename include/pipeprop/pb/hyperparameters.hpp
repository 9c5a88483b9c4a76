// pipeprop/pb/hyperparameters.hpp: the optimizer hyperparameters a micro-batch's update is applied with.
//
// pb-semantics.md §2: momentum SGD per stage, heavy-ball form v <- m v + g ; w <- w - eta v, with L2 weight decay
// lambda added to the gradient from the current weights. Hyperparameters may change between micro-batches (a
// schedule evaluated per sample by the caller): each micro-batch carries the values that were current when it was
// pushed, and every stage applies that micro-batch's update with them, whichever executor runs it.
#pragma once

#include <cmath>
#include <stdexcept>
#include <string>

namespace pipeprop::pb {

/// Learning rate eta (per sample-mean gradient), momentum m (dimensionless, [0, 1]) and L2 weight decay lambda
/// (>= 0) of one micro-batch's update.
template <class T>
struct hyperparameters {
    T learning_rate = T(0.01);
    T momentum = T(0);
    T weight_decay = T(0);
    friend constexpr bool operator==(const hyperparameters&, const hyperparameters&) = default;
};

/// Throws std::invalid_argument naming the field unless eta >= 0, 0 <= m <= 1 and lambda >= 0 (all finite).
template <class T>
void validate(const hyperparameters<T>& h) {
    auto bad = [](const char* what, T v, const char* range) {
        throw std::invalid_argument(std::string("pipeprop::pb::hyperparameters: ") + what + " = " +
                                    std::to_string(static_cast<double>(v)) + " must be " + range);
    };
    if (!std::isfinite(h.learning_rate) || h.learning_rate < T(0))
        bad("learning_rate", h.learning_rate, "finite and >= 0");
    if (!std::isfinite(h.momentum) || h.momentum < T(0) || h.momentum > T(1)) bad("momentum", h.momentum, "in [0, 1]");
    if (!std::isfinite(h.weight_decay) || h.weight_decay < T(0)) bad("weight_decay", h.weight_decay, "finite and >= 0");
}

}  // namespace pipeprop::pb
