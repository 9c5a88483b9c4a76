// pipeprop/sync/whole_network_state.hpp: the whole-network state accessors of sync::schedule_executor (a base it
// derives from): parameters, last gradient, optimizer state and step count, running state, and the stages of other
// processes, each read or written as one block in the network's layout ([Stack::parameter_count], layers in order;
// [Stack::state_count] for the running state; network_blocks.hpp) gathered from or scattered to the stages.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

#include "pipeprop/network_blocks.hpp"
#include "pipeprop/optim/sgd.hpp"

namespace pipeprop::sync::detail {

/// The accessors of Executor (which derives from this class and befriends it; its stages_ [p] hold pointers to
/// Stage, local_ [p] says which run in this process, opt_.remote is its transport or nullptr). Stack: its
/// layer_stack, T its value type, Optimizer its optimizer policy. None of them may be called during a step.
template <class Executor, class Stack, class Stage, class Optimizer, class T>
class whole_network_state {
public:
    /// The whole network's parameter block [Stack::parameter_count], gathered from the stages.
    [[nodiscard]] std::vector<T> parameters() const {
        return gather([](const Stage& s) { return s.parameters(); });
    }
    /// The same into out [Stack::parameter_count] (no allocation). Throws std::invalid_argument for a size.
    void copy_parameters(std::span<T> out) const {
        gather_network_block<Stack>(ex().stages_, out, [](const Stage& s) { return s.parameters(); }, who);
    }
    /// The last step's gradient of the mean loss, whole-network layout (what the update used: with
    /// max_gradient_norm > 0, the clipped gradient).
    [[nodiscard]] std::vector<T> gradient() const { return gather([](const Stage& s) { return s.gradient(); }); }
    /// Number of the optimizer's per-parameter state buffers (Optimizer::state_buffer_names).
    static constexpr std::size_t optimizer_buffer_count = Optimizer::state_buffer_names.size();
    /// The optimizer's state buffer k (e.g. SGD's velocity, AdamW's first or second moment), whole-network layout.
    /// Throws std::out_of_range for k >= optimizer_buffer_count.
    [[nodiscard]] std::vector<T> optimizer_state(std::size_t k) const {
        check_buffer(k);
        return gather([k](const Stage& s) { return s.optimizer().state_buffer(k); });
    }
    /// Sets the optimizer's state buffer k from a whole-network block. Throws std::out_of_range for a bad k,
    /// std::invalid_argument for a wrong size.
    void set_optimizer_state(std::size_t k, std::span<const T> v) {
        check_buffer(k);
        scatter_network_block<Stack>(v, ex().stages_, [k](Stage& s) { return s.optimizer().state_buffer(k); },
                                     "pipeprop::sync::pipeline_executor::set_optimizer_state");
    }
    /// The optimizer's step count (updates applied; AdamW's bias corrections follow it), the same on every stage
    /// (with options::remote: on every stage of this process).
    [[nodiscard]] std::uint64_t optimizer_step_count() const {
        const auto& stages = ex().stages_;
        for (std::size_t s = 0; s < stages.size(); ++s)
            if (ex().local_[s]) return stages[s]->optimizer().step_count();
        return stages.front()->optimizer().step_count();
    }
    /// Sets every stage's optimizer step count (a resumed run: sync::load_state).
    void set_optimizer_step_count(std::uint64_t n) {
        for (auto& st : ex().stages_) st->optimizer().set_step_count(n);
    }
    /// Momentum-SGD velocity, whole-network layout (optimizer_state(0) of optim::sgd).
    [[nodiscard]] std::vector<T> velocity() const
        requires std::is_same_v<Optimizer, optim::sgd<T>>
    {
        return optimizer_state(0);
    }
    /// Sets all parameters from a whole-network block. Throws std::invalid_argument for a wrong size.
    void set_parameters(std::span<const T> w) {
        ex().remote_stages_current_ = false;
        scatter_network_block<Stack>(w, ex().stages_, [](Stage& s) { return s.parameters(); },
                                     "pipeprop::sync::pipeline_executor::set_parameters");
    }
    /// The running state of the stateful layers, whole-network layout [Stack::state_count] (empty when none).
    [[nodiscard]] std::vector<T> state() const {
        std::vector<T> out(Stack::state_count);
        gather_network_state<Stack>(ex().stages_, std::span<T>(out), who);
        return out;
    }
    /// Sets the running state from a whole-network block. Throws std::invalid_argument for a wrong size.
    void set_state(std::span<const T> s) {
        scatter_network_state<Stack>(s, ex().stages_, "pipeprop::sync::pipeline_executor::set_state");
    }
    /// Sets the momentum-SGD velocity (e.g. from a checkpoint). Throws std::invalid_argument for a wrong size.
    void set_velocity(std::span<const T> v)
        requires std::is_same_v<Optimizer, optim::sgd<T>>
    {
        set_optimizer_state(0, v);
    }

    /// With options::remote, between steps: sets the parameters and running state of the stages other processes run
    /// from whole-network blocks (parameters [parameter_count], state [state_count]; e.g. gathered from every
    /// process), so that evaluate() can run here until the next step. The local stages are not changed. Throws
    /// std::logic_error without a transport, std::invalid_argument for a wrong size.
    void load_remote_stages(std::span<const T> parameters, std::span<const T> state) {
        Executor& e = ex();
        if (e.opt_.remote == nullptr)
            throw std::logic_error(std::string(who) + "::load_remote_stages: every stage runs in this process");
        if (parameters.size() != Stack::parameter_count || state.size() != Stack::state_count)
            throw std::invalid_argument(std::string(who) + "::load_remote_stages: expected " +
                                        std::to_string(Stack::parameter_count) + " parameters and " +
                                        std::to_string(Stack::state_count) + " state values");
        scatter_stage_slices<Stack>(parameters, state, e.stages_, [](Stage& s) { return s.parameters(); },
                                    [&e](std::size_t s) { return !e.local_[s]; });
        e.remote_stages_current_ = true;
    }
    /// Whether stage s runs in this process (always, without options::remote).
    [[nodiscard]] bool is_local(std::size_t s) const { return ex().local_.at(s); }

private:
    static constexpr const char* who = "pipeprop::sync::pipeline_executor";

    [[nodiscard]] Executor& ex() noexcept { return static_cast<Executor&>(*this); }
    [[nodiscard]] const Executor& ex() const noexcept { return static_cast<const Executor&>(*this); }

    void check_buffer(std::size_t k) const {
        if (k >= optimizer_buffer_count)
            throw std::out_of_range("pipeprop::sync::schedule_executor: optimizer state buffer " + std::to_string(k) +
                                    " of " + std::to_string(optimizer_buffer_count));
    }
    template <class Get>
    std::vector<T> gather(Get get) const {
        std::vector<T> all(Stack::parameter_count);
        gather_network_block<Stack>(ex().stages_, std::span<T>(all), get, who);
        return all;
    }
};

}  // namespace pipeprop::sync::detail
