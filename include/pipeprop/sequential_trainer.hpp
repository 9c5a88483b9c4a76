// pipeprop/sequential_trainer.hpp: the sequential (non-pipelined) reference trainer: mini-batch momentum SGD on the
// whole network, one batch at a time, driven by the caller's loop.
//
// Per train_batch call with a batch of b samples (shared/docs/pb-semantics.md §2; 2bp-schedules.md §3):
//   forward over all layers; loss = mean softmax cross-entropy over the b samples; gradient of that mean;
//   fused backward (p1 + p2 per layer) into a zeroed gradient block; one momentum-SGD update with the learning rate
//   lr(t) of the schedule at t = samples consumed before this batch.
// This is the reference every pipeline executor is compared with, so its arithmetic is kept plain and fixed: the
// same inputs give bit-identical results (no threads, fixed summation order).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include "pipeprop/checkpoint.hpp"
#include "pipeprop/layer_stack.hpp"
#include "pipeprop/loss/softmax_cross_entropy.hpp"
#include "pipeprop/network.hpp"
#include "pipeprop/non_finite_loss_error.hpp"
#include "pipeprop/optim/lr_schedule.hpp"
#include "pipeprop/optim/sgd.hpp"

namespace pipeprop {

/// Result of an evaluation: accuracy in [0, 1], mean loss per sample (nats), number of samples.
struct evaluation {
    double accuracy = 0.0;
    double loss = 0.0;
    std::size_t samples = 0;
};

/// Configuration of a sequential_trainer.
struct sequential_trainer_config {
    std::size_t max_batch = 32;           ///< largest batch train_batch / evaluate chunks will see (B)
    optim::sgd_config optimizer{};        ///< momentum, weight decay, Nesterov
    optim::lr_schedule schedule{};        ///< learning rate as a function of samples consumed
    std::uint64_t seed = 1;               ///< parameter initialization seed (layer i uses derive_seed(seed, i))
};

/// Sequential trainer of network Net (value type T) for a classifier with softmax cross-entropy.
/// Owns the parameter block w [P], the gradient block [P], the optimizer state (velocity [P], step count), the
/// activations of one batch [max_batch, ...] and the layers' workspaces. No global state: several trainers can live
/// side by side (one thread each). After construction, train_batch and evaluate do not allocate.
/// Static-asserts that the network output is a vector of at least two classes.
template <network_type Net, class T = float>
class sequential_trainer {
public:
    using stack_type = layer_stack<Net, T>;
    using value_type = T;
    using output_shape = typename stack_type::output_shape;
    static_assert(vector_shape<output_shape> && output_shape::size >= 2,
                  "pipeprop::sequential_trainer: the network must end in a vector of class logits [classes >= 2].");
    using loss_type = softmax_cross_entropy<T, output_shape::size>;
    static constexpr std::size_t classes = output_shape::size;
    static constexpr std::size_t parameter_count = stack_type::parameter_count;
    static constexpr std::size_t input_size = stack_type::input_shape::size;

    /// Sets up a trainer: parameters initialized from config.seed, zero velocity, no samples consumed.
    /// Throws std::invalid_argument for max_batch == 0 or an invalid optimizer / schedule configuration.
    explicit sequential_trainer(const sequential_trainer_config& config)
        : config_(config),
          parameters_(parameter_count),
          gradient_(parameter_count),
          optimizer_(parameter_count, config.optimizer) {
        if (config.max_batch == 0)
            throw std::invalid_argument("pipeprop::sequential_trainer: max_batch must be >= 1");
        config_.schedule.validate();
        act_ = stack_.make_activations(stack_type::all(), config.max_batch);
        ws_ = stack_.make_workspaces(stack_type::all(), config.max_batch);
        stack_.init_parameters(std::span<T>(parameters_), config.seed);
        state_.resize(stack_type::state_count);
        state_backup_.resize(stack_type::state_count);
        if constexpr (stack_type::state_count > 0) stack_.init_state(std::span<T>(state_));
    }

    [[nodiscard]] const sequential_trainer_config& config() const noexcept { return config_; }
    [[nodiscard]] std::size_t max_batch() const noexcept { return config_.max_batch; }
    /// Parameter block w [parameter_count] (layer blocks in order; see layer_stack).
    [[nodiscard]] std::span<T> parameters() noexcept { return parameters_; }
    [[nodiscard]] std::span<const T> parameters() const noexcept { return parameters_; }
    /// Running state of the stateful layers [state_count] (empty when there are none).
    [[nodiscard]] std::span<T> state() noexcept { return state_; }
    [[nodiscard]] std::span<const T> state() const noexcept { return state_; }
    [[nodiscard]] const optim::sgd<T>& optimizer() const noexcept { return optimizer_; }
    /// Updates applied so far.
    [[nodiscard]] std::uint64_t step_count() const noexcept { return optimizer_.step_count(); }
    /// Training samples consumed so far (the position t of the learning-rate schedule).
    [[nodiscard]] std::uint64_t samples_seen() const noexcept { return samples_seen_; }
    /// Learning rate the next batch will use.
    [[nodiscard]] double current_learning_rate() const noexcept { return config_.schedule(samples_seen_); }
    /// Replaces the schedule (e.g. a cosine horizon known only after the data is loaded). Throws as validate().
    void set_schedule(const optim::lr_schedule& s) {
        s.validate();
        config_.schedule = s;
    }

    /// One training step on a batch: x [b, input_size] (the network's per-sample input, row-major), labels [b] in
    /// [0, classes). Uses the schedule's learning rate at samples_seen(), then advances samples_seen() by b.
    /// Returns the mean loss over the batch (nats), computed before the update.
    /// Throws std::invalid_argument for b == 0 or b > max_batch(), std::out_of_range for a label outside
    /// [0, classes), non_finite_loss_error when the loss is NaN or infinite; in all these cases the trainer's state
    /// is unchanged.
    T train_batch(const T* x, const std::int32_t* labels, std::size_t b) {
        return train_batch(x, labels, b, current_learning_rate());
    }

    /// As train_batch(x, labels, b), with an explicit learning rate lr (per mean-loss gradient) instead of the
    /// schedule's. samples_seen() still advances by b.
    T train_batch(const T* x, const std::int32_t* labels, std::size_t b, double lr) {
        check_batch(b, "train_batch");
        std::copy_n(x, b * input_size, act_.input());
        std::copy(state_.begin(), state_.end(), state_backup_.begin());  // restored on a bad loss
        stack_.forward(std::span<const T>(parameters_), act_, b, ws_, std::span<T>(state_));
        const T loss = loss_type::loss_and_gradient(act_.output(), labels, b, act_.output_gradient());
        if (!std::isfinite(loss)) {
            std::copy(state_backup_.begin(), state_backup_.end(), state_.begin());
            throw non_finite_loss_error(
                "pipeprop::sequential_trainer: the loss became " + std::string(std::isnan(loss) ? "NaN" : "infinite") +
                    " at update " + std::to_string(step_count()) + " (after " + std::to_string(samples_seen_) +
                    " samples, learning rate " + std::to_string(lr) +
                    "); the update was not applied. Lower the learning rate or check the data.",
                step_count(), samples_seen_);
        }
        std::fill(gradient_.begin(), gradient_.end(), T(0));
        stack_.backward(std::span<const T>(parameters_), std::span<T>(gradient_), act_, b, ws_,
                        /*input_gradient_needed=*/false, std::span<T>(state_));
        optimizer_.step(std::span<T>(parameters_), std::span<const T>(gradient_), lr);
        samples_seen_ += b;
        return loss;
    }

    /// Forward only on a batch x [b, input_size]; returns a pointer to the logits [b, classes] (valid until the
    /// next call on this trainer). Throws std::invalid_argument for b == 0 or b > max_batch().
    const T* predict(const T* x, std::size_t b) {
        check_batch(b, "predict");
        std::copy_n(x, b * input_size, act_.input());
        stack_.infer(std::span<const T>(parameters_), act_, b, ws_, std::span<const T>(state_));
        return act_.output();
    }

    /// Accuracy and mean loss of the current parameters on n samples x [n, input_size], labels [n], processed in
    /// chunks of max_batch() (the result does not depend on the chunking up to float rounding of the loss sum,
    /// which is accumulated in double in a fixed order). Works before any training. Does not change the trainer's
    /// parameters, optimizer state or samples_seen(). Throws std::invalid_argument for n == 0, std::out_of_range
    /// for a label outside [0, classes).
    evaluation evaluate(const T* x, const std::int32_t* labels, std::size_t n) {
        if (n == 0) throw std::invalid_argument("pipeprop::sequential_trainer::evaluate: no samples");
        double loss_sum = 0.0;
        std::size_t hits = 0;
        for (std::size_t first = 0; first < n; first += config_.max_batch) {
            const std::size_t b = std::min(config_.max_batch, n - first);
            const T* logits = predict(x + first * input_size, b);
            loss_sum += static_cast<double>(loss_type::loss(logits, labels + first, b)) * static_cast<double>(b);
            hits += loss_type::correct(logits, labels + first, b);
        }
        return {static_cast<double>(hits) / static_cast<double>(n), loss_sum / static_cast<double>(n), n};
    }

    /// Adds the trainer's state to checkpoint c: signature, parameters ("layer_XX.<tensor>"), velocity
    /// ("layer_XX.<tensor>.velocity"), scalars step_count, samples_seen, init_seed. The caller adds its own
    /// scalars (epoch, data position, ...). Throws checkpoint_error on a name clash with what c already holds.
    void save_state(checkpoint& c) const {
        c.signature = signature_of<Net, T>();
        add_network_tensors<Net, T>(c, std::span<const T>(parameters_));
        add_network_tensors<Net, T>(c, optimizer_.velocity(), "velocity");
        add_network_state<Net, T>(c, std::span<const T>(state_));
        c.set_scalar("step_count", optimizer_.step_count());
        c.set_scalar("samples_seen", samples_seen_);
        c.set_scalar("init_seed", config_.seed);
    }

    /// Restores parameters, velocity, step count and samples_seen from c. All-or-nothing: on any error the trainer
    /// is unchanged. Throws checkpoint_error when c was made for another network (the message names the first
    /// difference) or a tensor / scalar is missing or has the wrong shape.
    void load_state(const checkpoint& c, const std::string& where = "checkpoint") {
        require_signature(c, signature_of<Net, T>(), where);
        std::vector<T> w(parameter_count), v(parameter_count);
        read_network_tensors<Net, T>(c, std::span<T>(w));
        read_network_tensors<Net, T>(c, std::span<T>(v), "velocity");
        std::vector<T> st(stack_type::state_count);
        read_network_state<Net, T>(c, std::span<T>(st));
        const auto steps = c.scalar_as<std::uint64_t>("step_count");
        const auto seen = c.scalar_as<std::uint64_t>("samples_seen");
        parameters_ = std::move(w);
        state_ = std::move(st);
        std::copy(v.begin(), v.end(), optimizer_.velocity().begin());
        optimizer_.set_step_count(steps);
        samples_seen_ = seen;
    }

private:
    void check_batch(std::size_t b, const char* what) const {
        if (b == 0 || b > config_.max_batch)
            throw std::invalid_argument(std::string("pipeprop::sequential_trainer::") + what + ": batch of " +
                                        std::to_string(b) + " samples, must be in [1, " +
                                        std::to_string(config_.max_batch) + "]");
    }

    sequential_trainer_config config_;
    stack_type stack_{};
    std::vector<T> parameters_;  // [P]
    std::vector<T> gradient_;    // [P], zeroed per batch
    std::vector<T> state_;       // [state_count] running state of the stateful layers
    std::vector<T> state_backup_;  // [state_count] state before the current batch
    optim::sgd<T> optimizer_;
    typename stack_type::activations act_;
    typename stack_type::workspaces ws_;
    std::uint64_t samples_seen_ = 0;
};

}  // namespace pipeprop
