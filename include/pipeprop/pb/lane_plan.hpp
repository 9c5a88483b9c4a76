// pipeprop/pb/lane_plan.hpp: which consecutive stages each serial node ("lane") of PB's concurrent executor runs, as
// an explicit step: measure the stages' per-tick costs, cut them into lanes, hand the plan to the
// engine (options::lane_starts), or skip the measurement and give a plan of one's own.
//
//   const auto costs = pb::measure_tick_costs<net>(stages, /*b=*/1);   // seconds per tick, one per stage
//                                                                      // (op_cost_probe.hpp: F + BW + U)
//   const pb::lane_plan plan = pb::plan_lanes(costs, 2);                // lanes 0..L-1, L = 2
//   opt.lane_starts = plan.first_stage;                                 // pb::engine uses it as given
//
// The lanes change only where a stage's ops run, never a result (every stage runs its op stream in order,
// pb/concurrent_executor.hpp). Without options::lane_starts the engine makes the plan itself: options::lanes lanes
// (0: one per core of the task arena), at most S; one lane per stage when that many are asked for, otherwise the cut
// of plan_lanes over measure_tick_costs.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include "pipeprop/balanced_partition.hpp"
#include "pipeprop/lane_graph.hpp"
#include "pipeprop/layer_stack.hpp"
#include "pipeprop/op_cost_probe.hpp"
#include "pipeprop/pb/policies.hpp"

namespace pipeprop::pb {

/// Lane l runs stages [first_stage[l], first_stage[l + 1]) (the last lane up to S); first_stage[0] == 0, strictly
/// increasing.
struct lane_plan {
    std::vector<std::size_t> first_stage{0};  ///< [lanes]: the first stage of each lane.
    [[nodiscard]] std::size_t lane_count() const noexcept { return first_stage.size(); }  ///< Number of lanes.
};

/// Throws std::invalid_argument naming the problem unless `first_stage` is a lane plan for S stages (starts at 0,
/// strictly increasing, every entry < S).
inline void check_lane_plan(const std::vector<std::size_t>& first_stage, std::size_t stages) {
    check_lanes(first_stage, stages, "pipeprop::pb::lane_plan");
}

/// One lane per stage (S serial nodes).
[[nodiscard]] inline lane_plan one_lane_per_stage(std::size_t stages) {
    return {stages == 0 ? std::vector<std::size_t>{0} : one_lane_per_stage_starts(stages)};
}

/// `lanes` lanes (clamped to [1, S]) whose summed per-tick costs `stage_costs` [S] (any unit) are as even as possible
/// (balanced_partition: the slowest lane sets the pace), written into `plan` with the tables of `ws`: nothing is
/// allocated where ws is reserved for S stages and that many lanes (balanced_partition_workspace::reserve) and
/// plan.first_stage has room for them. Throws std::invalid_argument for lanes == 0, no stages or a negative or
/// non-finite cost.
inline void plan_lanes(std::span<const double> stage_costs, std::size_t lanes, balanced_partition_workspace& ws,
                       lane_plan& plan) {
    const std::size_t S = stage_costs.size();
    if (lanes == 0 || S == 0)
        throw std::invalid_argument("pipeprop::pb::plan_lanes: needs >= 1 lane and >= 1 stage, got " +
                                    std::to_string(lanes) + " and " + std::to_string(S));
    lanes = std::min(lanes, S);
    plan.first_stage.resize(lanes);
    if (lanes == S) {  // one lane per stage
        for (std::size_t s = 0; s < S; ++s) plan.first_stage[s] = s;
        return;
    }
    const auto points = balanced_partition(stage_costs, lanes, ws);
    plan.first_stage[0] = 0;
    std::copy(points.begin(), points.end(), plan.first_stage.begin() + 1);
}

/// plan_lanes above, returning a new plan.
[[nodiscard]] inline lane_plan plan_lanes(const std::vector<double>& stage_costs, std::size_t lanes) {
    balanced_partition_workspace ws;
    lane_plan plan;
    plan_lanes(std::span<const double>(stage_costs), lanes, ws, plan);
    return plan;
}

/// Per-tick cost (seconds) of each stage of the cut `stages` of Net (value type T) for micro-batches of b samples
/// under mitigation Policy: the sum of the medians over `rounds` rounds of measure_op_costs (op_cost_probe.hpp) of
/// what a PB tick of stage s runs (docs/pb-semantics.md §1; PB-paper, Kosson et al., arXiv 2003.11666, §3): F (with the
/// boundary copies), the fused BW, the momentum update of the stage's parameters, plus one parameter-sized copy for
/// the predicted forward weights where the policy predicts (lwp_horizon(D_s) != 0) and one for the stash where it
/// stashes (Policy::stashes_weights, D_s > 0). The probe gives every stage but the last two activation slots, so
/// each backward reads a slot written a round before, and visits the stages in turn, so each stage finds the caches
/// as the others left them (its memory: two slots per stage, not the pipeline's D_s + 1). Returns S costs (plan_lanes' input). Runs
/// on its own buffers and the weights of layer_stack::init_parameters(seed) (the costs do not depend on the
/// values). Throws std::invalid_argument, naming pipeprop::pb::measure_tick_costs, for b == 0, rounds == 0 or
/// `stages` not a partition of the network (check_partition).
template <network_type Net, class T = float, mitigation_policy Policy = policy::none>
[[nodiscard]] std::vector<double> measure_tick_costs(const std::vector<layer_range>& stages, std::size_t b,
                                                     std::size_t rounds = 9, std::uint64_t seed = 1) {
    pipeprop::detail::check_probe_arguments(stages, layer_stack<Net, T>::layer_count, b, rounds,
                                            "pipeprop::pb::measure_tick_costs");
    const std::size_t S = stages.size();
    op_cost_probe_options opt{.rounds = rounds, .seed = seed, .slots = {}};
    // D_s + 1 slots would allocate the whole pipeline's activations (S^2 slots) once more for the same timing.
    for (std::size_t s = 0; s < S; ++s) opt.slots.push_back(s + 1 < S ? 2 : 1);
    const std::vector<op_costs> ops = measure_op_costs<Net, T>(stages, b, opt);
    std::vector<double> costs(S);
    for (std::size_t s = 0; s < S; ++s) {
        const std::size_t delay = 2 * (S - 1 - s);
        const double copies = (lwp_horizon<Policy, T>(delay) != T(0) ? 1.0 : 0.0) +
                              (Policy::stashes_weights && delay > 0 ? 1.0 : 0.0);
        costs[s] = ops[s].forward + ops[s].backward_fused + ops[s].update + copies * ops[s].parameter_copy;
    }
    return costs;
}

}  // namespace pipeprop::pb
