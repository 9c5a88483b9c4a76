// pipeprop/pb/stats.hpp: observability of a PB run (docs/pb-semantics.md §5).
#pragma once

#include <cmath>
#include <cstddef>
#include <span>
#include <string>
#include <vector>

#include "pipeprop/layer_stack.hpp"

namespace pipeprop::pb {

/// sqrt(sum x_i^2) of x, accumulated in double (stage_stats' norms); NaN or infinity when an element is not finite.
template <class T>
[[nodiscard]] double l2_norm(std::span<const T> x) noexcept {
    double sum = 0.0;
    for (const T v : x) sum += static_cast<double>(v) * static_cast<double>(v);
    return std::sqrt(sum);
}

/// What one stage did and holds.
struct stage_stats {
    std::size_t stage = 0;  ///< The stage's index s.
    layer_range layers{};              ///< the stage's layers [begin, end)
    std::size_t delay = 0;             ///< D_s = 2 (S - 1 - s), the compile-time / layout delay
    std::size_t parameters = 0;        ///< elements of the stage's parameter block
    std::size_t activation_slots = 0;  ///< micro-batch buffers the executor allocated for this stage
    std::size_t in_flight_max = 0;     ///< most micro-batches held at once (forwarded, backward not yet done)
    /// bytes of those buffers (activations and layer stashes per slot; gradients: one set per stage, concurrent)
    std::size_t stash_bytes = 0;
    std::size_t weight_bytes = 0;      ///< bytes of weights, velocity, gradient and policy copies (LWP, stashes, ...)
    /// concurrent executor: bytes of the channels the stage receives on, the forward one from stage s - 1 (stage 0:
    /// the input channel; it holds the boundary tensor both stages use, pb/forward_channel.hpp) and the backward one
    /// from stage s + 1; 0 for the sequential executor
    std::size_t channel_bytes = 0;
    std::size_t weight_copies = 0;     ///< parameter-sized buffers among weight_bytes (3 = w, v, g only)
    ///@{
    /// L2 norms of the stage's current weights w and of its first optimizer state buffer (SGD: the velocity v;
    /// AdamW: the first moment), in double; NaN or infinity once an element is not finite. O(P) to compute.
    double weight_norm = 0.0;
    double velocity_norm = 0.0;
    ///@}
    double busy_seconds = 0.0;         ///< time spent in this stage's work (forward, backward, update, copies)
    std::size_t lane = 0;              ///< concurrent executor: the serial node (lane) that runs this stage
    ///@{
    /// Delay actually observed: updates of this stage between a micro-batch's forward and its backward.
    std::size_t observed_delay_min = 0;
    std::size_t observed_delay_max = 0;
    ///@}
    std::size_t backward_count = 0;    ///< backward passes done
    std::size_t full_delay_count = 0;  ///< of those, how many saw exactly D_s updates in between
};

/// A switch of the concurrent executor between its lanes and running every stage inline on the calling thread
/// (pb/load_adaptation.hpp), with the micro-batches per second each mode had in its latest measured runs.
struct load_switch {
    std::size_t micro_batch = 0;  ///< the first micro-batch run in the new mode
    bool to_inline = false;       ///< true: lanes -> inline; false: inline -> lanes
    double lanes_rate = 0.0;      ///< micro-batches / s on the lanes
    double inline_rate = 0.0;     ///< micro-batches / s inline
};

/// What the concurrent executor's load adaptation did (pb/load_adaptation.hpp; options::load_probe_period).
struct load_adaptation_stats {
    bool enabled = false;                ///< false: the sequential executor, one lane, or adaptation off
    std::size_t lane_runs = 0;           ///< graph runs (push_buffer micro-batches each) on the lanes
    std::size_t inline_runs = 0;         ///< runs inline on the calling thread
    std::size_t probes = 0;              ///< runs made in the other mode to measure it
    std::size_t switch_count = 0;        ///< switches of mode
    std::vector<load_switch> switches;   ///< the first 64 switches, oldest first
};

/// What the concurrent executor's lane rebalancing did (pb/lane_rebalance.hpp; options::lane_rebalance_period).
struct lane_rebalance_stats {
    bool enabled = false;  ///< false: the sequential executor, one lane, stages in other processes, or period 0
    std::size_t checks = 0;                ///< times the lanes' busy time was compared with its best cut
    std::size_t replans = 0;               ///< times the lanes were cut anew
    std::vector<std::size_t> first_stage;  ///< the lane plan in use: each lane's first stage (empty when off)
};

/// Whole-run figures. utilization(s) = busy_seconds(s) / wall_seconds.
struct run_stats {
    std::string executor;             ///< "sequential" or "concurrent"
    std::string policy;               ///< mitigation policy name
    std::size_t micro_batches = 0;    ///< completed micro-batches
    std::size_t samples = 0;          ///< completed samples
    double wall_seconds = 0.0;        ///< time spent inside push() and drain()
    double samples_per_second = 0.0;  ///< samples / wall_seconds
    std::vector<stage_stats> stages;  ///< Per stage, [S].
    load_adaptation_stats load;       ///< concurrent executor: lanes or inline, by the measured load
    lane_rebalance_stats lanes;       ///< concurrent executor: the lane plan cut anew from the stages' busy time
    /// Busy fraction of stage s: busy_seconds / wall_seconds (0 before any run).
    [[nodiscard]] double utilization(std::size_t s) const noexcept {
        return wall_seconds > 0 ? stages[s].busy_seconds / wall_seconds : 0.0;
    }
};

/// What the backwards of one stage observed: the updates applied between a micro-batch's forward and its backward
/// (D_s in the steady state, fewer after a drain). A base of pb::stage_state; the executors call record_delay.
struct delay_observations {
    /// Records the delay a backward observed.
    void record_delay(std::size_t observed) noexcept {
        if (backward_count_ == 0 || observed < observed_min_) observed_min_ = observed;
        observed_max_ = observed > observed_max_ ? observed : observed_max_;
        ++backward_count_;
        if (observed == expected_delay_) ++full_delay_count_;
    }
    /// Smallest delay (updates between forward and backward) a backward of this stage observed.
    [[nodiscard]] std::size_t observed_delay_min() const noexcept { return observed_min_; }
    /// Largest delay a backward of this stage observed (D_s in the steady state).
    [[nodiscard]] std::size_t observed_delay_max() const noexcept { return observed_max_; }
    /// Backwards recorded (record_delay calls).
    [[nodiscard]] std::size_t backward_count() const noexcept { return backward_count_; }
    /// Backwards that observed the full delay D_s (fewer during the fill after a drain).
    [[nodiscard]] std::size_t full_delay_count() const noexcept { return full_delay_count_; }

protected:
    std::size_t expected_delay_ = 0;  ///< D_s (a full delay)

private:
    std::size_t observed_min_ = 0;
    std::size_t observed_max_ = 0;
    std::size_t backward_count_ = 0;
    std::size_t full_delay_count_ = 0;
};

}  // namespace pipeprop::pb
