// pipeprop/pb/lane_plan.hpp: which consecutive stages each serial node ("lane") of PB's concurrent executor runs, as
// an explicit step (issue 10 item 5): measure the stages' per-tick costs, cut them into lanes, hand the plan to the
// engine (options::lane_starts), or skip the measurement and give a plan of one's own.
//
//   const auto costs = pb::measure_tick_costs<net>(stages, /*b=*/1);   // seconds per tick, one per stage
//   const pb::lane_plan plan = pb::plan_lanes(costs, 2);                // lanes 0..L-1, L = 2
//   opt.lane_starts = plan.first_stage;                                 // pb::engine uses it as given
//
// The lanes change only where a stage's ops run, never a result (every stage runs its op stream in order,
// pb/concurrent_executor.hpp). Without options::lane_starts the engine makes the plan itself: options::lanes lanes
// (0: one per core of the task arena), at most S; one lane per stage when that many are asked for, otherwise the cut
// of plan_lanes over measure_tick_costs.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include "pipeprop/balanced_partition.hpp"
#include "pipeprop/lane_graph.hpp"
#include "pipeprop/layer_stack.hpp"
#include "pipeprop/optim/momentum_update.hpp"
#include "pipeprop/pb/policies.hpp"

namespace pipeprop::pb {

/// Lane l runs stages [first_stage[l], first_stage[l + 1]) (the last lane up to S); first_stage[0] == 0, strictly
/// increasing.
struct lane_plan {
    std::vector<std::size_t> first_stage{0};
    [[nodiscard]] std::size_t lane_count() const noexcept { return first_stage.size(); }
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
/// (balanced_partition: the slowest lane sets the pace). Throws std::invalid_argument for lanes == 0, no stages or a
/// negative or non-finite cost.
[[nodiscard]] inline lane_plan plan_lanes(const std::vector<double>& stage_costs, std::size_t lanes) {
    const std::size_t S = stage_costs.size();
    if (lanes == 0 || S == 0)
        throw std::invalid_argument("pipeprop::pb::plan_lanes: needs >= 1 lane and >= 1 stage, got " +
                                    std::to_string(lanes) + " and " + std::to_string(S));
    lanes = std::min(lanes, S);
    if (lanes == S) return one_lane_per_stage(S);
    lane_plan p;
    for (std::size_t s : balanced_partition(stage_costs, lanes)) p.first_stage.push_back(s);
    return p;
}

/// Per-tick cost (seconds, median of `rounds`) of each stage `stages` of Net for micro-batches of b samples under
/// mitigation Policy, timed as a tick runs: copy a payload in, forward into one of the stage's D_s + 1 activation
/// slots, copy the output out, backward from the slot a real run would read (written rounds before), and the
/// parameter-sized work of the tick (the momentum update, plus writing the predicted forward weights where the policy
/// predicts, plus stashing the weights where it stashes) timed on up to 2^16 scratch elements and scaled to the
/// stage's parameter count. Rounds visit the stages in turn, so each stage finds
/// the caches as the others left them. Runs on its own buffers and on the weights of layer_stack::init_parameters(seed)
/// (the costs do not depend on the values); stage 0 reads zeros, which are valid token ids where the first layer
/// reads them. Throws std::invalid_argument for b == 0, rounds == 0 or a bad partition (as layer_stack).
template <network_type Net, class T = float, mitigation_policy Policy = policy::none>
[[nodiscard]] std::vector<double> measure_tick_costs(const std::vector<layer_range>& stages, std::size_t b,
                                                     std::size_t rounds = 9, std::uint64_t seed = 1) {
    if (b == 0 || rounds == 0)
        throw std::invalid_argument("pipeprop::pb::measure_tick_costs: b and rounds must be >= 1");
    using stack_t = layer_stack<Net, T>;
    constexpr std::size_t update_probe = std::size_t{1} << 16;
    const std::size_t count = stages.size();
    stack_t stack;
    aligned_vector<T> weights(stack_t::parameter_count);
    stack.init_parameters(weights, seed);
    std::vector<T> all_state(stack_t::state_count);
    stack.init_state(all_state);
    struct probe_stage {
        std::vector<typename stack_t::activations> slots;
        typename stack_t::workspaces ws;
        std::vector<T> state;
        std::span<const T> w;
    };
    std::vector<probe_stage> probe(count);
    std::size_t max_p = 0, max_io = 0;
    for (std::size_t s = 0; s < count; ++s) {
        const layer_range r = stages[s];
        probe_stage& p = probe[s];
        for (std::size_t k = 0; k < 2 * (count - 1 - s) + 1; ++k) p.slots.push_back(stack.make_activations(r, b));
        p.ws = stack.make_workspaces(r, b);
        p.state.assign(all_state.begin() + static_cast<std::ptrdiff_t>(stack_t::state_offset[r.begin]),
                       all_state.begin() + static_cast<std::ptrdiff_t>(stack_t::state_offset[r.end]));
        p.w = {weights.data() + stack_t::parameter_offset[r.begin], stack_t::parameter_count_of(r)};
        max_p = std::max(max_p, p.w.size());
        max_io = std::max({max_io, b * stack_t::activation_size[r.begin], b * stack_t::activation_size[r.end]});
    }
    aligned_vector<T> g(max_p), io(max_io), w(std::min(max_p, update_probe)), v(w.size()), gu(w.size()),
        extra(w.size());
    const optim::update_coefficients<T> c = optim::heavy_ball(T(0), T(0), T(0));
    for (probe_stage& p : probe)  // every slot holds a forward's stashes before any backward reads it
        for (auto& act : p.slots) {
            std::fill_n(act.input(), b * act.input_size(), T(0));
            stack.forward(p.w, act, b, p.ws, p.state);
        }
    std::vector<std::vector<double>> times(count);
    for (std::size_t round = 0; round < rounds; ++round)
        for (std::size_t s = 0; s < count; ++s) {
            probe_stage& p = probe[s];
            auto& fwd = p.slots[round % p.slots.size()];
            auto& bwd = p.slots[(round + 1) % p.slots.size()];
            // Stage 0 reads zeros; a later stage what the stage before it left in io.
            if (s == 0) std::fill_n(io.data(), b * fwd.input_size(), T(0));
            const auto t0 = std::chrono::steady_clock::now();
            std::copy_n(io.data(), b * fwd.input_size(), fwd.input());
            stack.forward(p.w, fwd, b, p.ws, p.state);
            std::copy_n(fwd.output(), b * fwd.output_size(), io.data());
            std::copy_n(io.data(), b * bwd.output_size(), bwd.output_gradient());
            stack.backward(p.w, std::span<T>(g.data(), p.w.size()), bwd, b, p.ws, s > 0, p.state);
            if (s > 0) std::copy_n(bwd.input_gradient(), b * bwd.input_size(), io.data());
            const auto t1 = std::chrono::steady_clock::now();
            const std::size_t n = std::min(p.w.size(), w.size());
            const std::size_t delay = 2 * (count - 1 - s);
            optim::momentum_update(n, w.data(), v.data(), gu.data(), c);
            if (lwp_horizon<Policy, T>(delay) != T(0)) std::copy_n(w.data(), n, extra.data());  // predicted weights
            if (Policy::stashes_weights && delay > 0) std::copy_n(w.data(), n, extra.data());   // the stash
            const auto t2 = std::chrono::steady_clock::now();
            const double update = n == 0 ? 0.0
                                         : std::chrono::duration<double>(t2 - t1).count() *
                                               static_cast<double>(p.w.size()) / static_cast<double>(n);
            times[s].push_back(std::chrono::duration<double>(t1 - t0).count() + update);
        }
    std::vector<double> costs(count);
    for (std::size_t s = 0; s < count; ++s) {
        std::sort(times[s].begin(), times[s].end());
        costs[s] = times[s][times[s].size() / 2];
    }
    return costs;
}

}  // namespace pipeprop::pb
