// pipeprop/sync/trainer.hpp: a synchronous pipeline (sync::schedule_executor: GPipe, 1F1B, zero-bubble, ... with or
// without 2BP) as a pipeprop::trainer (trainer_concept.hpp): one optimizer step per batch at a learning-rate
// schedule's rate, the non-finite-loss policy of the sequential trainer (undo and throw), checkpoints in the trainers'
// layout (sync/checkpoint.hpp), so they move freely between this trainer and pipeprop::sequential_trainer.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "pipeprop/optim/lr_schedule.hpp"
#include "pipeprop/sync/any_executor.hpp"
#include "pipeprop/sync/checkpoint.hpp"
#include "pipeprop/trainer_concept.hpp"

namespace pipeprop::sync {

/// schedule_executor<Net, T, Loss, Optimizer> running schedule `kind` (2BP on or off, both chosen at run time) with a
/// learning-rate schedule (in samples seen), a momentum and a weight decay. Satisfies pipeprop::trainer. Throws as
/// the executor's constructor and the schedule's validate().
template <network_type Net, class T = float, class Loss = pipeprop::detail::default_loss_t<Net, T>,
          class Optimizer = optim::sgd<T>>
class trainer {
public:
    /// The executor the trainer drives: schedule_executor, its schedule and 2BP flag chosen at run time.
    using executor_type = any_executor<Net, T, Loss, Optimizer>;
    using value_type = T;  ///< The value type of parameters and inputs (float or double).
    using stack_type = layer_stack<Net, T>;  ///< The network's layers (layer_stack<Net, T>).
    ///@{
    /// Per-sample elements of x (the network's input shape) and int32 targets per sample (1: a class label; L: a
    /// sequence's next tokens): train_batch reads x [b, input_size] and targets [b, targets_per_sample].
    static constexpr std::size_t input_size = stack_type::input_shape::size;
    static constexpr std::size_t targets_per_sample = Loss::targets_per_sample;
    ///@}

    /// Schedule `kind` over the stage cut `stages`, with the executor options `opt` (micro-batches m, max_batch,
    /// executor kind, seed of the initial weights, ...), the learning rate per mean-loss gradient of the batch as a
    /// schedule, the momentum and the weight decay of every step.
    trainer(schedule_kind kind, bool two_stage_bp, std::vector<layer_range> stages,
            const typename executor_type::options_type& opt, optim::lr_schedule schedule, double momentum,
            double weight_decay = 0.0)
        : executor_(make_any_executor<Net, T, Loss, Optimizer>(kind, two_stage_bp, std::move(stages), opt)),
          schedule_(schedule),
          momentum_(momentum),
          weight_decay_(weight_decay),
          seed_(opt.seed) {
        schedule_.validate();
    }

    /// One optimizer step on the batch x [b, input_size], targets [b, targets_per_sample] (split into the options'
    /// micro-batches) at current_hyperparameters(); returns the batch's mean loss per counted target (nats).
    /// Throws as schedule_executor::step_or_undo (non_finite_loss_error with the state of before the step).
    double train_batch(const T* x, const std::int32_t* targets, std::size_t b) {
        const auto r = executor_->step_or_undo(std::span<const T>(x, b * input_size),
                                               std::span<const std::int32_t>(targets, b * targets_per_sample),
                                               current_hyperparameters(), samples_seen_);
        samples_seen_ += b;
        return static_cast<double>(r.loss);
    }
    /// Nothing is in flight between steps: returns 0.
    double drain() noexcept { return 0.0; }
    /// Mean loss and accuracy of the current weights on n samples (schedule_executor::evaluate).
    evaluation evaluate(const T* x, const std::int32_t* targets, std::size_t n) {
        return executor_->evaluate(std::span<const T>(x, n * input_size),
                                   std::span<const std::int32_t>(targets, n * targets_per_sample));
    }
    /// The state in the trainers' layout (sync::save_state, with this trainer's samples seen and seed).
    void save_state(checkpoint& c) const { sync::save_state(*executor_, c, samples_seen_, seed_); }
    /// Restores a checkpoint of this trainer or of pipeprop::sequential_trainer with the same optimizer (any cut,
    /// schedule or micro-batch count). Throws checkpoint_error naming `where` before anything changes.
    void load_state(const checkpoint& c, const std::string& where = "checkpoint") {
        samples_seen_ = sync::load_state(c, *executor_, where).samples_seen;
    }
    /// Samples trained on since the start of the run (a checkpoint's included).
    [[nodiscard]] std::uint64_t samples_seen() const noexcept { return samples_seen_; }
    /// The schedule's learning rate for the next step.
    [[nodiscard]] double current_learning_rate() const { return schedule_(samples_seen_); }
    /// The next step's hyperparameters: the schedule's learning rate, the momentum and the weight decay.
    [[nodiscard]] optim::hyperparameters<double> current_hyperparameters() const {
        return {.learning_rate = current_learning_rate(), .momentum = momentum_, .weight_decay = weight_decay_};
    }

    ///@{
    /// The executor (stages, spans of the last step, remote stages).
    [[nodiscard]] executor_type& executor() noexcept { return *executor_; }
    [[nodiscard]] const executor_type& executor() const noexcept { return *executor_; }
    ///@}

private:
    std::unique_ptr<executor_type> executor_;
    optim::lr_schedule schedule_;
    double momentum_, weight_decay_;
    std::uint64_t seed_;
    std::uint64_t samples_seen_ = 0;
};

}  // namespace pipeprop::sync
