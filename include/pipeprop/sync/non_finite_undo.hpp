// pipeprop/sync/non_finite_undo.hpp: the trainers' non-finite-loss policy for the synchronous schedule executor
// (sync/schedule_executor.hpp: step_or_undo, consecutive_steps_or_undo; the same policy as
// sequential_trainer::train_batch): the whole-network state saved before a step, restored when the step's loss is NaN
// or infinite (the pipeline applies its update before the loss is known, docs/schedules.md §3), and the
// non_finite_loss_error that names the update.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "pipeprop/network_blocks.hpp"
#include "pipeprop/non_finite_loss_error.hpp"
#include "pipeprop/optim/hyperparameters.hpp"

namespace pipeprop::sync::detail {

/// The state of Executor (a sync::schedule_executor over values of type T, which befriends it) before a step:
/// parameters [parameter_count], running state [state_count] and the optimizer's buffers [parameter_count] each,
/// whole-network layout, in buffers allocated by the first save() and filled in place after.
template <class Executor, class T>
class non_finite_undo {
public:
    explicit non_finite_undo(Executor& ex) noexcept : ex_(ex) {}

    // The state before a step (or consecutive steps), in buffers allocated once (the first call) and filled in place.
    void save_undo_state() {
        using stack_type = typename Executor::stack_type;
        using stage_type = typename Executor::stage_type;
        constexpr std::size_t optimizer_buffer_count = Executor::optimizer_buffer_count;
        undo_.resize(2 + optimizer_buffer_count);
        undo_[0].resize(stack_type::parameter_count);
        undo_[1].resize(stack_type::state_count);
        ex_.copy_parameters(undo_[0]);
        gather_network_state<stack_type>(ex_.stages_, std::span<T>(undo_[1]), Executor::who);
        for (std::size_t k = 0; k < optimizer_buffer_count; ++k) {
            undo_[2 + k].resize(stack_type::parameter_count);
            gather_network_block<stack_type>(
                ex_.stages_, std::span<T>(undo_[2 + k]),
                [k](const stage_type& s) { return s.optimizer().state_buffer(k); }, Executor::who);
        }
    }
    // Restores it and takes back `steps` steps' counts.
    void restore_undo_state(std::size_t steps) {
        auto& stages_ = ex_.stages_;
        ex_.set_parameters(undo_[0]);
        for (std::size_t k = 0; k < Executor::optimizer_buffer_count; ++k) ex_.set_optimizer_state(k, undo_[2 + k]);
        ex_.set_state(undo_[1]);
        for (std::size_t s = 0; s < stages_.size(); ++s)  // the stages of other processes made no steps here
            if (ex_.local_[s]) stages_[s]->optimizer().set_step_count(stages_[s]->optimizer().step_count() - steps);
        ex_.steps_ -= steps;
    }
    /// Throws non_finite_loss_error for a NaN or infinite loss at update step_number (after samples_seen samples,
    /// learning rate of h).
    [[noreturn]] static void throw_non_finite(double loss, std::uint64_t step_number, std::uint64_t samples_seen,
                                              const optim::hyperparameters<double>& h) {
        throw non_finite_loss_error("pipeprop::sync: the loss became " +
                                        std::string(std::isnan(loss) ? "NaN" : "infinite") + " at update " +
                                        std::to_string(step_number) + " (after " + std::to_string(samples_seen) +
                                        " samples, learning rate " + std::to_string(h.learning_rate) +
                                        "); the update was undone. Lower the learning rate or check the data.",
                                    step_number, samples_seen);
    }

private:
    Executor& ex_;
    std::vector<std::vector<T>> undo_;  // step_or_undo: parameters, running state, optimizer buffers before the step
};

}  // namespace pipeprop::sync::detail
