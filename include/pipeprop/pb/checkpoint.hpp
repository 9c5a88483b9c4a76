// pipeprop/pb/checkpoint.hpp: saving and restoring a PB engine at a drained point through pipeprop's checkpoint
// format (pipeprop/checkpoint.hpp: a directory of .npy files plus a manifest, written atomically).
//
// At a drained point (every pushed micro-batch completed: docs/pb-semantics.md §1) the state of a PB run is: every
// stage's weights, velocity and policy buffers, each stage's last learning rate (LWP velocity form) and the
// counters (micro-batches and samples pushed). The forward-weight history of the sequential executor and the
// predicted weights of the concurrent one are derived from that state, so they are rebuilt on load. Resuming from
// such a checkpoint gives bit-identically the run that did not stop (tests/unit/test_pb_checkpoint.cpp).
//
// Tensors are stored per LAYER, not per stage (names independent of the cut; the same names as the sequential
// trainer's, so its checkpoints and PB's share the weights and velocity):
//   layer_XX.<tensor>                   weights
//   layer_XX.<tensor>.velocity          momentum velocity (AdamW: .first_moment and .second_moment)
//   layer_XX.<tensor>.pb_last_step      LWP weight-difference form: w(k) - w(k-1)
//   layer_XX.<tensor>.pb_discrepancy    PipeMare: delta
//   layer_XX.<tensor>.pb_previous       PipeDream-2BW: the older weight version W(j - 1)
//   layer_XX.<tensor>.pb_accumulated    PipeDream-2BW: the gradient summed so far in the current batch
//   <node>.<state tensor>               running state of stateful layers (Online Normalization)
// Scalars: pb_format (1), pb_policy, pb_stages ("b0-e0,b1-e1,..."), pb_micro_batches, pb_samples,
// pb_stage_<s>_last_learning_rate, pb_stage_<s>_last_weight_decay (optimizer-aware LWP: its AdamW prediction uses
// it; NAdam's momentum product follows from the step count), and optimizer / step_count / samples_seen / init_seed.
// The weights, optimizer state,
// running state and those last four are written and read by the trainers' one layout (checkpoint/training_state.hpp),
// so PB, the sequential trainer and the synchronous executors read each other's weights.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <span>
#include <string>
#include <vector>

#include "pipeprop/checkpoint.hpp"
#include "pipeprop/checkpoint/training_state.hpp"
#include "pipeprop/network_blocks.hpp"
#include "pipeprop/pb/engine.hpp"

namespace pipeprop::pb {

namespace detail {
inline std::string stages_text(const std::vector<layer_range>& ranges) {
    std::string s;
    for (const layer_range& r : ranges) {
        if (!s.empty()) s += ',';
        s += std::to_string(r.begin) + "-" + std::to_string(r.end);
    }
    return s;
}
inline std::string stage_scalar(std::size_t s, const char* what) {
    std::string idx = std::to_string(s);
    if (idx.size() < 2) idx.insert(0, 2 - idx.size(), '0');
    return "pb_stage_" + idx + "_" + what;
}
}  // namespace detail

/// Adds the state of engine e (any pb::engine / pb::pipeline) to checkpoint c (see the file comment). Throws
/// std::logic_error when micro-batches are in flight (drain() first) or the engine failed (engine::failed()),
/// checkpoint_error on a name clash.
template <network_type Net, mitigation_policy Policy, class T, class Loss, class Optimizer>
void save_state(const engine<Net, Policy, T, Loss, Optimizer>& e, checkpoint& c) {
    using stack = layer_stack<Net, T>;
    e.require_usable("save_state");
    if (e.in_flight() != 0)
        throw std::logic_error("pipeprop::pb::save_state: " + std::to_string(e.in_flight()) +
                               " micro-batches are in flight; a PB checkpoint is taken at a drained point (drain())");
    // The stages' slices of a per-parameter buffer, gathered into the network's block layout.
    auto gathered = [&](auto field) {
        std::vector<T> block(stack::parameter_count);
        gather_network_block<stack>(e.stages(), std::span<T>(block), field, "pipeprop::pb::save_state");
        return block;
    };
    const std::vector<T> weights = gathered([](const auto& st) { return st.weights(); });
    std::vector<std::vector<T>> optimizer_state;
    for (std::size_t k = 0; k < Optimizer::state_buffer_names.size(); ++k)
        optimizer_state.push_back(gathered([k](const auto& st) { return st.optimizer_state(k); }));
    std::vector<T> state(stack::state_count);
    gather_network_state<stack>(e.stages(), std::span<T>(state), "pipeprop::pb::save_state");
    // The trainers' layout (checkpoint/training_state.hpp), then PB's own buffers and scalars.
    add_training_state<Net, Optimizer, T>(c, std::span<const T>(weights),
                                          std::vector<std::span<const T>>(optimizer_state.begin(),
                                                                          optimizer_state.end()),
                                          std::span<const T>(state), e.micro_batches_pushed(), e.samples_pushed(),
                                          e.engine_options().seed);
    if constexpr (Policy::predicts_weights && Policy::form == lwp_form::weight_difference)
        add_network_tensors<Net, T>(c, std::span<const T>(gathered([](const auto& st) { return st.last_step(); })),
                                    "pb_last_step");
    if constexpr (Policy::corrects_discrepancy)
        add_network_tensors<Net, T>(c, std::span<const T>(gathered([](const auto& st) { return st.discrepancy(); })),
                                    "pb_discrepancy");
    if constexpr (Policy::double_buffered) {
        add_network_tensors<Net, T>(
            c, std::span<const T>(gathered([](const auto& st) { return st.previous_weights(); })), "pb_previous");
        add_network_tensors<Net, T>(c, std::span<const T>(gathered([](const auto& st) { return st.gradient(); })),
                                    "pb_accumulated");
    }
    c.set_scalar("pb_format", 1);
    c.set_scalar("pb_policy", std::string(Policy::name));
    c.set_scalar("pb_stages", detail::stages_text(e.stage_ranges()));
    c.set_scalar("pb_micro_batches", static_cast<std::uint64_t>(e.micro_batches_pushed()));
    c.set_scalar("pb_samples", static_cast<std::uint64_t>(e.samples_pushed()));
    for (std::size_t s = 0; s < e.stages().size(); ++s)
        c.set_scalar(detail::stage_scalar(s, "last_learning_rate"), e.stages()[s].last_learning_rate());
    if constexpr (Policy::predicts_weights && Policy::form == lwp_form::optimizer_step)
        for (std::size_t s = 0; s < e.stages().size(); ++s)
            c.set_scalar(detail::stage_scalar(s, "last_weight_decay"), e.stages()[s].last_weight_decay());
}

/// Restores engine e from checkpoint c (written by save_state for the same network, policy, optimizer and
/// partition). All-or-nothing: everything is read and checked before e changes. Throws checkpoint_error naming
/// `where` and the first problem (other network, other policy, optimizer or partition, missing tensor or scalar),
/// std::logic_error when micro-batches are in flight.
template <network_type Net, mitigation_policy Policy, class T, class Loss, class Optimizer>
void load_state(engine<Net, Policy, T, Loss, Optimizer>& e, const checkpoint& c,
                const std::string& where = "checkpoint") {
    using stack = layer_stack<Net, T>;
    e.require_usable("load_state");
    if (e.in_flight() != 0)
        throw std::logic_error("pipeprop::pb::load_state: " + std::to_string(e.in_flight()) +
                               " micro-batches are in flight; drain() first");
    require_signature(c, signature_of<Net, T>(), where);
    if (!c.has_scalar("pb_format")) throw checkpoint_error(where + ": not a PB checkpoint (no pb_format scalar)");
    if (c.scalar_as<int>("pb_format") != 1)
        throw checkpoint_error(where + ": unsupported PB checkpoint format " + c.scalar("pb_format"));
    if (c.scalar("pb_policy") != Policy::name)
        throw checkpoint_error(where + ": made with mitigation policy '" + c.scalar("pb_policy") +
                               "', this pipeline uses '" + std::string(Policy::name) + "'");
    if (c.scalar("pb_stages") != detail::stages_text(e.stage_ranges()))
        throw checkpoint_error(where + ": made for stages " + c.scalar("pb_stages") + ", this pipeline has " +
                               detail::stages_text(e.stage_ranges()));
    const training_state<T> ts = read_training_state<Net, Optimizer, T>(c, where);
    std::vector<T> step, delta, previous, accumulated;
    if constexpr (Policy::predicts_weights && Policy::form == lwp_form::weight_difference) {
        step.resize(stack::parameter_count);
        read_network_tensors<Net, T>(c, std::span<T>(step), "pb_last_step");
    }
    if constexpr (Policy::corrects_discrepancy) {
        delta.resize(stack::parameter_count);
        read_network_tensors<Net, T>(c, std::span<T>(delta), "pb_discrepancy");
    }
    if constexpr (Policy::double_buffered) {
        previous.resize(stack::parameter_count);
        accumulated.resize(stack::parameter_count);
        read_network_tensors<Net, T>(c, std::span<T>(previous), "pb_previous");
        read_network_tensors<Net, T>(c, std::span<T>(accumulated), "pb_accumulated");
    }
    const auto micro_batches = c.scalar_as<std::uint64_t>("pb_micro_batches");
    const auto samples = c.scalar_as<std::uint64_t>("pb_samples");
    std::vector<T> last_lr(e.stages().size());
    for (std::size_t s = 0; s < last_lr.size(); ++s)
        last_lr[s] = c.scalar_as<T>(detail::stage_scalar(s, "last_learning_rate"));
    std::vector<T> last_wd(e.stages().size());
    if constexpr (Policy::predicts_weights && Policy::form == lwp_form::optimizer_step)
        for (std::size_t s = 0; s < last_wd.size(); ++s)
            last_wd[s] = c.scalar_as<T>(detail::stage_scalar(s, "last_weight_decay"));

    constexpr const char* who = "pipeprop::pb::load_state";
    auto& stages = e.stages();
    scatter_network_block<stack>(std::span<const T>(ts.parameters), stages, [](auto& st) { return st.weights(); },
                                 who);
    for (std::size_t k = 0; k < ts.optimizer_state.size(); ++k)
        scatter_network_block<stack>(std::span<const T>(ts.optimizer_state[k]), stages,
                                     [k](auto& st) { return st.optimizer_state(k); }, who);
    if (!step.empty())
        scatter_network_block<stack>(std::span<const T>(step), stages, [](auto& st) { return st.last_step(); }, who);
    if (!delta.empty())
        scatter_network_block<stack>(std::span<const T>(delta), stages, [](auto& st) { return st.discrepancy(); },
                                     who);
    if (!previous.empty()) {
        scatter_network_block<stack>(std::span<const T>(previous), stages,
                                     [](auto& st) { return st.previous_weights(); }, who);
        scatter_network_block<stack>(std::span<const T>(accumulated), stages, [](auto& st) { return st.gradient(); },
                                     who);
    }
    scatter_network_state<stack>(std::span<const T>(ts.state), stages, who);
    for (std::size_t s = 0; s < stages.size(); ++s) stages[s].set_last_weight_decay(last_wd[s]);
    e.restore_counters(static_cast<std::size_t>(micro_batches), static_cast<std::size_t>(samples), last_lr);
}

/// save_state into a new checkpoint, written atomically to directory `dir` (pipeprop::save_checkpoint).
template <network_type Net, mitigation_policy Policy, class T, class Loss, class Optimizer>
void save_checkpoint(const engine<Net, Policy, T, Loss, Optimizer>& e, const std::filesystem::path& dir) {
    checkpoint c;
    save_state(e, c);
    pipeprop::save_checkpoint(c, dir);
}

/// Loads directory `dir` (pipeprop::load_checkpoint) and restores e from it (load_state).
template <network_type Net, mitigation_policy Policy, class T, class Loss, class Optimizer>
void load_checkpoint(engine<Net, Policy, T, Loss, Optimizer>& e, const std::filesystem::path& dir) {
    load_state(e, pipeprop::load_checkpoint(dir), dir.string());
}

}  // namespace pipeprop::pb
