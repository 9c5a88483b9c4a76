// pipeprop/sync/memory_estimate.hpp: the bytes a synchronous pipeline executor (sync::schedule_executor,
// sync::pipeline_executor) will allocate, from its type, schedule, stage cut and options, without allocating them
// (memory_estimate.hpp). Activation memory of the schedules: docs/schedules.md §3; the formula: docs/pitfalls.md
// item 11.
//
// The schedule's buffer sizes (sync/plan_sizes.hpp, covering_sizes: what the executor's plans of every step need,
// computed without building a plan per micro-batch count, at a cost independent of the micro-batch count m) give the
// activation slots n_s per stage and the channel capacities; with b = ceil(max_batch / m) samples per slot, t
// targets per sample, P_s parameters of stage s, K the optimizer's state buffers, A_s = sum over k in [begin, end]
// of activation_size[k] b values, L_s and W_s the stashes and workspaces:
//   weights      (2 + K) P_s sizeof(T) (weights, gradient, optimizer state)
//   activations  n_s (2 A_s sizeof(T) + L_s + 4 b t) (every slot has its own gradients)
//   workspaces   W_s
//   channels     forward into s: its capacity times b (activation_size[begin] sizeof(T) + 4 t); backward into s: its
//                capacity times b activation_size[end] sizeof(T)
// plus the evaluation buffers at max_batch samples (stage_inference::bytes_for), the undo copy of step_or_undo
// ((1 + K) parameter blocks and the running state, made by its first call) and, during construction only, the
// network's initial parameter block.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "pipeprop/boundary_channel.hpp"
#include "pipeprop/layer_stack.hpp"
#include "pipeprop/memory_estimate.hpp"
#include "pipeprop/pipeline_layout.hpp"
#include "pipeprop/stage_inference.hpp"
#include "pipeprop/sync/executor_options.hpp"
#include "pipeprop/sync/schedule.hpp"
#include "pipeprop/sync/plan_sizes.hpp"

namespace pipeprop::sync {

/// The bytes the synchronous executor type Executor built with schedule `kind`, 2BP on or off, the cut `stages` and
/// the options `opt` will allocate (see the file comment), computed without allocating them. Equal, per stage, to
/// what the executor's stages hold (stage::activation_bytes plus the targets, the parameter-sized buffers). Throws
/// std::invalid_argument as the executor's constructor does for a cut that is not a partition of the network's layers
/// or an invalid option, and as make_schedule for the schedule's sizes.
template <class Executor>
[[nodiscard]] memory_estimate estimate_memory(schedule_kind kind, bool two_stage_bp,
                                              const std::vector<layer_range>& stages,
                                              const typename Executor::options_type& opt) {
    using stack_type = typename Executor::stack_type;
    using T = typename Executor::value_type;
    using channel = boundary_channel<T>;
    check_partition(stages, stack_type::layer_count, "pipeprop::sync::estimate_memory");
    detail::check_executor_options(opt);
    const std::size_t S = stages.size(), m = opt.micro_batches, t = Executor::targets_per_sample;
    const std::size_t b = (opt.max_batch + m - 1) / m, K = Executor::optimizer_type::state_buffer_names.size();
    const plan_sizes sizes =
        covering_sizes(kind, two_stage_bp, S, m, opt.max_batch, opt.max_consecutive_steps, opt.chunks);
    const std::vector<std::size_t>& slots = sizes.slots;
    const std::vector<channel_capacity>& caps = sizes.caps;
    const stack_type net{};
    memory_estimate e;
    e.stages.resize(S);
    for (std::size_t s = 0; s < S; ++s) {
        const layer_range r = stages[s];
        stage_memory& o = e.stages[s];
        o.activation_slots = slots[s];
        o.activation_bytes = slots[s] * (net.activation_bytes(r, b, true) + b * t * sizeof(std::int32_t));
        o.weight_bytes = (2 + K) * stack_type::parameter_count_of(r) * sizeof(T);
        o.workspace_bytes = net.workspace_bytes(r, b);
        if (s > 0)
            o.channel_bytes += channel::bytes_for(caps[s - 1].forward, stack_type::activation_size[r.begin], b, t);
        if (s + 1 < S)
            o.channel_bytes += channel::bytes_for(caps[s].backward, stack_type::activation_size[r.end], b, 0);
    }
    e.evaluation_bytes = stage_inference<stack_type>::bytes_for(net, stages, opt.max_batch);
    e.other_bytes = ((1 + K) * stack_type::parameter_count + stack_type::state_count) * sizeof(T);
    e.construction_bytes = stack_type::parameter_count * sizeof(T);
    return e;
}

}  // namespace pipeprop::sync
