// pipeprop/optim/lr_schedule.hpp: learning-rate schedules expressed in SAMPLES (so that they mean the same thing
// for batch size B and micro-batch size b; docs/pb-semantics.md §4), with helpers that convert epochs.
//
// lr(t), t = number of training samples consumed before the update (0 for the first update):
//   constant: eta
//   step:     eta * gamma^floor(t / step_samples)
//   cosine:   eta_min + (eta - eta_min) * (1 + cos(pi * min(t, T) / T)) / 2,   T = total_samples
//   linear warm-up (combines with each of the above): multiplied by min(1, (t + 1) / warmup_samples)
#pragma once

#include <cmath>
#include <cstdint>
#include <numbers>
#include <stdexcept>
#include <string>
#include <string_view>

namespace pipeprop::optim {

/// Shape of a schedule (see the file comment).
enum class lr_schedule_kind { constant, step, cosine };

/// Name of a schedule kind as used on command lines: "constant", "step", "cosine".
[[nodiscard]] constexpr std::string_view to_string(lr_schedule_kind k) noexcept {
    switch (k) {
        case lr_schedule_kind::step: return "step";
        case lr_schedule_kind::cosine: return "cosine";
        default: return "constant";
    }
}

/// Schedule kind from its name. Throws std::invalid_argument naming the unknown name.
[[nodiscard]] inline lr_schedule_kind lr_schedule_kind_from_string(std::string_view name) {
    for (auto k : {lr_schedule_kind::constant, lr_schedule_kind::step, lr_schedule_kind::cosine})
        if (to_string(k) == name) return k;
    throw std::invalid_argument("pipeprop::optim: unknown learning-rate schedule '" + std::string(name) +
                                "' (expected constant, step or cosine)");
}

/// Number of samples in `epochs` epochs of `epoch_size` samples, rounded to the nearest integer.
/// Throws std::invalid_argument for a negative or non-finite number of epochs.
[[nodiscard]] inline std::uint64_t samples_from_epochs(double epochs, std::uint64_t epoch_size) {
    if (!(epochs >= 0.0) || !std::isfinite(epochs))
        throw std::invalid_argument("pipeprop::optim::samples_from_epochs: epochs must be a finite value >= 0, got " +
                                    std::to_string(epochs));
    return static_cast<std::uint64_t>(std::llround(epochs * static_cast<double>(epoch_size)));
}

/// A learning-rate schedule over samples (units: learning rate per mean-loss gradient; positions in samples).
/// Build with the named constructors, then optionally .with_warmup(samples). Pure function of t, so a resumed run
/// that restores t gets the same learning rates.
struct lr_schedule {
    lr_schedule_kind kind = lr_schedule_kind::constant;  ///< Which schedule (constant, step, cosine).
    double base_lr = 0.1;               ///< eta
    double gamma = 0.1;                 ///< step: factor per step
    std::uint64_t step_samples = 0;     ///< step: samples between two decays (> 0)
    std::uint64_t total_samples = 0;    ///< cosine: horizon T in samples (> 0)
    double min_lr = 0.0;                ///< cosine: eta_min
    std::uint64_t warmup_samples = 0;   ///< linear warm-up length in samples (0: none)

    /// eta constant. Throws std::invalid_argument for an invalid schedule (as every named constructor).
    [[nodiscard]] static lr_schedule constant(double lr) { return checked({.base_lr = lr}); }
    /// eta * gamma^floor(t / every_samples).
    [[nodiscard]] static lr_schedule step(double lr, std::uint64_t every_samples, double gamma) {
        return checked({.kind = lr_schedule_kind::step, .base_lr = lr, .gamma = gamma, .step_samples = every_samples});
    }
    /// eta_min + (eta - eta_min) (1 + cos(pi min(t, T) / T)) / 2 with T = total_samples.
    [[nodiscard]] static lr_schedule cosine(double lr, std::uint64_t total_samples, double min_lr = 0.0) {
        return checked(
            {.kind = lr_schedule_kind::cosine, .base_lr = lr, .total_samples = total_samples, .min_lr = min_lr});
    }
    /// Copy with a linear warm-up over `samples` samples.
    [[nodiscard]] lr_schedule with_warmup(std::uint64_t samples) const {
        lr_schedule s = *this;
        s.warmup_samples = samples;
        return checked(s);
    }

    /// Throws std::invalid_argument naming the field: base_lr < 0 or not finite, step with step_samples == 0 or
    /// gamma <= 0, cosine with total_samples == 0 or min_lr outside [0, base_lr].
    void validate() const {
        auto fail = [](const std::string& what) {
            throw std::invalid_argument("pipeprop::optim::lr_schedule: " + what);
        };
        if (!(base_lr >= 0.0) || !std::isfinite(base_lr))
            fail("learning rate " + std::to_string(base_lr) + " must be a finite value >= 0");
        if (kind == lr_schedule_kind::step && step_samples == 0) fail("step schedule needs a step length > 0 samples");
        if (kind == lr_schedule_kind::step && !(gamma > 0.0 && std::isfinite(gamma)))
            fail("step schedule needs a decay factor gamma > 0, got " + std::to_string(gamma));
        if (kind == lr_schedule_kind::cosine && total_samples == 0)
            fail("cosine schedule needs a horizon > 0 samples");
        if (kind == lr_schedule_kind::cosine && !(min_lr >= 0.0 && min_lr <= base_lr))
            fail("cosine schedule needs 0 <= minimum learning rate <= learning rate, got " + std::to_string(min_lr));
    }

    /// Learning rate of the update that starts after t samples (see the file comment). No allocation, no throw.
    [[nodiscard]] double operator()(std::uint64_t t) const noexcept {
        double lr = base_lr;
        switch (kind) {
            case lr_schedule_kind::constant: break;
            case lr_schedule_kind::step:
                lr = base_lr * std::pow(gamma, static_cast<double>(t / step_samples));
                break;
            case lr_schedule_kind::cosine: {
                const double x = static_cast<double>(t < total_samples ? t : total_samples) /
                                 static_cast<double>(total_samples);
                lr = min_lr + (base_lr - min_lr) * 0.5 * (1.0 + std::cos(std::numbers::pi * x));
                break;
            }
        }
        if (t < warmup_samples) lr *= static_cast<double>(t + 1) / static_cast<double>(warmup_samples);
        return lr;
    }

private:
    static lr_schedule checked(lr_schedule s) {
        s.validate();
        return s;
    }
};

}  // namespace pipeprop::optim
