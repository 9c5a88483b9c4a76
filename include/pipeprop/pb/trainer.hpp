// pipeprop/pb/trainer.hpp: a Pipelined Backpropagation engine as a pipeprop::trainer (trainer_concept.hpp): the
// learning-rate schedule applied per micro-batch, the losses of completed micro-batches added up, checkpoints through
// pb/checkpoint.hpp. What a training loop needs around pb::engine, so that it drives PB, the sequential trainer and a
// synchronous schedule alike (docs/pb-semantics.md §1 for when a micro-batch completes).
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "pipeprop/checkpoint/network_tensors.hpp"
#include "pipeprop/optim/lr_schedule.hpp"
#include "pipeprop/pb/checkpoint.hpp"
#include "pipeprop/pb/engine.hpp"
#include "pipeprop/trainer_concept.hpp"

namespace pipeprop::pb {

/// Loss totals of the micro-batches completed so far (their backward reached the first stage).
struct completed_losses {
    double loss_times_targets = 0.0;  ///< sum of each micro-batch's mean loss times its counted targets (nats)
    std::uint64_t targets = 0;        ///< counted targets of the completed micro-batches
    std::uint64_t samples = 0;        ///< samples of the completed micro-batches
    /// Mean loss per counted target (0 when none completed).
    [[nodiscard]] double mean() const noexcept { return targets > 0 ? loss_times_targets / double(targets) : 0.0; }
};

/// pb::engine<Net, Policy, T, Loss, Optimizer> with a learning-rate schedule (in samples pushed), a momentum and a
/// weight decay: every train_batch pushes one micro-batch at the schedule's learning rate of the samples pushed
/// before it. Satisfies pipeprop::trainer. Throws as pb::engine's constructor and the schedule's validate().
template <network_type Net, mitigation_policy Policy, class T = float,
          class Loss = pipeprop::detail::default_loss_t<Net, T>, class Optimizer = optim::sgd<T>>
class trainer {
public:
    using engine_type = pb::engine<Net, Policy, T, Loss, Optimizer>;  ///< The PB engine the trainer drives.
    using value_type = T;  ///< The value type of weights and inputs (float or double).
    using stack_type = typename engine_type::stack_type;  ///< The network's layers (layer_stack<Net, T>).
    /// The stages' code, one stage_program per stage in order (stage_program.hpp).
    using programs_type = std::vector<stage_program<stack_type>>;
    ///@{
    /// Per-sample elements of x and int32 targets per sample (1: a class label; L: a sequence's next tokens), as
    /// pb::engine's: train_batch reads x [b, input_size] and targets [b, targets_per_sample].
    static constexpr std::size_t input_size = engine_type::input_size;
    static constexpr std::size_t targets_per_sample = engine_type::targets_per_sample;
    ///@}

    /// The stages' code `programs` (static_stage_programs<Layout>() or dynamic_stage_programs of a cut), the engine's
    /// options, the schedule of the learning rate per mean-loss gradient (already scaled to the micro-batch size:
    /// optim::scale_hyperparameters), the momentum and the weight decay of every update.
    trainer(programs_type programs, const typename engine_type::options_type& opt, optim::lr_schedule schedule,
            double momentum, double weight_decay = 0.0)
        : engine_(std::move(programs), opt), schedule_(schedule), momentum_(momentum), weight_decay_(weight_decay) {
        schedule_.validate();
    }
    /// As above, for the stage cut `stages` (layer ranges).
    trainer(std::vector<layer_range> stages, const typename engine_type::options_type& opt,
            optim::lr_schedule schedule, double momentum, double weight_decay = 0.0)
        : engine_(std::move(stages), opt), schedule_(schedule), momentum_(momentum), weight_decay_(weight_decay) {
        schedule_.validate();
    }

    /// Pushes the micro-batch x [b, input_size], targets [b, targets_per_sample] at current_learning_rate(); returns
    /// the losses of the micro-batches completed during the call, summed weighted by their samples, divided by b
    /// (trainer_concept.hpp). Throws as pb::engine::push and set_hyperparameters.
    double train_batch(const T* x, const std::int32_t* targets, std::size_t b) {
        engine_.set_hyperparameters({.learning_rate = static_cast<T>(current_learning_rate()),
                                     .momentum = static_cast<T>(momentum_),
                                     .weight_decay = static_cast<T>(weight_decay_)});
        return take(engine_.push({x, b * input_size}, {targets, b * targets_per_sample}, b)) / static_cast<double>(b);
    }
    /// Completes every micro-batch in flight (pb::engine::drain); returns their losses summed weighted by samples.
    double drain() { return take(engine_.drain()); }
    /// Mean loss and accuracy of the current weights on n samples (pb::engine::evaluate; only when drained).
    evaluation evaluate(const T* x, const std::int32_t* targets, std::size_t n) {
        return engine_.evaluate({x, n * input_size}, {targets, n * targets_per_sample}, n);
    }
    /// The engine's state (pb::save_state; only when drained).
    void save_state(checkpoint& c) const { pb::save_state(engine_, c); }
    /// Restores a PB checkpoint of the same network, policy, optimizer and cut completely (pb::load_state); from a
    /// checkpoint of another trainer (sequential or synchronous: no pb_format scalar) only the weights and the
    /// samples seen, with zero optimizer state (its velocity belongs to another batch size). Throws
    /// checkpoint_error naming `where` before anything changes.
    void load_state(const checkpoint& c, const std::string& where = "checkpoint") {
        if (c.has_scalar("pb_format")) {
            pb::load_state(engine_, c, where);
            return;
        }
        require_signature(c, signature_of<Net, T>(), where);
        std::vector<T> w(stack_type::parameter_count);
        read_network_tensors<Net, T>(c, std::span<T>(w));
        const auto seen = c.scalar_as<std::uint64_t>("samples_seen");
        engine_.load_parameters(w);
        const std::vector<T> no_learning_rate(engine_.number_of_stages(), T(0));
        engine_.restore_counters(0, static_cast<std::size_t>(seen), no_learning_rate);
    }
    /// Samples pushed since the start of the run (a checkpoint's included).
    [[nodiscard]] std::uint64_t samples_seen() const noexcept { return engine_.samples_pushed(); }
    /// The schedule's learning rate for the next micro-batch.
    [[nodiscard]] double current_learning_rate() const { return schedule_(engine_.samples_pushed()); }
    /// Loss totals of every micro-batch completed since construction (not restored from checkpoints).
    [[nodiscard]] const completed_losses& completed() const noexcept { return completed_; }

    ///@{
    /// The engine (its stages, counters, statistics).
    [[nodiscard]] engine_type& pipeline_engine() noexcept { return engine_; }
    [[nodiscard]] const engine_type& pipeline_engine() const noexcept { return engine_; }
    ///@}

private:
    double take(std::span<const completed_micro_batch<T>> done) {
        double sum = 0.0;
        for (const auto& c : done) {
            sum += static_cast<double>(c.loss) * static_cast<double>(c.batch);
            completed_.loss_times_targets += static_cast<double>(c.loss) * static_cast<double>(c.targets);
            completed_.targets += c.targets;
            completed_.samples += c.batch;
        }
        return sum;
    }

    engine_type engine_;
    optim::lr_schedule schedule_;
    double momentum_, weight_decay_;
    completed_losses completed_;
};

}  // namespace pipeprop::pb
