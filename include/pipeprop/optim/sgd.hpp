// pipeprop/optim/sgd.hpp: momentum SGD state over one parameter block (velocity + step count), heavy-ball or
// Nesterov, with L2 weight decay. Every update goes through the one kernel of optim/momentum_update.hpp.
//
// shared/docs/pb-semantics.md §2 (PyTorch convention): g = g_loss + lambda w; v <- m v + g; w <- w - eta v
// (heavy-ball), w <- w - eta (g + m v) (Nesterov). PB-paper (Kosson et al., arXiv 2003.11666) §4: spike
// compensation is another coefficient choice of the same update (step_with).
#pragma once

#include <array>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include "pipeprop/optim/momentum_update.hpp"

namespace pipeprop::optim {

/// Hyperparameters of momentum SGD that stay fixed during a run (the learning rate comes per step, from a
/// schedule). momentum m in [0, 1); weight_decay lambda >= 0 (L2, added to the gradient); nesterov: PyTorch's
/// Nesterov formulation instead of heavy-ball.
struct sgd_config {
    double momentum = 0.9;
    double weight_decay = 0.0;
    bool nesterov = false;

    /// Throws std::invalid_argument naming the offending value: momentum outside [0, 1), weight_decay < 0 or not
    /// finite, or nesterov with momentum 0.
    void validate() const {
        if (!(momentum >= 0.0 && momentum < 1.0))
            throw std::invalid_argument("pipeprop::optim::sgd: momentum " + std::to_string(momentum) +
                                        " is outside [0, 1)");
        if (!(weight_decay >= 0.0) || !std::isfinite(weight_decay))
            throw std::invalid_argument("pipeprop::optim::sgd: weight decay " + std::to_string(weight_decay) +
                                        " must be a finite value >= 0");
        if (nesterov && momentum == 0.0)
            throw std::invalid_argument("pipeprop::optim::sgd: Nesterov momentum needs momentum > 0");
    }
};

/// Momentum-SGD state of one parameter block of n elements: velocity v [n] (zero at start) and the number of
/// updates applied. The parameters themselves belong to the caller (trainer or pipeline stage).
/// An optimizer policy (optim/optimizer_policy.hpp): one state buffer, "velocity".
template <class T>
class sgd {
public:
    using value_type = T;
    using config_type = sgd_config;
    static constexpr const char* name = "sgd";
    static constexpr std::array<const char*, 1> state_buffer_names{"velocity"};

    sgd() = default;
    /// State for a block of n parameters. Throws std::invalid_argument for an invalid config (sgd_config::validate).
    sgd(std::size_t n, sgd_config config) : config_(config), velocity_(n, T(0)) { config_.validate(); }

    [[nodiscard]] const sgd_config& config() const noexcept { return config_; }
    [[nodiscard]] std::size_t size() const noexcept { return velocity_.size(); }
    /// Updates applied so far.
    [[nodiscard]] std::uint64_t step_count() const noexcept { return steps_; }
    /// Velocity v [n] (read/write: checkpoints restore it).
    [[nodiscard]] std::span<T> velocity() noexcept { return velocity_; }
    [[nodiscard]] std::span<const T> velocity() const noexcept { return velocity_; }
    /// Sets the step count (when restoring a checkpoint).
    void set_step_count(std::uint64_t steps) noexcept { steps_ = steps; }
    /// State buffer k of the optimizer policy: k = 0 is the velocity [n]. Throws std::out_of_range for k >= 1.
    [[nodiscard]] std::span<T> state_buffer(std::size_t k) {
        check_buffer(k);
        return velocity_;
    }
    [[nodiscard]] std::span<const T> state_buffer(std::size_t k) const {
        check_buffer(k);
        return velocity_;
    }

    /// Coefficients of the update with learning rate lr (per mean-loss gradient): heavy_ball or nesterov.
    [[nodiscard]] update_coefficients<T> coefficients(double lr) const noexcept {
        const T eta = static_cast<T>(lr), m = static_cast<T>(config_.momentum),
                wd = static_cast<T>(config_.weight_decay);
        return config_.nesterov ? nesterov<T>(eta, m, wd) : heavy_ball<T>(eta, m, wd);
    }

    /// One update of w [n] with the loss gradient g [n] (gradient of the MEAN loss of the batch) and learning rate
    /// lr. No allocation. Throws std::invalid_argument when w or g do not have n elements.
    void step(std::span<T> w, std::span<const T> g, double lr) { step_with(w, g, coefficients(lr)); }

    /// One update with explicit coefficients (e.g. spike_compensation(...) for a pipeline stage with delay D);
    /// c.momentum and c.weight_decay should normally equal the config's. Same requirements as step.
    void step_with(std::span<T> w, std::span<const T> g, const update_coefficients<T>& c) {
        if (w.size() != velocity_.size() || g.size() != velocity_.size())
            throw std::invalid_argument("pipeprop::optim::sgd::step: parameter block has " +
                                        std::to_string(w.size()) + " and gradient " + std::to_string(g.size()) +
                                        " elements, the optimizer state " + std::to_string(velocity_.size()));
        momentum_update(velocity_.size(), w.data(), velocity_.data(), g.data(), c);
        ++steps_;
    }

private:
    static void check_buffer(std::size_t k) {
        if (k >= state_buffer_names.size())
            throw std::out_of_range("pipeprop::optim::sgd::state_buffer: buffer " + std::to_string(k) +
                                    " of 1 (velocity)");
    }

    sgd_config config_{};
    std::vector<T> velocity_;
    std::uint64_t steps_ = 0;
};

}  // namespace pipeprop::optim
