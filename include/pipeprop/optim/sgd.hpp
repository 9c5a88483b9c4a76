// pipeprop/optim/sgd.hpp: momentum SGD state over one parameter block (velocity + step count), heavy-ball or
// Nesterov, with L2 weight decay. Every update goes through the one kernel of optim/momentum_update.hpp.
//
// The learning rate, momentum and weight decay of each update come with it (optim::hyperparameters); sgd_config
// holds only the Nesterov flag.
//
// docs/pb-semantics.md §2 (PyTorch convention): g = g_loss + lambda w; v <- m v + g; w <- w - eta v
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
#include <utility>
#include <vector>

#include "pipeprop/optim/hyperparameters.hpp"
#include "pipeprop/optim/momentum_update.hpp"

namespace pipeprop::optim {

/// What of momentum SGD stays fixed during a run: nesterov, PyTorch's Nesterov formulation instead of heavy-ball.
/// The learning rate, momentum and weight decay are scheduled: they come with every update (optim::hyperparameters,
/// optim/hyperparameters.hpp; weight decay is L2, added to the gradient). default_momentum and default_weight_decay
/// are the values a trainer config starts from (sequential_trainer).
struct sgd_config {
    static constexpr double default_momentum = 0.9;  ///< Momentum a trainer config starts from.
    static constexpr double default_weight_decay = 0.0;  ///< Weight decay (L2) a trainer config starts from.
    bool nesterov = false;  ///< PyTorch's Nesterov formulation instead of heavy-ball.
};

/// Momentum-SGD state of one parameter block of n elements: velocity v [n] (zero at start) and the number of
/// updates applied. The parameters themselves belong to the caller (trainer or pipeline stage).
/// An optimizer policy (optim/optimizer_policy.hpp): one state buffer, "velocity".
template <class T>
class sgd {
public:
    using value_type = T;  ///< The parameters' type T.
    using config_type = sgd_config;  ///< The fixed configuration (sgd_config).
    static constexpr const char* name = "sgd";  ///< The optimizer's name in checkpoints and reports.
    /// Checkpoint name of the one state buffer, the velocity.
    static constexpr std::array<const char*, 1> state_buffer_names{"velocity"};

    sgd() = default;
    /// State for a block of n parameters (every sgd_config is valid).
    sgd(std::size_t n, sgd_config config) : config_(config), velocity_(n, T(0)) {}

    [[nodiscard]] const sgd_config& config() const noexcept { return config_; }  ///< The fixed configuration.
    /// Elements n of the parameter block.
    [[nodiscard]] std::size_t size() const noexcept { return velocity_.size(); }
    /// Updates applied so far.
    [[nodiscard]] std::uint64_t step_count() const noexcept { return steps_; }
    ///@{
    /// Velocity v [n] (read/write: checkpoints restore it).
    [[nodiscard]] std::span<T> velocity() noexcept { return velocity_; }
    [[nodiscard]] std::span<const T> velocity() const noexcept { return velocity_; }
    ///@}
    /// Sets the step count (when restoring a checkpoint).
    void set_step_count(std::uint64_t steps) noexcept { steps_ = steps; }
    ///@{
    /// State buffer k of the optimizer policy: k = 0 is the velocity [n]. Throws std::out_of_range for k >= 1.
    [[nodiscard]] std::span<T> state_buffer(std::size_t k) {
        check_buffer(k);
        return velocity_;
    }
    [[nodiscard]] std::span<const T> state_buffer(std::size_t k) const {
        check_buffer(k);
        return velocity_;
    }
    ///@}

    /// Throws std::invalid_argument naming the field unless momentum SGD can apply an update with h: optim::validate
    /// (learning rate and weight decay finite and >= 0, momentum in [0, 1]), momentum < 1 also after rounding to T,
    /// learning rate and weight decay finite in T, and momentum > 0 with Nesterov.
    void check(const hyperparameters<double>& h) const {
        validate(h, "pipeprop::optim::sgd");
        if (!(h.momentum < 1.0) || !(static_cast<T>(h.momentum) < T(1)))
            throw std::invalid_argument("pipeprop::optim::sgd: momentum = " + std::to_string(h.momentum) +
                                        " must be in [0, 1) in the parameters' type (a value that rounds to 1 "
                                        "there does not decay the velocity)");
        if (!std::isfinite(static_cast<T>(h.learning_rate)) || !std::isfinite(static_cast<T>(h.weight_decay)))
            throw std::invalid_argument("pipeprop::optim::sgd: learning_rate = " + std::to_string(h.learning_rate) +
                                        " or weight_decay = " + std::to_string(h.weight_decay) +
                                        " overflows the parameters' type");
        if (config_.nesterov && h.momentum == 0.0)
            throw std::invalid_argument("pipeprop::optim::sgd: Nesterov momentum needs momentum > 0");
    }

    /// Coefficients of the update with hyperparameters h (learning rate per mean-loss gradient, momentum, L2 weight
    /// decay; each rounded from double to T): heavy_ball or nesterov.
    [[nodiscard]] update_coefficients<T> coefficients(const hyperparameters<double>& h) const noexcept {
        const T eta = static_cast<T>(h.learning_rate), m = static_cast<T>(h.momentum),
                wd = static_cast<T>(h.weight_decay);
        return config_.nesterov ? nesterov<T>(eta, m, wd) : heavy_ball<T>(eta, m, wd);
    }

    /// One update of w [n] with the loss gradient g [n] (gradient of the MEAN loss of the batch) and the update's
    /// hyperparameters h. No allocation. Throws std::invalid_argument when w or g do not have n elements or h is
    /// not valid (check); nothing is changed then.
    void step(std::span<T> w, std::span<const T> g, const hyperparameters<double>& h) {
        check_sizes(w.size(), g.size());
        check(h);
        step_with(w, g, coefficients(h));
    }

    /// One update with explicit coefficients (e.g. spike_compensation(...) for a pipeline stage with delay D);
    /// Same size requirements as step.
    void step_with(std::span<T> w, std::span<const T> g, const update_coefficients<T>& c) {
        check_sizes(w.size(), g.size());
        momentum_update(velocity_.size(), w.data(), velocity_.data(), g.data(), c);
        ++steps_;
    }

    /// One update with explicit coefficients of the parts {offset, count} of w and g only (the rest of w was updated
    /// elsewhere, e.g. by a backward-p2 fused into the update: layer_stack::backward_momentum_update); counts as one
    /// step. Same size requirements as step; a part beyond the block is a precondition violation.
    void step_parts(std::span<T> w, std::span<const T> g, const update_coefficients<T>& c,
                    std::span<const std::pair<std::size_t, std::size_t>> parts) {
        check_sizes(w.size(), g.size());
        for (const auto& [offset, count] : parts)
            momentum_update(count, w.data() + offset, velocity_.data() + offset, g.data() + offset, c);
        ++steps_;
    }

private:
    void check_sizes(std::size_t w, std::size_t g) const {
        if (w != velocity_.size() || g != velocity_.size())
            throw std::invalid_argument("pipeprop::optim::sgd::step: parameter block has " + std::to_string(w) +
                                        " and gradient " + std::to_string(g) + " elements, the optimizer state " +
                                        std::to_string(velocity_.size()));
    }

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
