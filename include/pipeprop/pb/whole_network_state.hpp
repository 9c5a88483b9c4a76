// pipeprop/pb/whole_network_state.hpp: the whole-network state accessors of pb::engine (a base it derives from):
// weights, velocities and optimizer state copied out as one block in the network's layout ([Stack::parameter_count],
// layers in order; network_blocks.hpp), weights loaded from one, the stages of other processes loaded, and the access
// a checkpoint load needs (pb/checkpoint.hpp). All need a drained or at least usable engine (docs/pb-semantics.md §1
// drained points, §8 failures).
#pragma once

#include <cstddef>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include "pipeprop/network_blocks.hpp"

namespace pipeprop::pb::detail {

/// The accessors of Engine (which derives from this class and befriends it; its stages_ [S] of Stage, options_,
/// executor_, counters and require_usable / require_drained). Stack: its layer_stack, T its value type, Optimizer its
/// optimizer policy.
template <class Engine, class Stack, class Stage, class Optimizer, class T>
class whole_network_state {
public:
    /// Copies the network's parameter block [Stack::parameter_count] (all stages' current weights, layers in order)
    /// into out. Throws std::invalid_argument for a wrong size, std::logic_error once the engine failed.
    void copy_parameters(std::span<T> out) const {
        ex().require_usable("copy_parameters");
        gather_network_block<Stack>(ex().stages_, out, [](const Stage& st) { return st.weights(); }, who);
    }
    /// Same for the momentum velocities (AdamW: the first moments).
    void copy_velocities(std::span<T> out) const {
        ex().require_usable("copy_velocities");
        gather_network_block<Stack>(ex().stages_, out, [](const Stage& st) { return st.velocity(); }, who);
    }
    /// Same for buffer k of the optimizer's state (Optimizer::state_buffer_names[k]: SGD velocity; AdamW first and
    /// second moment). Throws std::out_of_range for k >= the number of buffers, std::invalid_argument for a size.
    void copy_optimizer_state(std::size_t k, std::span<T> out) const {
        ex().require_usable("copy_optimizer_state");
        if (k >= Optimizer::state_buffer_names.size())
            throw std::out_of_range("pipeprop::pb::engine::copy_optimizer_state: buffer " + std::to_string(k) + " of " +
                                    std::to_string(Optimizer::state_buffer_names.size()));
        gather_network_block<Stack>(ex().stages_, out, [k](const Stage& st) { return st.optimizer_state(k); }, who);
    }
    /// Replaces every stage's weights with slices of a network parameter block [parameter_count] (e.g. an SGD
    /// checkpoint); velocities and policy state are left as they are. Throws std::logic_error when micro-batches
    /// are in flight, std::invalid_argument for a wrong size.
    void load_parameters(std::span<const T> block) {
        Engine& e = ex();
        e.require_usable("load_parameters");
        e.require_drained("load_parameters");
        e.remote_stages_current_ = false;
        scatter_network_block<Stack>(block, e.stages_, [](Stage& st) { return st.weights(); },
                                     "pipeprop::pb::engine::load_parameters");
        for (Stage& st : e.stages_) st.restore(st.updates(), st.last_learning_rate());
        e.executor_->resynchronize();
    }

    /// With options::remote, after a drain: sets the weights and running state of the stages other processes run
    /// from whole-network blocks (parameters [parameter_count], state [state_count]; e.g. gathered from every
    /// process), so that evaluate() can run here until the next push. The local stages are not changed (their slices
    /// are not read). Throws std::logic_error without a transport or with micro-batches in flight,
    /// std::invalid_argument for a wrong size.
    void load_remote_stages(std::span<const T> parameters, std::span<const T> state) {
        Engine& e = ex();
        e.require_usable("load_remote_stages");
        e.require_drained("load_remote_stages");
        if (e.options_.remote == nullptr)
            throw std::logic_error("pipeprop::pb::engine::load_remote_stages: every stage runs in this process");
        if (parameters.size() != Stack::parameter_count || state.size() != Stack::state_count)
            throw std::invalid_argument("pipeprop::pb::engine::load_remote_stages: expected " +
                                        std::to_string(Stack::parameter_count) + " parameters and " +
                                        std::to_string(Stack::state_count) + " state values, got " +
                                        std::to_string(parameters.size()) + " and " + std::to_string(state.size()));
        scatter_stage_slices<Stack>(parameters, state, e.stages_, [](Stage& st) { return st.weights(); },
                                    [&e](std::size_t s) { return !e.options_.remote->is_local(s); });
        e.remote_stages_current_ = true;
    }

    // --- state access for checkpoints (pb/checkpoint.hpp) -------------------------------------------------------
    /// The stages (weights, velocity, policy buffers are written through their spans by a checkpoint load).
    [[nodiscard]] std::vector<Stage>& stages() noexcept { return ex().stages_; }
    [[nodiscard]] const std::vector<Stage>& stages() const noexcept { return ex().stages_; }
    /// After a checkpoint load at a drained point: sets the counters (next micro-batch index, samples pushed) and
    /// every stage's scalar state, then lets the executor rebuild what it derives from the state. Throws
    /// std::logic_error when micro-batches are in flight.
    void restore_counters(std::size_t micro_batches, std::size_t samples, std::span<const T> last_learning_rates) {
        Engine& e = ex();
        e.require_usable("restore_counters");
        e.require_drained("restore_counters");
        e.next_id_ = micro_batches;
        e.samples_pushed_ = samples;
        for (std::size_t s = 0; s < e.stages_.size(); ++s) e.stages_[s].restore(micro_batches, last_learning_rates[s]);
        e.executor_->resynchronize();
    }

private:
    static constexpr const char* who = "pipeprop::pb::engine";

    [[nodiscard]] Engine& ex() noexcept { return static_cast<Engine&>(*this); }
    [[nodiscard]] const Engine& ex() const noexcept { return static_cast<const Engine&>(*this); }
};

}  // namespace pipeprop::pb::detail
