// pipeprop/pb/lane_rebalance.hpp: the concurrent PB executor's second look at its lane plan (pb/lane_plan.hpp),
// from the time its stages actually spend in their ops during the run.
//
// Why: the plan the engine starts with is cut over a cost probe (measure_tick_costs) that times each stage alone,
// on its own buffers. In the running pipeline a stage's tick can cost a different share: the stages' working sets
// (weights, velocity, predicted weights, transformed kernels, D_s + 1 activation slots) compete for one core's
// caches with the other stages of the same lane, and activations cross cores at the cut. When the probe's shares
// and the run's differ, one lane waits for the other on every tick.
// What: every `period` graph runs on the lanes (push_buffer micro-batches each, none of them in the pipeline's fill
// or a drain), the executor hands over each stage's busy time in those runs; the rebalancer cuts the same number of
// lanes anew over them (plan_lanes, the same balanced cut) and adopts the new cut when its slowest lane would have
// been busy at least `margin` (3%) less than the slowest lane of the plan in use, in two looks in a row that found
// the same cut. The busy time of a stage is the wall-clock time of its ops, so a lane whose core another process
// takes looks slower, and single looks can find the cut moving back and forth with the other process's time slices;
// the second look keeps the lanes from following them.
// Where the stages' ops run never changes a result (every stage runs its op stream in order,
// pb/concurrent_executor.hpp), so a new cut changes speed only. Memory: the balanced cut's tables (O(lanes x S))
// and the plans are allocated at construction, so runs and looks allocate nothing; a new cut is returned as a new
// plan and costs the executor a new flow graph.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "pipeprop/pb/lane_plan.hpp"
#include "pipeprop/pb/stats.hpp"

namespace pipeprop::pb {

/// The largest summed cost of one lane of `plan` over per-stage costs `costs` [S] (any unit): the lane that sets
/// the pipeline's pace. Throws std::invalid_argument unless `plan` is a lane plan for S stages.
[[nodiscard]] inline double slowest_lane_cost(const lane_plan& plan, std::span<const double> costs) {
    check_lane_plan(plan.first_stage, costs.size());
    double slowest = 0.0;
    for (std::size_t l = 0; l < plan.lane_count(); ++l) {
        const std::size_t end = l + 1 < plan.lane_count() ? plan.first_stage[l + 1] : costs.size();
        double sum = 0.0;
        for (std::size_t s = plan.first_stage[l]; s < end; ++s) sum += costs[s];
        slowest = std::max(slowest, sum);
    }
    return slowest;
}

/// The decision of lane_rebalance.hpp's file comment, fed with the stages' busy time before and after each measured
/// run on the lanes. Not thread-safe (the executor calls it between graph runs only).
class lane_rebalancer {
public:
    /// A new cut is adopted when its slowest lane is cheaper than the current plan's by at least this fraction.
    static constexpr double margin = 0.03;

    /// Off: the plan never changes.
    lane_rebalancer() = default;
    /// Starts from `plan` (a plan for `stages` stages: std::invalid_argument otherwise) and looks at it again every
    /// `period` measured runs (0: never; also never with one lane, where there is nothing to cut).
    lane_rebalancer(std::size_t period, lane_plan plan, std::size_t stages)
        : period_(plan.lane_count() > 1 ? period : 0), plan_(std::move(plan)), busy_(stages, 0.0) {
        check_lane_plan(plan_.first_stage, stages);
        tables_.reserve(stages, plan_.lane_count());
        cut_.first_stage.reserve(plan_.lane_count());
        candidate_.reserve(plan_.lane_count());
        mark_.reserve(stages);
        stats_.enabled = period_ > 0;
        if (stats_.enabled) stats_.first_stage = plan_.first_stage;
    }

    /// True when the plan may change (period > 0 and more than one lane).
    [[nodiscard]] bool enabled() const noexcept { return period_ > 0; }
    /// The plan in use.
    [[nodiscard]] const lane_plan& plan() const noexcept { return plan_; }

    /// A measured run on the lanes starts; busy_seconds [S]: each stage's busy time so far.
    void run_starts(std::span<const double> busy_seconds) {
        if (!enabled()) return;
        check(busy_seconds);
        mark_.assign(busy_seconds.begin(), busy_seconds.end());
    }

    /// The run that run_starts announced ended; busy_seconds [S]: each stage's busy time so far. Returns the new plan
    /// when the lanes should be cut anew now (it is then the plan in use), otherwise nothing. Throws
    /// std::invalid_argument for a wrong size, a negative or non-finite time, a time below the run's start or a
    /// call without run_starts.
    std::optional<lane_plan> run_ended(std::span<const double> busy_seconds) {
        if (!enabled()) return std::nullopt;
        check(busy_seconds);
        if (mark_.size() != busy_.size()) throw std::invalid_argument(std::string(who) + ": a run ended unannounced");
        for (std::size_t s = 0; s < busy_.size(); ++s) {
            if (busy_seconds[s] < mark_[s])
                throw std::invalid_argument(std::string(who) + ": stage " + std::to_string(s) +
                                            "'s busy time went back during the run");
            busy_[s] += busy_seconds[s] - mark_[s];
        }
        mark_.clear();
        if (++runs_ < period_) return std::nullopt;
        runs_ = 0;
        ++stats_.checks;
        plan_lanes(busy_, plan_.lane_count(), tables_, cut_);
        const double now = slowest_lane_cost(plan_, busy_);
        const double then = slowest_lane_cost(cut_, busy_);
        std::fill(busy_.begin(), busy_.end(), 0.0);
        if (!(now > 0.0 && then <= now * (1.0 - margin)) || cut_.first_stage == plan_.first_stage) {
            candidate_.clear();
            return std::nullopt;
        }
        if (cut_.first_stage != candidate_) {  // a first look that finds this cut: wait for the next to agree
            candidate_ = cut_.first_stage;
            return std::nullopt;
        }
        candidate_.clear();
        plan_ = cut_;
        ++stats_.replans;
        stats_.first_stage = plan_.first_stage;
        return plan_;
    }

    /// What the rebalancer did so far (run_stats::lanes).
    [[nodiscard]] const lane_rebalance_stats& stats() const noexcept { return stats_; }

private:
    static constexpr const char* who = "pipeprop::pb::lane_rebalancer";

    void check(std::span<const double> busy_seconds) const {
        if (busy_seconds.size() != busy_.size())
            throw std::invalid_argument(std::string(who) + ": " + std::to_string(busy_seconds.size()) +
                                        " busy times for " + std::to_string(busy_.size()) + " stages");
        for (std::size_t s = 0; s < busy_.size(); ++s)
            if (!(busy_seconds[s] >= 0.0) || !std::isfinite(busy_seconds[s]))
                throw std::invalid_argument(std::string(who) + ": stage " + std::to_string(s) +
                                            "'s busy time is negative or not finite");
    }

    std::size_t period_ = 0;
    std::size_t runs_ = 0;      // measured runs since the last check
    lane_plan plan_{};
    std::vector<double> busy_;  // [S]: seconds in the measured runs since the last check
    std::vector<double> mark_;  // [S]: the busy times when the current run started (empty: none announced)
    std::vector<std::size_t> candidate_;  // the cut the last look found better (empty: none)
    balanced_partition_workspace tables_;  // plan_lanes' tables, reserved at construction
    lane_plan cut_;                         // the cut of the latest look
    lane_rebalance_stats stats_;
};

}  // namespace pipeprop::pb
