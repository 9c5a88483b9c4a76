// pipeprop/sequential_trainer.hpp: the sequential (non-pipelined) reference trainer: mini-batch training of the
// whole network, one batch at a time, driven by the caller's loop, with the loss and the optimizer as policies:
// Loss a loss policy (loss/loss_policy.hpp; default softmax cross-entropy over the output
// classes, or token_cross_entropy for a sequence model), Optimizer an optimizer policy (optim/optimizer_policy.hpp;
// default momentum SGD, or optim::adamw).
//
// Per train_batch call with a batch of b samples (docs/pb-semantics.md §2; docs/schedules.md §3):
//   forward over all layers; N = Loss::count_targets(targets, b) (b for a classifier, the non-ignored tokens of a
//   token loss); loss = mean over those N targets; its gradient (gradient_scale 1 / N); fused backward (p1 + p2 per
//   layer) into a zeroed gradient block; one optimizer step with the hyperparameters (optim/hyperparameters.hpp) of
//   the update: the learning rate lr(t) of the schedule at t = samples consumed before this batch and the config's
//   momentum and weight decay, or those the caller passes for this batch.
// This is the reference every pipeline executor is compared with, so its arithmetic is kept plain and fixed: the
// same inputs give bit-identical results (no threads, fixed summation order). At b = 1 with momentum SGD the update
// is applied in the backward, layer by layer (layer_stack::backward_momentum_update with update_unfused): a layer
// that can (dense_layer) without storing its gradient, the others from their gradient while it is in cache; the
// same bits as the backward followed by the optimizer step, with one pass over the gradient block fewer.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <span>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "pipeprop/check_policies.hpp"
#include "pipeprop/checkpoint/content.hpp"
#include "pipeprop/checkpoint/network_tensors.hpp"
#include "pipeprop/checkpoint/training_state.hpp"
#include "pipeprop/layer_stack.hpp"
#include "pipeprop/loss/default_loss.hpp"
#include "pipeprop/loss/loss_policy.hpp"
#include "pipeprop/loss/softmax_cross_entropy.hpp"
#include "pipeprop/network.hpp"
#include "pipeprop/evaluation.hpp"
#include "pipeprop/non_finite_loss_error.hpp"
#include "pipeprop/optim/hyperparameters.hpp"
#include "pipeprop/optim/lr_schedule.hpp"
#include "pipeprop/optim/optimizer_policy.hpp"
#include "pipeprop/optim/sgd.hpp"

namespace pipeprop {

/// Configuration of a sequential_trainer whose optimizer has the config OptimizerConfig (optim::sgd_config for
/// momentum SGD, optim::adamw_config for AdamW). schedule, momentum and weight_decay make the hyperparameters of
/// the updates of train_batch(x, targets, b) (current_hyperparameters()); train_batch with explicit
/// hyperparameters ignores them.
template <class OptimizerConfig>
struct basic_sequential_trainer_config {
    std::size_t max_batch = 32;           ///< largest batch train_batch / evaluate chunks will see (B)
    OptimizerConfig optimizer{};          ///< what of the optimizer stays fixed (SGD: Nesterov; AdamW: betas, eps)
    optim::lr_schedule schedule{};        ///< learning rate as a function of samples consumed
    double momentum = OptimizerConfig::default_momentum;          ///< m of every update (SGD 0.9; AdamW: must be 0)
    double weight_decay = OptimizerConfig::default_weight_decay;  ///< lambda of every update (SGD: L2, default 0;
                                                                  ///< AdamW: decoupled, default 0.01)
    std::uint64_t seed = 1;               ///< parameter initialization seed (layer i uses derive_seed(seed, i))
};

/// Configuration of a sequential_trainer with the default optimizer (momentum SGD).
using sequential_trainer_config = basic_sequential_trainer_config<optim::sgd_config>;


/// Sequential trainer of network Net (value type T) with loss policy Loss and optimizer policy Optimizer.
///   Loss (loss/loss_policy.hpp): default softmax_cross_entropy<T, classes> (targets: labels [b]);
///     token_cross_entropy<T, L, V> for a sequence model with output [L, V] (targets [b, L], loss = mean over the
///     batch's non-ignored tokens).
///   Optimizer (optim/optimizer_policy.hpp): default optim::sgd<T> (momentum SGD, config optim::sgd_config);
///     optim::adamw<T> (config optim::adamw_config).
/// Owns the parameter block w [P], the gradient block [P], the optimizer state (its state buffers [P] each and the
/// step count), the activations of one batch [max_batch, ...] and the layers' workspaces. No global state: several
/// trainers can live side by side (one thread each). After construction, train_batch and evaluate do not allocate.
/// Static-asserts, with a sentence, that Loss is a loss policy whose logits_shape is the network's per-sample output
/// (e.g. a token loss on a rank-1 output is rejected), that the default loss has at least two classes, and that
/// Optimizer is an optimizer policy over T.
template <network_type Net, class T = float, class Loss = detail::default_loss_t<Net, T>,
          class Optimizer = optim::sgd<T>>
class sequential_trainer {
public:
    using stack_type = layer_stack<Net, T>;  ///< The network's layer stack (layer_stack<Net, T>).
    using value_type = T;  ///< The value type T of parameters and activations.
    using output_shape = typename stack_type::output_shape;  ///< Per-sample output shape of the network (the logits).
    static_assert(check_policies<Loss, Optimizer, T, output_shape>());
    using loss_type = Loss;  ///< The loss policy (loss/loss_policy.hpp).
    using optimizer_type = Optimizer;  ///< The optimizer policy (optim/optimizer_policy.hpp).
    /// The trainer's configuration, with the optimizer's fixed configuration inside.
    using config_type = basic_sequential_trainer_config<typename Optimizer::config_type>;
    /// Logits per sample (output_shape::size; the classes of a classifier).
    static constexpr std::size_t classes = output_shape::size;
    /// int32 targets per sample: 1 (a label) or the sequence length L.
    static constexpr std::size_t targets_per_sample = Loss::targets_per_sample;
    /// Elements of the parameter block, P.
    static constexpr std::size_t parameter_count = stack_type::parameter_count;
    /// Elements of one input sample (the network's input_shape::size).
    static constexpr std::size_t input_size = stack_type::input_shape::size;

    /// Sets up a trainer: parameters initialized from config.seed, zero optimizer state, no samples consumed.
    /// Throws std::invalid_argument for max_batch == 0 or an invalid optimizer / schedule configuration (the
    /// hyperparameters of the first update included: Optimizer::check).
    explicit sequential_trainer(const config_type& config)
        : config_(config),
          parameters_(parameter_count),
          gradient_(parameter_count),
          optimizer_(parameter_count, config.optimizer) {
        if (config.max_batch == 0)
            throw std::invalid_argument("pipeprop::sequential_trainer: max_batch must be >= 1");
        config_.schedule.validate();
        optimizer_.check(current_hyperparameters());
        act_ = stack_.make_activations(stack_type::all(), config.max_batch);
        ws_ = stack_.make_workspaces(stack_type::all(), config.max_batch);
        stack_.init_parameters(std::span<T>(parameters_), config.seed);
        state_.resize(stack_type::state_count);
        state_backup_.resize(stack_type::state_count);
        if constexpr (stack_type::state_count > 0) stack_.init_state(std::span<T>(state_));
    }

    /// The configuration the trainer was made with.
    [[nodiscard]] const config_type& config() const noexcept { return config_; }
    /// Largest batch train_batch and evaluate accept.
    [[nodiscard]] std::size_t max_batch() const noexcept { return config_.max_batch; }
    ///@{
    /// Parameter block w [parameter_count] (layer blocks in order; see layer_stack).
    [[nodiscard]] std::span<T> parameters() noexcept { return parameters_; }
    [[nodiscard]] std::span<const T> parameters() const noexcept { return parameters_; }
    ///@}
    ///@{
    /// Running state of the stateful layers [state_count] (empty when there are none).
    [[nodiscard]] std::span<T> state() noexcept { return state_; }
    [[nodiscard]] std::span<const T> state() const noexcept { return state_; }
    ///@}
    /// The optimizer's state (step count, state buffers [P]).
    [[nodiscard]] const Optimizer& optimizer() const noexcept { return optimizer_; }
    /// Updates applied so far.
    [[nodiscard]] std::uint64_t step_count() const noexcept { return optimizer_.step_count(); }
    /// Training samples consumed so far (the position t of the learning-rate schedule).
    [[nodiscard]] std::uint64_t samples_seen() const noexcept { return samples_seen_; }
    /// Learning rate the next batch of train_batch(x, targets, b) will use.
    [[nodiscard]] double current_learning_rate() const noexcept { return config_.schedule(samples_seen_); }
    /// Hyperparameters the next batch of train_batch(x, targets, b) will use: the schedule's learning rate at
    /// samples_seen(), the config's momentum and weight decay.
    [[nodiscard]] optim::hyperparameters<double> current_hyperparameters() const noexcept {
        return {.learning_rate = current_learning_rate(), .momentum = config_.momentum,
                .weight_decay = config_.weight_decay};
    }
    /// Replaces the schedule (e.g. a cosine horizon known only after the data is loaded). Throws as validate().
    void set_schedule(const optim::lr_schedule& s) {
        s.validate();
        config_.schedule = s;
    }

    /// One training step on a batch: x [b, input_size] (the network's per-sample input, row-major), targets
    /// [b, targets_per_sample] (labels [b] in [0, classes) for the default loss; next-token ids [b, L] for a token
    /// loss). Uses current_hyperparameters() (the schedule's learning rate at samples_seen()), then advances
    /// samples_seen() by b.
    /// Returns the mean loss over the batch's N = Loss::count_targets(targets, b) counted targets (nats), computed
    /// before the update (0, with no update of the weights but a step of the optimizer, when N == 0).
    /// Throws std::invalid_argument for b == 0 or b > max_batch(), std::out_of_range for an invalid target (the
    /// loss's target check), non_finite_loss_error when the loss is NaN or infinite; in all these cases the trainer's
    /// state is unchanged.
    T train_batch(const T* x, const std::int32_t* labels, std::size_t b) {
        return train_batch(x, labels, b, current_hyperparameters());
    }

    /// As train_batch(x, targets, b), with the explicit hyperparameters h of this update (learning rate per
    /// mean-loss gradient, momentum, weight decay) instead of current_hyperparameters(). samples_seen() still
    /// advances by b. Also throws std::invalid_argument, changing nothing, when the optimizer rejects h
    /// (Optimizer::check, naming the field).
    T train_batch(const T* x, const std::int32_t* labels, std::size_t b, const optim::hyperparameters<double>& h) {
        check_batch(b, "train_batch");
        optimizer_.check(h);
        const std::size_t counted = Loss::count_targets(labels, b);  // the target check, before anything changes
        std::copy_n(x, b * input_size, act_.input());
        std::copy(state_.begin(), state_.end(), state_backup_.begin());  // restored on a bad loss
        stack_.forward(std::span<const T>(parameters_), act_, b, ws_, std::span<T>(state_));
        // The gradient of the mean over the batch's counted targets (for softmax cross-entropy N = b: 1 / b).
        const T scale = counted > 0 ? T(1) / static_cast<T>(counted) : T(0);
        const loss_totals totals =
            Loss::totals_and_gradient(act_.output(), labels, b, act_.output_gradient(), scale);
        const T loss = static_cast<T>(totals.mean());
        if (!std::isfinite(loss)) {
            std::copy(state_backup_.begin(), state_backup_.end(), state_.begin());
            throw non_finite_loss_error(
                "pipeprop::sequential_trainer: the loss became " + std::string(std::isnan(loss) ? "NaN" : "infinite") +
                    " at update " + std::to_string(step_count()) + " (after " + std::to_string(samples_seen_) +
                    " samples, learning rate " + std::to_string(h.learning_rate) +
                    "); the update was not applied. Lower the learning rate or check the data.",
                step_count(), samples_seen_);
        }
        if constexpr (std::is_same_v<Optimizer, optim::sgd<T>>) {
            if (b == 1) {  // the update applied in the backward, layer by layer; same bits
                const optim::update_coefficients<T> c = optimizer_.coefficients(h);
                stack_.backward_momentum_update(std::span<const T>(parameters_), std::span<T>(gradient_),
                                                std::span<T>(parameters_), optimizer_.velocity(), c, act_, ws_,
                                                /*input_gradient_needed=*/false, std::span<T>(state_),
                                                /*update_unfused=*/true);
                optimizer_.step_parts(std::span<T>(parameters_), std::span<const T>(gradient_), c, {});  // counts it
                samples_seen_ += b;
                return loss;
            }
        }
        std::fill(gradient_.begin(), gradient_.end(), T(0));
        stack_.backward(std::span<const T>(parameters_), std::span<T>(gradient_), act_, b, ws_,
                        /*input_gradient_needed=*/false, std::span<T>(state_));
        optimizer_.step(std::span<T>(parameters_), std::span<const T>(gradient_), h);
        samples_seen_ += b;
        return loss;
    }

    /// Nothing is in flight after train_batch (pipeprop::trainer's drain): returns 0.
    double drain() noexcept { return 0.0; }

    /// Forward only on a batch x [b, input_size]; returns a pointer to the logits [b, output_shape...] (valid until
    /// the next call on this trainer). Throws std::invalid_argument for b == 0 or b > max_batch().
    const T* predict(const T* x, std::size_t b) {
        check_batch(b, "predict");
        std::copy_n(x, b * input_size, act_.input());
        stack_.infer(std::span<const T>(parameters_), act_, b, ws_, std::span<const T>(state_));
        return act_.output();
    }

    /// Accuracy and mean loss per counted target of the current parameters on n samples x [n, input_size], targets
    /// [n, targets_per_sample], processed in chunks of max_batch(): the loss sums of the chunks (Loss::totals) are
    /// added in double in a fixed order, then divided by the counted targets (the result does not depend on the
    /// chunking up to float rounding). For a token loss: mean loss per non-ignored token (exp of it is the
    /// perplexity) and token accuracy. Works before any training. Does not change the trainer's parameters, optimizer
    /// state, running state or samples_seen(). Throws std::invalid_argument for n == 0, std::out_of_range for an
    /// invalid target.
    evaluation evaluate(const T* x, const std::int32_t* labels, std::size_t n) {
        return evaluate_in_chunks<Loss>(
            labels, n, config_.max_batch,
            [&](std::size_t first, std::size_t b) { return predict(x + first * input_size, b); },
            "pipeprop::sequential_trainer::evaluate");
    }

    /// Adds the trainer's state to checkpoint c: signature, parameters ("layer_XX.<tensor>"), the optimizer's
    /// state buffers ("layer_XX.<tensor>.<buffer>": velocity for SGD, first_moment and second_moment for AdamW),
    /// the running state of stateful layers, scalars optimizer (Optimizer::name), step_count, samples_seen,
    /// init_seed. The caller adds its own scalars (epoch, data position, ...). Throws checkpoint_error on a name
    /// clash with what c already holds.
    void save_state(checkpoint& c) const {
        std::vector<std::span<const T>> buffers;
        for (std::size_t k = 0; k < Optimizer::state_buffer_names.size(); ++k) buffers.push_back(optimizer_.state_buffer(k));
        add_training_state<Net, Optimizer, T>(c, std::span<const T>(parameters_), buffers, std::span<const T>(state_),
                                              optimizer_.step_count(), samples_seen_, config_.seed);
    }

    /// Restores parameters, the optimizer's state buffers and step count, the running state and samples_seen from
    /// c. All-or-nothing: on any error the trainer is unchanged. Throws checkpoint_error when c was made for another
    /// network (the message names the first difference) or by another optimizer (scalar optimizer; a checkpoint
    /// without it, e.g. a PB one, is read as momentum SGD's), or a tensor / scalar is missing or has the wrong shape.
    void load_state(const checkpoint& c, const std::string& where = "checkpoint") {
        training_state<T> st = read_training_state<Net, Optimizer, T>(c, where);
        parameters_ = std::move(st.parameters);
        state_ = std::move(st.state);
        for (std::size_t k = 0; k < st.optimizer_state.size(); ++k)
            std::copy(st.optimizer_state[k].begin(), st.optimizer_state[k].end(), optimizer_.state_buffer(k).begin());
        optimizer_.set_step_count(st.step_count);
        samples_seen_ = st.samples_seen;
    }

private:
    void check_batch(std::size_t b, const char* what) const {
        if (b == 0 || b > config_.max_batch)
            throw std::invalid_argument(std::string("pipeprop::sequential_trainer::") + what + ": batch of " +
                                        std::to_string(b) + " samples, must be in [1, " +
                                        std::to_string(config_.max_batch) + "]");
    }

    config_type config_;
    stack_type stack_{};
    std::vector<T> parameters_;  // [P]
    std::vector<T> gradient_;    // [P], zeroed per batch (at b = 1 per layer, in backward_momentum_update)
    std::vector<T> state_;       // [state_count] running state of the stateful layers
    std::vector<T> state_backup_;  // [state_count] state before the current batch
    Optimizer optimizer_;
    typename stack_type::activations act_;
    typename stack_type::workspaces ws_;
    std::uint64_t samples_seen_ = 0;
};

}  // namespace pipeprop
