// pipeprop/sync/simulator.hpp: times a schedule's op lists under the dependency model of
// sync/schedule_analysis.hpp, from per-stage costs T_F, T_B (backward-p1), T_W (backward-p2).
//
// Model: stage s runs its ops in list order, each as soon as the previous op of the stage has ended and its
// cross-stage dependency has ended (plus an optional fixed message latency); with virtual stages
// (schedule::device_order) each device runs one op at a time, its stages' ops in the device's order, and ends its
// step with its stages' optimizer ops. Devices = stages otherwise, and busy / idle below are per device. A schedule of
// k consecutive steps (consecutive_steps) is one simulated step of its lists, each device's stages updating after
// the device's last op of each of the k steps: it times exactly what steps = k without the barrier times (spans
// carry the step and the micro-batch within it; step_time covers the k steps). Nothing else is modelled: no
// communication bandwidth, no contention between stages for cores or memory, no thread wake-up latency (the
// benchmark, bench/two_stage_bp.md, measures how far reality is from this). Each stage ends its step with the
// optimizer op (cost T_opt). With steps > 1 the step lists are concatenated per stage; `barrier` makes every stage
// wait for all optimizer ops of the previous step (what the executors do: one step at a time); without it a
// stage starts the next step's F's right after its own optimizer op (still exact synchronous SGD: every F of step
// n + 1 runs on weights updated by step n), which is the steady-state accounting of the ZB-paper (Qi et al. arXiv
// 2401.10241, §3.1).
//
// Closed forms it reproduces (docs/schedules.md §2; checked by tests/unit/test_sync_simulator.cpp):
// equal stage costs, one step, no latency, T_opt = 0:
//   GPipe, 1F1B:  makespan (m + p - 1)(T_F + T_B + T_W)      bubble (p-1)(T_F+T_B+T_W) per stage
//   GPipe + 2BP:  makespan (m + p - 1)(T_F + T_B) + m T_W
//   ZB-H1:        bubble (p - 1)(T_F + T_B - T_W)    when T_W <= min(T_F, T_B) and m >= p
//   ZB-H2:        bubble (p - 1)(T_F + T_B - 2 T_W)  when 2 T_W <= T_B, T_W <= T_F and m >= 2p - 1; without the
//                 barrier (steady state) max(0, that) whenever T_W <= T_F: zero when the three are equal.
// (The conditions are where the handcrafted orders of sync/schedule.hpp reach the ZB-paper's figures; a single
// synchronous step can never beat the last stage's start-up (p - 1) T_F.)
#pragma once

#include <algorithm>
#include <cstddef>
#include <limits>
#include <stdexcept>
#include <string>
#include <vector>

#include "pipeprop/sync/op_span.hpp"
#include "pipeprop/sync/schedule.hpp"
#include "pipeprop/sync/schedule_analysis.hpp"

namespace pipeprop::sync {

/// Costs of one stage per micro-batch, in seconds (or any one unit). backward_fused < 0 means T_B + T_W.
struct stage_costs {
    double forward = 1;           ///< T_F (the last stage's includes the loss)
    double backward_input = 1;    ///< T_B: backward-p1
    double backward_weight = 1;   ///< T_W: backward-p2
    double backward_fused = -1;   ///< T_BW: fused backward (2BP off); < 0: T_B + T_W
    double optimizer = 0;         ///< T_opt: the stage's optimizer step, once per step

    /// The fused backward's cost: backward_fused, or T_B + T_W when it is < 0.
    [[nodiscard]] double fused() const noexcept {
        return backward_fused >= 0 ? backward_fused : backward_input + backward_weight;
    }
    /// The cost of an op of kind k (update: optimizer).
    [[nodiscard]] double of(op_kind k) const noexcept {
        switch (k) {
            case op_kind::forward: return forward;
            case op_kind::backward_input: return backward_input;
            case op_kind::backward_weight: return backward_weight;
            case op_kind::backward_fused: return fused();
            case op_kind::update: return optimizer;
        }
        return 0;
    }
};

/// Options of simulate.
struct simulation_options {
    std::size_t steps = 1;       ///< optimizer steps simulated back to back
    bool barrier = true;         ///< every stage waits for all optimizer ops of the previous step
    double message_latency = 0;  ///< added between a cross-stage dependency's end and the dependent op's start
};

/// Result of simulate. Times in the unit of the costs, from 0 = start of the first step.
struct simulation_result {
    std::vector<op_span> spans;               ///< every op and optimizer op, per stage in list order
    double makespan = 0;                      ///< end of the last op of the last step
    double step_time = 0;                     ///< last step's end minus the previous step's end (makespan if 1 step)
    std::vector<double> busy;                 ///< per device: work of one step (sum of its stages' op costs)
    std::vector<double> idle;                 ///< per device: step_time - busy (the device's bubble per step)
    double bubble_ratio = 0;                  ///< sum of idle / (devices * step_time)
    std::vector<std::size_t> peak_in_flight;  ///< per stage (see schedule_analysis.hpp)
};

/// Simulates sc with costs[s] for stage s (costs.size() == p, or 1: the same for every stage).
/// Throws std::invalid_argument for a wrong number of costs, a negative cost or an invalid schedule (validate).
[[nodiscard]] inline simulation_result simulate(const schedule& sc, const std::vector<stage_costs>& costs,
                                                const simulation_options& opt = {}) {
    validate(sc);
    const std::size_t p = sc.stages, m = sc.micro_batches;
    if (costs.size() != p && costs.size() != 1)
        throw std::invalid_argument("pipeprop::sync::simulate: " + std::to_string(costs.size()) +
                                    " stage costs for " + std::to_string(p) + " stages");
    if (opt.steps == 0) throw std::invalid_argument("pipeprop::sync::simulate: steps must be >= 1");
    auto cost = [&](std::size_t s) -> const stage_costs& { return costs[costs.size() == 1 ? 0 : s]; };
    for (std::size_t s = 0; s < p; ++s) {
        const auto& c = cost(s);
        if (c.forward < 0 || c.backward_input < 0 || c.backward_weight < 0 || c.optimizer < 0 || c.fused() < 0)
            throw std::invalid_argument("pipeprop::sync::simulate: negative cost for stage " + std::to_string(s));
    }
    constexpr double unknown = -1;
    const std::size_t steps = opt.steps, devices = sc.devices();
    // device d's entries: the stages of its ops in run order (without virtual stages: stage d's list)
    std::vector<std::vector<std::size_t>> order = sc.device_order;
    if (order.empty())
        for (std::size_t d = 0; d < p; ++d) order.emplace_back(sc.ops[d].size(), d);
    std::vector<std::vector<std::size_t>> stages_of(devices);
    for (std::size_t st = 0; st < p; ++st) stages_of[sc.device_of_stage(st)].push_back(st);
    // end time of F / p1 of (step, stage, micro-batch); step_end[n] = end of all optimizer ops of step n
    std::vector<double> f_end(steps * p * m, unknown), p1_end(steps * p * m, unknown);
    auto at = [&](std::size_t n, std::size_t st, std::size_t j) { return (n * p + st) * m + j; };
    std::vector<double> step_end(steps, unknown);
    std::vector<std::size_t> done_devices(steps, 0);

    simulation_result r;
    r.busy.assign(devices, 0);
    // a schedule of several consecutive steps (consecutive_steps): each device's stages update after the device's
    // last op of each of them (inner[d]: the device's step within the lists)
    const std::size_t per_step = sc.micro_batches_per_step();
    std::vector<std::size_t> step_of(devices, 0), index(devices, 0), next_op(p, 0), inner(devices, 0);
    std::vector<double> free_at(devices, 0), device_step_end(steps * devices, unknown);
    std::vector<std::vector<op_span>> per_stage(p);
    for (bool moved = true; moved;) {
        moved = false;
        for (std::size_t d = 0; d < devices; ++d) {
            for (;;) {
                const std::size_t n = step_of[d];
                if (n == steps) break;
                double earliest = free_at[d];
                if (index[d] == 0 && n > 0 && opt.barrier) {
                    if (step_end[n - 1] == unknown) break;
                    earliest = std::max(earliest, step_end[n - 1]);
                }
                const bool lists_done = index[d] == order[d].size();
                if (!lists_done && sc.steps > 1) {  // the next op belongs to the next step in the lists
                    const std::size_t st = order[d][index[d]];
                    if (sc.ops[st][next_op[st]].micro_batch / per_step > inner[d]) {
                        for (const std::size_t t : stages_of[d]) {
                            const double end = earliest + cost(t).optimizer;
                            per_stage[t].push_back({t, span_kind::optimizer, 0, earliest, end, n * sc.steps + inner[d]});
                            earliest = end;
                        }
                        free_at[d] = earliest;
                        ++inner[d];
                        moved = true;
                        continue;
                    }
                }
                if (lists_done) {  // the optimizer ops of the device's stages
                    for (const std::size_t st : stages_of[d]) {
                        const double end = earliest + cost(st).optimizer;
                        per_stage[st].push_back({st, span_kind::optimizer, 0, earliest, end, n * sc.steps + inner[d]});
                        earliest = end;
                        next_op[st] = 0;
                    }
                    inner[d] = 0;
                    free_at[d] = earliest;
                    device_step_end[n * devices + d] = earliest;
                    if (++done_devices[n] == devices) {
                        double e = 0;
                        for (std::size_t t = 0; t < devices; ++t) e = std::max(e, device_step_end[n * devices + t]);
                        step_end[n] = e;
                    }
                    ++step_of[d];
                    index[d] = 0;
                    moved = true;
                    continue;
                }
                const std::size_t st = order[d][index[d]];
                const op o = sc.ops[st][next_op[st]];
                if (o.kind == op_kind::forward && st > 0) {
                    const double dep = f_end[at(n, st - 1, o.micro_batch)];
                    if (dep == unknown) break;
                    earliest = std::max(earliest, dep + opt.message_latency);
                } else if (is_backward_p1(o) && st + 1 < p) {
                    const double dep = p1_end[at(n, st + 1, o.micro_batch)];
                    if (dep == unknown) break;
                    earliest = std::max(earliest, dep + opt.message_latency);
                }
                const double end = earliest + cost(st).of(o.kind);
                per_stage[st].push_back({st, span_kind_of(o.kind), o.micro_batch % per_step, earliest, end,
                                         n * sc.steps + o.micro_batch / per_step});
                if (o.kind == op_kind::forward) f_end[at(n, st, o.micro_batch)] = end;
                if (is_backward_p1(o)) p1_end[at(n, st, o.micro_batch)] = end;
                free_at[d] = end;
                ++next_op[st];
                ++index[d];
                moved = true;
            }
        }
    }
    for (std::size_t d = 0; d < devices; ++d)
        if (step_of[d] != steps)
            throw std::logic_error("pipeprop::sync::simulate: device " + std::to_string(d) + " stalled in step " +
                                   std::to_string(step_of[d]) + " (schedule " + sc.label() + ")");
    for (std::size_t st = 0; st < p; ++st) {
        for (const op o : sc.ops[st]) r.busy[sc.device_of_stage(st)] += cost(st).of(o.kind);
        r.busy[sc.device_of_stage(st)] += cost(st).optimizer * static_cast<double>(sc.steps);
        r.spans.insert(r.spans.end(), per_stage[st].begin(), per_stage[st].end());
    }
    r.makespan = step_end[steps - 1];
    r.step_time = steps == 1 ? r.makespan : step_end[steps - 1] - step_end[steps - 2];
    double total_idle = 0;
    for (std::size_t d = 0; d < devices; ++d) {
        r.idle.push_back(r.step_time - r.busy[d]);
        total_idle += r.idle.back();
    }
    r.bubble_ratio = r.step_time > 0 ? total_idle / (static_cast<double>(devices) * r.step_time) : 0;
    r.peak_in_flight = peak_in_flight(sc);
    return r;
}

/// Samples per second of one step of batch B under a simulation whose costs were in seconds.
[[nodiscard]] inline double samples_per_second(const simulation_result& r, std::size_t batch) noexcept {
    return r.step_time > 0 ? static_cast<double>(batch) / r.step_time : 0;
}

}  // namespace pipeprop::sync
