// pipeprop/pb/policy_parameters.hpp: the run-time check of a mitigation policy's knobs (pb::options::policy), made
// once per stage by pb::stage_state's constructor. docs/pb-semantics.md §3 gives each knob's meaning.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <stdexcept>
#include <string>

#include "pipeprop/pb/policies.hpp"
#include "pipeprop/pipeline_layout.hpp"

namespace pipeprop::pb {

/// Checks policy P's parameters for a pipeline of stage_count stages and returns the micro-batches per update: 1, or
/// for PipeDream-2BW its accumulation N (0 given: D_0 = 2 (S - 1), at least 1). Throws std::invalid_argument naming
/// the knob: PipeMare's discrepancy_decay outside [0, 1) or warmup_samples not finite and >= 0; the Nesterov
/// policy's momentum_decay not finite and >= 0; PipeDream-2BW's N below the largest delay D_0 (two weight versions
/// need N >= D_s at every stage).
template <mitigation_policy P>
std::size_t checked_policy_parameters(const typename P::parameters& p, std::size_t stage_count) {
    auto fail = [](const char* policy, const char* knob, const std::string& value, const char* rule) {
        throw std::invalid_argument(std::string("pipeprop::pb::policy::") + policy + ": " + knob + " = " + value +
                                    " " + rule);
    };
    if constexpr (P::corrects_discrepancy) {
        if (!(p.discrepancy_decay >= 0.0 && p.discrepancy_decay < 1.0))
            fail("pipemare", "discrepancy_decay", std::to_string(p.discrepancy_decay), "must be in [0, 1)");
        if (!(p.warmup_samples >= 0.0) || !std::isfinite(p.warmup_samples))
            fail("pipemare", "warmup_samples", std::to_string(p.warmup_samples), "must be finite and >= 0");
    }
    if constexpr (P::nesterov_update)
        if (!(p.momentum_decay >= 0.0) || !std::isfinite(p.momentum_decay))
            fail("nesterov", "momentum_decay", std::to_string(p.momentum_decay), "must be finite and >= 0");
    if constexpr (P::double_buffered) {
        const std::size_t d0 = pb_delay(0, stage_count);
        if (p.accumulation != 0 && p.accumulation < d0)
            fail("pipedream_2bw", "accumulation", std::to_string(p.accumulation),
                 ("micro-batches per update is below the first stage's delay " + std::to_string(d0) +
                  " (two weight versions need N >= D_s at every stage)").c_str());
        return p.accumulation != 0 ? p.accumulation : std::max<std::size_t>(d0, 1);
    }
    return 1;
}

/// The learning rate of an update at a stage of delay D under Policy: eta itself, or for PipeMare (its learning-rate
/// warm-up, PipeMare paper §3) eta D^-(1 - min(t / T_w, 1)) at sample t = first_sample, T_w = warmup_samples > 0.
template <mitigation_policy Policy, class T>
[[nodiscard]] T policy_learning_rate(T eta, std::size_t delay, const typename Policy::parameters& parameters,
                                     std::size_t first_sample) noexcept {
    if constexpr (Policy::corrects_discrepancy) {
        const double tw = parameters.warmup_samples;
        if (delay > 0 && tw > 0.0) {
            const double progress = std::min(static_cast<double>(first_sample) / tw, 1.0);
            eta *= static_cast<T>(std::pow(static_cast<double>(delay), -(1.0 - progress)));
        }
    }
    return eta;
}

}  // namespace pipeprop::pb
