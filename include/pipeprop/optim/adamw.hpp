// pipeprop/optim/adamw.hpp: AdamW (Adam with decoupled weight decay) over one parameter block: the element-wise
// update kernel and its state (first and second moment, step count).
//
// Loshchilov & Hutter, "Decoupled Weight Decay Regularization", ICLR 2019 (arXiv 1711.05101), Algorithm 2, with
// PyTorch's torch.optim.AdamW semantics (amsgrad = False, maximize = False): the decay is multiplied by the learning
// rate (lr * lambda, PyTorch's convention; the paper's schedule multiplier eta_t is folded into lr). Step t = 1, 2, ...:
//     w <- w (1 - lr lambda)                                      (decoupled weight decay, from the current weights)
//     m <- beta1 m + (1 - beta1) g
//     v <- beta2 v + (1 - beta2) g^2
//     w <- w - (lr / (1 - beta1^t)) m / (sqrt(v) / sqrt(1 - beta2^t) + eps)
// The last line is m_hat / (sqrt(v_hat) + eps) with m_hat = m / (1 - beta1^t), v_hat = v / (1 - beta2^t), evaluated
// in PyTorch's order (torch/optim/adamw.py, _single_tensor_adamw): the bias corrections are computed once per step
// in double and enter as scalars, so float32 results follow PyTorch's to rounding.
#pragma once

#include <xsimd/xsimd.hpp>

#include "pipeprop/kernels/fma.hpp"
#include "pipeprop/optim/hyperparameters.hpp"

#include <array>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

namespace pipeprop::optim {

/// Per-step scalars of one AdamW update (see the file comment), all in the parameters' type T. Units: lr per
/// mean-loss gradient; everything else dimensionless. Built by adamw_step_coefficients.
template <class T>
struct adamw_coefficients {
    T decay = T(1);            ///< 1 - lr * lambda: factor applied to w before the Adam step
    T beta1 = T(0.9);          ///< beta1
    T one_minus_beta1 = T(0.1);  ///< 1 - beta1
    T beta2 = T(0.999);        ///< beta2
    T one_minus_beta2 = T(0.001);  ///< 1 - beta2
    T step_size = T(0);        ///< lr / (1 - beta1^t)
    T sqrt_correction2 = T(1); ///< sqrt(1 - beta2^t)
    T eps = T(1e-8);           ///< added to sqrt(v_hat)
};

/// Coefficients of update number t (t >= 1: the first update is t = 1) with learning rate lr, decoupled weight decay
/// lambda, betas beta1, beta2 and eps. The bias corrections 1 - beta^t, the step size and the decay factor are
/// computed in double, then rounded to T (as PyTorch passes Python floats to its float32 kernels).
/// Throws std::invalid_argument when t == 0.
template <class T>
[[nodiscard]] adamw_coefficients<T> adamw_step_coefficients(double lr, double weight_decay, double beta1,
                                                            double beta2, double eps, std::uint64_t t) {
    if (t == 0)
        throw std::invalid_argument("pipeprop::optim::adamw_step_coefficients: the step count t starts at 1 (the "
                                    "bias corrections 1 - beta^t are 0 at t = 0)");
    const double td = static_cast<double>(t);
    const double c1 = 1.0 - std::pow(beta1, td), c2 = 1.0 - std::pow(beta2, td);
    adamw_coefficients<T> c;
    c.decay = static_cast<T>(1.0 - lr * weight_decay);
    c.beta1 = static_cast<T>(beta1);
    c.one_minus_beta1 = static_cast<T>(1.0 - beta1);
    c.beta2 = static_cast<T>(beta2);
    c.one_minus_beta2 = static_cast<T>(1.0 - beta2);
    c.step_size = static_cast<T>(lr / c1);
    c.sqrt_correction2 = static_cast<T>(std::sqrt(c2));
    c.eps = static_cast<T>(eps);
    return c;
}

/// Applies one AdamW update to n parameters in place: w [n] (weights), m [n] (first moment), v [n] (second moment),
/// g [n] (gradient of the mean loss, read only). Element-wise, and the xsimd body performs exactly the operations of
/// the scalar tail (single-rounding FMAs via kernels::fma / std::fma, correctly rounded sqrt and division), so the
/// result is bit-identical however the n elements are split into calls. No allocation, no exceptions.
template <class T>
void adamw_update(std::size_t n, T* w, T* m, T* v, const T* g, const adamw_coefficients<T>& c) noexcept {
    using batch = xsimd::batch<T>;
    constexpr std::size_t width = batch::size;
    const batch decay(c.decay), b1(c.beta1), omb1(c.one_minus_beta1), b2(c.beta2), omb2(c.one_minus_beta2),
        step(c.step_size), sc2(c.sqrt_correction2), eps(c.eps);
    std::size_t i = 0;
    for (; i + width <= n; i += width) {
        const batch gi = batch::load_unaligned(g + i);
        const batch wi = batch::load_unaligned(w + i) * decay;
        const batch mi = kernels::fma(b1, batch::load_unaligned(m + i), omb1 * gi);
        const batch vi = kernels::fma(b2, batch::load_unaligned(v + i), (omb2 * gi) * gi);
        mi.store_unaligned(m + i);
        vi.store_unaligned(v + i);
        const batch denom = xsimd::sqrt(vi) / sc2 + eps;
        kernels::fnma(step, mi / denom, wi).store_unaligned(w + i);
    }
    for (; i < n; ++i) {
        const T gi = g[i];
        const T wi = w[i] * c.decay;
        const T mi = std::fma(c.beta1, m[i], c.one_minus_beta1 * gi);
        const T vi = std::fma(c.beta2, v[i], (c.one_minus_beta2 * gi) * gi);
        m[i] = mi;
        v[i] = vi;
        const T denom = std::sqrt(vi) / c.sqrt_correction2 + c.eps;
        w[i] = std::fma(-c.step_size, mi / denom, wi);
    }
}

/// What of AdamW stays fixed during a run; the learning rate and the decoupled weight decay lambda
/// (w <- w (1 - lr lambda)) are scheduled: they come with every update (optim::hyperparameters,
/// optim/hyperparameters.hpp; its momentum must be 0). Defaults are torch.optim.AdamW's. beta1, beta2 in [0, 1);
/// eps > 0 (PyTorch accepts 0, but then an element whose gradient has always been 0 gives 0 / 0 = NaN).
/// default_momentum and default_weight_decay are the values a trainer config starts from (sequential_trainer;
/// torch's weight_decay default 0.01).
struct adamw_config {
    static constexpr double default_momentum = 0.0;  ///< Momentum a trainer config starts from (0: AdamW takes none).
    /// Decoupled weight decay lambda a trainer config starts from (torch's 0.01).
    static constexpr double default_weight_decay = 0.01;
    double beta1 = 0.9;  ///< Decay of the first moment, in [0, 1).
    double beta2 = 0.999;  ///< Decay of the second moment, in [0, 1).
    double eps = 1e-8;  ///< Added to sqrt(v_hat); finite and > 0.

    /// Throws std::invalid_argument naming the offending value: a beta outside [0, 1), eps not a finite value > 0.
    void validate() const {
        if (!(beta1 >= 0.0 && beta1 < 1.0))
            throw std::invalid_argument("pipeprop::optim::adamw: beta1 " + std::to_string(beta1) +
                                        " is outside [0, 1)");
        if (!(beta2 >= 0.0 && beta2 < 1.0))
            throw std::invalid_argument("pipeprop::optim::adamw: beta2 " + std::to_string(beta2) +
                                        " is outside [0, 1)");
        if (!(eps > 0.0) || !std::isfinite(eps))
            throw std::invalid_argument("pipeprop::optim::adamw: eps " + std::to_string(eps) +
                                        " must be a finite value > 0");
    }
};

/// AdamW state of one parameter block of n elements: first moment m [n] and second moment v [n] (zero at start)
/// and the number of updates applied t. The parameters themselves belong to the caller (trainer or pipeline stage).
/// An optimizer policy (optim/optimizer_policy.hpp): state buffers "first_moment" (m) and "second_moment" (v); the
/// step count t, which the bias corrections depend on, is part of the state a checkpoint restores.
template <class T>
class adamw {
public:
    using value_type = T;  ///< The parameters' type T.
    using config_type = adamw_config;  ///< The fixed configuration (adamw_config).
    static constexpr const char* name = "adamw";  ///< The optimizer's name in checkpoints and reports.
    /// Checkpoint names of the state buffers: m, then v.
    static constexpr std::array<const char*, 2> state_buffer_names{"first_moment", "second_moment"};

    adamw() = default;
    /// State for a block of n parameters. Throws std::invalid_argument for an invalid config (adamw_config::validate).
    adamw(std::size_t n, adamw_config config) : config_(config), m_(n, T(0)), v_(n, T(0)) { config_.validate(); }

    [[nodiscard]] const adamw_config& config() const noexcept { return config_; }  ///< The fixed configuration.
    [[nodiscard]] std::size_t size() const noexcept { return m_.size(); }  ///< Elements n of the parameter block.
    /// Updates applied so far (t of the last update; 0 before the first).
    [[nodiscard]] std::uint64_t step_count() const noexcept { return steps_; }
    ///@{
    /// First moment m [n] (read/write: checkpoints restore it).
    [[nodiscard]] std::span<T> first_moment() noexcept { return m_; }
    [[nodiscard]] std::span<const T> first_moment() const noexcept { return m_; }
    ///@}
    ///@{
    /// Second moment v [n] (read/write: checkpoints restore it).
    [[nodiscard]] std::span<T> second_moment() noexcept { return v_; }
    [[nodiscard]] std::span<const T> second_moment() const noexcept { return v_; }
    ///@}
    /// Sets the step count (when restoring a checkpoint).
    void set_step_count(std::uint64_t steps) noexcept { steps_ = steps; }
    ///@{
    /// State buffer k of the optimizer policy: k = 0 is m [n], k = 1 is v [n]. Throws std::out_of_range for k >= 2.
    [[nodiscard]] std::span<T> state_buffer(std::size_t k) {
        check_buffer(k);
        return k == 0 ? std::span<T>(m_) : std::span<T>(v_);
    }
    [[nodiscard]] std::span<const T> state_buffer(std::size_t k) const {
        check_buffer(k);
        return k == 0 ? std::span<const T>(m_) : std::span<const T>(v_);
    }
    ///@}

    /// Throws std::invalid_argument naming the field unless AdamW can apply an update with h: optim::validate
    /// (learning rate and weight decay finite and >= 0) and momentum 0 (AdamW's momentum is beta1).
    void check(const hyperparameters<double>& h) const {
        validate(h, "pipeprop::optim::adamw");
        if (h.momentum != 0.0)
            throw std::invalid_argument("pipeprop::optim::adamw: momentum = " + std::to_string(h.momentum) +
                                        " must be 0 (AdamW's momentum is beta1 of adamw_config)");
        if (!std::isfinite(static_cast<T>(h.learning_rate)) || !std::isfinite(static_cast<T>(h.weight_decay)))
            throw std::invalid_argument("pipeprop::optim::adamw: learning_rate = " + std::to_string(h.learning_rate) +
                                        " or weight_decay = " + std::to_string(h.weight_decay) +
                                        " overflows the parameters' type");
    }

    /// Coefficients of the next update (t = step_count() + 1) with h's learning rate and decoupled weight decay.
    [[nodiscard]] adamw_coefficients<T> coefficients(const hyperparameters<double>& h) const {
        return adamw_step_coefficients<T>(h.learning_rate, h.weight_decay, config_.beta1, config_.beta2, config_.eps,
                                          steps_ + 1);
    }

    /// One update of w [n] with the loss gradient g [n] (gradient of the MEAN loss of the batch) and the update's
    /// hyperparameters h, then step_count() + 1. No allocation. Throws std::invalid_argument when w or g do not have
    /// n elements or h is not valid (check); nothing is changed then.
    void step(std::span<T> w, std::span<const T> g, const hyperparameters<double>& h) {
        if (w.size() != m_.size() || g.size() != m_.size())
            throw std::invalid_argument("pipeprop::optim::adamw::step: parameter block has " +
                                        std::to_string(w.size()) + " and gradient " + std::to_string(g.size()) +
                                        " elements, the optimizer state " + std::to_string(m_.size()));
        check(h);
        adamw_update(m_.size(), w.data(), m_.data(), v_.data(), g.data(), coefficients(h));
        ++steps_;
    }

private:
    static void check_buffer(std::size_t k) {
        if (k >= state_buffer_names.size())
            throw std::out_of_range("pipeprop::optim::adamw::state_buffer: buffer " + std::to_string(k) +
                                    " of 2 (first_moment, second_moment)");
    }

    adamw_config config_{};
    std::vector<T> m_;
    std::vector<T> v_;
    std::uint64_t steps_ = 0;
};

}  // namespace pipeprop::optim
