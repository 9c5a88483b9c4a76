// pipeprop/pb/buffer_counts.hpp: how many buffers of each kind a PB stage allocates, as functions of its delay D_s
// and the policy: the one definition the stage state (pb/basic_stage_state.hpp), the executors
// (pb/sequential_executor.hpp, pb/concurrent_stage_buffers.hpp) and the memory estimate (pb/memory_estimate.hpp)
// share. PB-paper (Kosson et al., arXiv 2003.11666) §3-4; docs/pb-semantics.md §1 and §9.
#pragma once

#include <cstddef>

#include "pipeprop/layer_buffers.hpp"
#include "pipeprop/pb/optimizer.hpp"
#include "pipeprop/pb/policies.hpp"

namespace pipeprop::pb {

/// Parameter-sized buffers [P] every pb::stage_state holds: w, v (AdamW: the first moment) and the gradient; AdamW's
/// second moment; LWP's last step (weight-difference form); PipeMare's discrepancy and corrected weights;
/// PipeDream-2BW's previous weights.
template <mitigation_policy Policy, class Optimizer, class T>
inline constexpr std::size_t stage_weight_copies =
    3 + (is_adamw<Optimizer, T> ? 1 : 0) +
    (Policy::predicts_weights && Policy::form == lwp_form::weight_difference ? 1 : 0) +
    (Policy::corrects_discrepancy ? 2 : 0) + (Policy::double_buffered ? 1 : 0);

/// True when a stage with delay D_s = delay runs its forward on predicted weights rather than on w: an LWP policy
/// with a non-zero horizon (pb::lwp_horizon) or PipeDream-2BW (pb::stage_state::predicted_forward).
template <mitigation_policy Policy, class T>
[[nodiscard]] constexpr bool predicts_forward(std::size_t delay) noexcept {
    return (Policy::predicts_weights && lwp_horizon<Policy, T>(delay) != T(0)) || Policy::double_buffered;
}

/// Sequential executor: the forward-weight versions [P] it keeps for a stage (D_s + 1 when the forward weights can
/// differ from w: a delay or a prediction; 0 otherwise, or for a parameter-free stage).
[[nodiscard]] constexpr std::size_t forward_weight_versions(std::size_t delay, std::size_t parameters,
                                                            bool predicted) noexcept {
    return parameters > 0 && (delay > 0 || predicted) ? delay + 1 : 0;
}

/// Concurrent executor: a stage's activation slots, D_s + 1 (micro-batch n in slot n mod (D_s + 1)).
[[nodiscard]] constexpr std::size_t activation_slot_count(std::size_t delay) noexcept { return delay + 1; }

/// Concurrent executor: the slots of a stage with their own gradient buffers g(k): one (slots 1 .. D_s share slot
/// 0's), every slot for the last stage (its forward writes the loss gradient of its micro-batch).
[[nodiscard]] constexpr std::size_t gradient_set_count(std::size_t delay, bool last) noexcept {
    return last ? activation_slot_count(delay) : 1;
}

/// Concurrent executor: the boundaries of a stage's activation slots that are not the slots' own but the forward
/// channels' buffers (pb/forward_channel.hpp): the input unless `first` (stage 0 copies its input out of the input
/// channel), the output unless `last` (the loss reads the last stage's).
[[nodiscard]] constexpr external_boundaries slot_boundaries(bool first, bool last) noexcept {
    return {!first, !last};
}

/// Concurrent executor: weight copies [P] of a stage's weight stash (D_s + 1 under a stashing policy with D_s > 0).
template <mitigation_policy Policy>
[[nodiscard]] constexpr std::size_t weight_stash_copies(std::size_t delay) noexcept {
    return Policy::stashes_weights && delay > 0 ? delay + 1 : 0;
}

}  // namespace pipeprop::pb
