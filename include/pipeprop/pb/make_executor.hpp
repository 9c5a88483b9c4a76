// pipeprop/pb/make_executor.hpp: the one place a PB engine's executor is built (sequential reference or concurrent
// flow graph, pb/executor.hpp), with the concurrent executor's lane plan.
//
// pb::engine calls make_executor from its constructor and talks to the result through the executor<T> interface
// only. Both functions below are function templates that are not inline, so a program with many engines can
// compile the executors in translation units of their own: declare the instantiations `extern` where the engines
// are built and define them in another unit (PIPEPROP_PB_EXECUTOR_INSTANTIATION below). The main program does
// this (examples/train/pb_executors.hpp): a PB unit would otherwise compile both executors for every mitigation
// policy. Nothing changes for a program that does neither: the templates are instantiated where they are used.
#pragma once

#include <algorithm>
#include <cstddef>
#include <memory>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include <oneapi/tbb/task_arena.h>

#include "pipeprop/layer_stack.hpp"
#include "pipeprop/pb/concurrent_executor.hpp"
#include "pipeprop/pb/executor.hpp"
#include "pipeprop/pb/lane_plan.hpp"
#include "pipeprop/pb/policies.hpp"
#include "pipeprop/pb/sequential_executor.hpp"
#include "pipeprop/pb/stage_state.hpp"

namespace pipeprop::pb {

/// The lanes the concurrent executor gets for the cut `ranges` (S stages): options::lane_starts as given (checked
/// by check_lane_plan), else options::lanes lanes (0: the task arena's concurrency) clamped to [1, S]: one per
/// stage when S, one when 1, otherwise plan_lanes over measure_tick_costs<Net, T, Policy> of the cut (a few ticks
/// per stage timed on scratch buffers, micro-batches of options::max_batch samples). MaxStages: a bound on S known
/// at compile time (a static pipeline's stage count); at most 2 stages never need the cost probe, which is then
/// not compiled. Throws std::invalid_argument for a bad options::lane_starts.
template <network_type Net, mitigation_policy Policy, class T, std::size_t MaxStages = std::dynamic_extent>
lane_plan lane_plan_for(const options<Policy>& opt, const std::vector<layer_range>& ranges) {
    const std::size_t S = ranges.size();
    if (opt.remote != nullptr) return {};  // one lane of this process's stages (concurrent_executor)
    if (!opt.lane_starts.empty()) {
        check_lane_plan(opt.lane_starts, S);
        return {opt.lane_starts};
    }
    std::size_t n =
        opt.lanes != 0 ? opt.lanes : static_cast<std::size_t>(std::max(1, tbb::this_task_arena::max_concurrency()));
    n = std::min(n, S);
    if (n == S) return one_lane_per_stage(S);
    if (n == 1) return {};
    if constexpr (MaxStages > 2)  // 1 < n < S
        return plan_lanes(measure_tick_costs<Net, T, Policy>(ranges, opt.max_batch, 9, opt.seed), n);
    else
        throw std::logic_error("pipeprop::pb::lane_plan_for: more stages than the pipeline type's " +
                               std::to_string(MaxStages));
}

/// The executor options::executor names, running the stages `stages` (cut `ranges`) of `stack`, both owned by the
/// caller (pb::engine) and outliving the executor; `lanes`: the concurrent executor's lane plan (lane_plan_for of
/// the same options and cut, made before the stages allocate their buffers). Network-free (the executors see the
/// network through its runtime_layer_stack<T>): one instantiation serves every network. Throws
/// std::invalid_argument for options::remote with the sequential executor.
template <mitigation_policy Policy, class T, class Loss, class Optimizer>
std::unique_ptr<executor<T>> make_executor(const runtime_layer_stack<T>& stack,
                                           std::vector<basic_stage_state<Policy, T, Optimizer>>& stages,
                                           const options<Policy>& opt, const lane_plan& lanes) {
    if (opt.executor == executor_kind::sequential && opt.remote != nullptr)
        throw std::invalid_argument("pipeprop::pb::engine: stages in other processes (options::remote) need the "
                                    "concurrent executor; the sequential one runs every stage in this process");
    if (opt.executor == executor_kind::sequential)
        return std::make_unique<sequential_executor<Policy, T, Loss, Optimizer>>(stack, stages, opt.max_batch,
                                                                                 opt.flush_subnormals);
    return std::make_unique<concurrent_executor<Policy, T, Loss, Optimizer>>(
        stack, stages, opt.max_batch, opt.push_buffer, lanes,
        opt.flush_subnormals, opt.remote, opt.load_probe_period, opt.lane_rebalance_period);
}

}  // namespace pipeprop::pb

/// `PIPEPROP_PB_EXECUTOR_INSTANTIATION(extern, Policy, T, Loss, Optimizer);` declares the executors of the PB
/// engines pb::engine<Net, Policy, T, Loss, Optimizer> of every network Net as compiled elsewhere;
/// `PIPEPROP_PB_EXECUTOR_INSTANTIATION(, Policy, ...);` in exactly one unit of the program compiles them there (a
/// missing one: an undefined reference to make_executor at link time). Use it at global scope, before the engine
/// is used in that unit, and spell every type fully qualified from the global namespace
/// (`::pipeprop::pb::policy::none`): inside the declaration, names are looked up in pipeprop::pb first (an alias
/// `policy` of one's own would find the namespace pipeprop::pb::policy). An argument must not contain a top-level
/// comma: give such a type an alias first, e.g. `using my_loss = ::pipeprop::pb::engine<::app::my_net,
/// ::app::my_policy>::loss_type;` (the engine's default loss), then pass `::my_loss`.
#define PIPEPROP_PB_EXECUTOR_INSTANTIATION(EXTERN, POLICY, T, LOSS, OPTIMIZER)                                      \
    EXTERN template std::unique_ptr<::pipeprop::pb::executor<T>>                                                 \
    pipeprop::pb::make_executor<POLICY, T, LOSS, OPTIMIZER>(                                                      \
        const ::pipeprop::runtime_layer_stack<T>&,                                                               \
        std::vector<::pipeprop::pb::basic_stage_state<POLICY, T, OPTIMIZER>>&,                                    \
        const ::pipeprop::pb::options<POLICY>&, const ::pipeprop::pb::lane_plan&)
