// pipeprop/non_finite_loss_error.hpp: the exception every trainer throws when a loss becomes NaN or infinite.
//
// Thrown by sequential_trainer::train_batch (sequential_trainer.hpp; the failing update is not applied) and by
// pb::engine::push / drain (pb/engine.hpp; Pipelined Backpropagation has already applied the micro-batch's update at
// every stage when its loss is known, so the weights are not usable any more). A program that catches it should
// stop without saving over its last good checkpoint (docs/pitfalls.md: never lose a checkpoint).
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>

namespace pipeprop {

/// A NaN or infinite loss. step(): the 0-based number of the failing update (sequential trainer) or the failing
/// micro-batch's id (PB engine); samples_seen(): samples consumed (trainer) or pushed (PB engine) at the throw.
class non_finite_loss_error : public std::runtime_error {
public:
    /// what: the message; step, samples_seen: as the accessors return them.
    non_finite_loss_error(const std::string& what, std::uint64_t step, std::uint64_t samples_seen)
        : std::runtime_error(what), step_(step), samples_seen_(samples_seen) {}
    /// The failing update's 0-based number (trainer) or the micro-batch id (PB engine).
    [[nodiscard]] std::uint64_t step() const noexcept { return step_; }
    /// Samples consumed (trainer) or pushed (PB engine) at the throw.
    [[nodiscard]] std::uint64_t samples_seen() const noexcept { return samples_seen_; }

private:
    std::uint64_t step_;
    std::uint64_t samples_seen_;
};

}  // namespace pipeprop
