// pipeprop/pb/memory_estimate.hpp: the bytes a PB engine (pb::engine, pb::pipeline) will allocate, from its type, its
// stage cut and its options, without allocating them (memory_estimate.hpp). PB-paper (Kosson et al., arXiv
// 2003.11666) §3; the buffers and their bounds: docs/pb-semantics.md §9; the formula: docs/pitfalls.md item 11.
//
// Per stage s of S, delay D_s = 2 (S - 1 - s), layers [begin, end), P_s parameters, micro-batch capacity b =
// options::max_batch, t targets per sample, A_s = sum over k in [begin, end] of activation_size[k] b values of
// sizeof(T) bytes, L_s its layers' stashes and W_s their workspaces at b samples (pb/buffer_counts.hpp for the counts):
//   weights      c P_s sizeof(T), c = pb::stage_weight_copies (w, v, gradient, optimizer and policy buffers); plus
//                sequential: forward_weight_versions(D_s) copies (the forward-weight history); concurrent: one copy
//                of predicted forward weights (LWP, 2BW) and weight_stash_copies(D_s) (weight stashing)
//   activations  sequential: one slot, 2 A_s + L_s;
//                concurrent: D_s + 1 slots of A'_s + L_s + 4 b t (targets), A'_s = A_s less the boundaries the
//                forward channels hold (pb::slot_boundaries: the input activation_size[begin] b unless s = 0, the
//                output activation_size[end] b unless s = S - 1), and A_s of gradients per slot with its own
//                (gradient_set_count: one, every slot on the last stage)
//   workspaces   W_s (one set per stage)
//   channels     concurrent: forward into s, the D_{s-1} + 1 buffers that are stage s - 1's outputs and stage s's
//                inputs, (D_{s-1} + 1) (activation_size[begin] b sizeof(T), rounded up to 64 bytes, + 4 b t)
//                (pb/forward_channel.hpp; stage 0: the input channel, options::push_buffer buffers of
//                activation_size[begin] b sizeof(T) + 4 b t), and backward into s, (D_{s+1} + 3) b activation_size[end]
//                sizeof(T)
// plus the evaluation buffers at options::eval_batch (stage_inference::bytes_for), the sequential executor's 4 b t
// bytes of targets, and, during construction only, the network's initial parameter block. With options::remote, the
// executor's buffers of stages other processes run are zero (their weights are still held here).
#pragma once

#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <vector>

#include "pipeprop/boundary_channel.hpp"
#include "pipeprop/layer_stack.hpp"
#include "pipeprop/memory_estimate.hpp"
#include "pipeprop/pb/buffer_counts.hpp"
#include "pipeprop/pb/concurrent_executor.hpp"
#include "pipeprop/pb/executor.hpp"
#include "pipeprop/pb/forward_channel.hpp"
#include "pipeprop/pipeline_layout.hpp"
#include "pipeprop/stage_inference.hpp"

namespace pipeprop::pb {

/// The bytes the PB engine type Engine (a pb::engine or pb::pipeline) built with the cut `stages` and the options `opt`
/// will allocate (see the file comment), computed without allocating them: the stages' buffers, the evaluation buffers,
/// the construction block. Equal to the engine's own report (run_stats: stage_stats::stash_bytes, weight_bytes and
/// channel_bytes) for the stages it reports. Throws std::invalid_argument, as the engine's constructor does, for a cut
/// that is not a partition of the network's layers or max_batch, push_buffer or eval_batch == 0.
template <class Engine>
[[nodiscard]] memory_estimate estimate_memory(const std::vector<layer_range>& stages,
                                              const typename Engine::options_type& opt) {
    using stack_type = typename Engine::stack_type;
    using T = typename Engine::value_type;
    using Policy = typename Engine::policy_type;
    using Optimizer = typename Engine::optimizer_type;
    using channel = boundary_channel<T>;
    using concurrent = concurrent_executor<Policy, T, typename Engine::loss_type, Optimizer>;
    check_partition(stages, stack_type::layer_count, "pipeprop::pb::estimate_memory");
    if (opt.max_batch == 0 || opt.push_buffer == 0 || opt.eval_batch == 0)
        throw std::invalid_argument("pipeprop::pb::estimate_memory: max_batch, push_buffer and eval_batch must be "
                                    ">= 1");
    const stack_type net{};
    const std::size_t S = stages.size(), b = opt.max_batch, t = Engine::targets_per_sample;
    const std::size_t targets = b * t * sizeof(std::int32_t);
    const bool sequential = opt.executor == executor_kind::sequential;
    memory_estimate m;
    m.stages.resize(S);
    for (std::size_t s = 0; s < S; ++s) {
        const layer_range r = stages[s];
        const std::size_t D = pb_delay(s, S), P = stack_type::parameter_count_of(r), w = P * sizeof(T);
        stage_memory& o = m.stages[s];
        o.weight_bytes = stage_weight_copies<Policy, Optimizer, T> * w;
        if (!sequential) {  // the channels: made for every stage, local or not
            o.channel_bytes = s == 0 ? channel::bytes_for(opt.push_buffer, stack_type::activation_size[r.begin], b, t)
                                     : forward_channel<T>::bytes_for(concurrent::forward_capacity(pb_delay(s - 1, S)),
                                                                     stack_type::activation_size[r.begin], b, t);
            if (s + 1 < S)
                o.channel_bytes += channel::bytes_for(concurrent::backward_capacity(pb_delay(s + 1, S)),
                                                      stack_type::activation_size[r.end], b, 0);
        }
        if (opt.remote != nullptr && !opt.remote->is_local(s)) continue;  // its buffers are in another process
        o.workspace_bytes = net.workspace_bytes(r, b);
        const bool predicted = predicts_forward<Policy, T>(D);
        if (sequential) {
            o.activation_slots = 1;
            o.activation_bytes = net.activation_bytes(r, b, true);
            o.weight_bytes += forward_weight_versions(D, P, predicted) * w;
        } else {
            const std::size_t slots = activation_slot_count(D), own = gradient_set_count(D, s + 1 == S);
            const external_boundaries ext = slot_boundaries(s == 0, s + 1 == S);
            o.activation_slots = slots;
            o.activation_bytes = own * net.activation_bytes(r, b, true, false, ext) +
                                 (slots - own) * net.activation_bytes(r, b, false, false, ext) + slots * targets;
            o.weight_bytes += ((predicted ? 1 : 0) + weight_stash_copies<Policy>(D)) * w;
        }
    }
    m.other_bytes = sequential ? targets : 0;
    m.evaluation_bytes = stage_inference<stack_type>::bytes_for(net, stages, opt.eval_batch);
    m.construction_bytes = stack_type::parameter_count * sizeof(T);
    return m;
}

}  // namespace pipeprop::pb
