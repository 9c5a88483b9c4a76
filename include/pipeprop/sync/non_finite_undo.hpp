// pipeprop/sync/non_finite_undo.hpp: the trainers' non-finite-loss policy for the synchronous schedule executor (the
// same policy as sequential_trainer::train_batch): step_or_undo and consecutive_steps_or_undo (a base of
// sync::schedule_executor), the whole-network state saved before a step and restored when a loss is NaN or infinite
// (the pipeline applies its update before the loss is known, docs/schedules.md §3), and the non_finite_loss_error
// that names the update.
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
#include "pipeprop/sync/executor_options.hpp"

namespace pipeprop::sync::detail {

/// The state of an Executor (a sync::schedule_executor over values of type T, which befriends this class) before a
/// step: parameters [parameter_count], running state [state_count] and the optimizer's buffers [parameter_count]
/// each, whole-network layout, in buffers allocated by the first save and filled in place after.
template <class Executor, class T>
class non_finite_undo {
public:
    // The state of ex before a step (or consecutive steps), in buffers allocated once (the first call) and filled in
    // place.
    void save_undo_state(const Executor& ex) {
        using stack_type = typename Executor::stack_type;
        using stage_type = typename Executor::stage_type;
        constexpr std::size_t optimizer_buffer_count = Executor::optimizer_buffer_count;
        undo_.resize(2 + optimizer_buffer_count);
        undo_[0].resize(stack_type::parameter_count);
        undo_[1].resize(stack_type::state_count);
        ex.copy_parameters(undo_[0]);
        gather_network_state<stack_type>(ex.stages_, std::span<T>(undo_[1]), Executor::who);
        for (std::size_t k = 0; k < optimizer_buffer_count; ++k) {
            undo_[2 + k].resize(stack_type::parameter_count);
            gather_network_block<stack_type>(
                ex.stages_, std::span<T>(undo_[2 + k]),
                [k](const stage_type& s) { return s.optimizer().state_buffer(k); }, Executor::who);
        }
    }
    // Restores it into ex and takes back `steps` steps' counts.
    void restore_undo_state(Executor& ex, std::size_t steps) {
        auto& stages_ = ex.stages_;
        ex.set_parameters(undo_[0]);
        for (std::size_t k = 0; k < Executor::optimizer_buffer_count; ++k) ex.set_optimizer_state(k, undo_[2 + k]);
        ex.set_state(undo_[1]);
        for (std::size_t s = 0; s < stages_.size(); ++s)  // the stages of other processes made no steps here
            if (ex.local_[s]) stages_[s]->optimizer().set_step_count(stages_[s]->optimizer().step_count() - steps);
        ex.steps_ -= steps;
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
    std::vector<std::vector<T>> undo_;  // step_or_undo: parameters, running state, optimizer buffers before the step
};

/// step_or_undo and consecutive_steps_or_undo of Executor (which derives from this class and befriends it; its
/// step(), consecutive_steps(), batch_view = step_batch<T> and steps_, the updates made so far).
template <class Executor, class T>
class non_finite_steps {
public:
    /// step() with the trainers' non-finite-loss policy (as sequential_trainer::train_batch): when the batch's loss is
    /// NaN or infinite, the parameters, optimizer state and running state of before the step are restored and
    /// non_finite_loss_error is thrown, naming the step, `samples_seen` (the caller's count before this batch) and the
    /// learning rate. Otherwise as step().
    step_result step_or_undo(std::span<const T> x, std::span<const std::int32_t> labels,
                             const optim::hyperparameters<double>& h, std::uint64_t samples_seen) {
        Executor& ex = static_cast<Executor&>(*this);
        const std::uint64_t step_number = ex.steps_;
        undo_.save_undo_state(ex);
        const step_result r = ex.step(x, labels, h);
        if (!std::isfinite(r.loss)) {
            undo_.restore_undo_state(ex, 1);
            undo_type::throw_non_finite(r.loss, step_number, samples_seen, h);
        }
        return r;
    }

    /// consecutive_steps() with the same policy: when step n's loss is NaN or infinite, the state of before the call
    /// is restored, the steps before n run again one at a time (step(), bit-identical to their consecutive run) and
    /// non_finite_loss_error is thrown for step n, so the executor ends where step_or_undo on each batch in turn
    /// would. samples_seen: the caller's count before the first batch. Otherwise as consecutive_steps().
    std::vector<step_result> consecutive_steps_or_undo(std::span<const step_batch<T>> batches,
                                                       std::uint64_t samples_seen) {
        Executor& ex = static_cast<Executor&>(*this);
        undo_.save_undo_state(ex);
        const std::uint64_t first = ex.steps_;
        auto r = ex.consecutive_steps(batches);
        for (std::size_t n = 0; n < r.size(); ++n)
            if (!std::isfinite(r[n].loss)) {
                undo_.restore_undo_state(ex, r.size());
                std::vector<step_result> before;
                for (std::size_t i = 0; i < n; ++i)
                    before.push_back(ex.step(batches[i].x, batches[i].labels, batches[i].h));
                undo_type::throw_non_finite(r[n].loss, first + n, samples_seen + n * r[0].batch, batches[n].h);
            }
        return r;
    }

private:
    using undo_type = non_finite_undo<Executor, T>;
    undo_type undo_;  // the state before the step
};

}  // namespace pipeprop::sync::detail
