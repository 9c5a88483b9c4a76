// pipeprop/trainer_concept.hpp: the one interface every way of training a network offers, so that a training loop
// (data order, epochs, evaluation, checkpoints) is written once and runs the sequential trainer, a Pipelined
// Backpropagation pipeline or a synchronous schedule alike. Satisfied by pipeprop::sequential_trainer,
// pipeprop::pb::trainer and pipeprop::sync::trainer (docs/concepts.md, "Trainers").
#pragma once

#include <concepts>
#include <cstddef>
#include <cstdint>
#include <string>

#include "pipeprop/checkpoint/content.hpp"
#include "pipeprop/evaluation.hpp"

namespace pipeprop {

/// A trainer E of value type `typename E::value_type` (float or double) over samples of `E::input_size` values with
/// `E::targets_per_sample` targets each (a class label, or L next-token ids):
/// - `e.train_batch(x, targets, b)`: trains on the batch x [b, input_size], targets [b, targets_per_sample] (b
///   samples: one step of the sequential trainer or of a synchronous schedule, one micro-batch of a PB pipeline), at
///   the learning rate current_learning_rate() gives before the call; returns L, the losses that became known during
///   the call as a per-sample weighted sum divided by b: L * b = sum over the (micro-)batches completed in the call of
///   their mean loss times their samples (nats). A synchronous trainer completes its batch at once (L is the batch's
///   mean loss); a PB pipeline completes a micro-batch when its backward reaches the first stage, up to 2 (S - 1)
///   micro-batches later. Throws non_finite_loss_error when a loss is NaN or infinite (the state kept is the one of
///   before that update), std::invalid_argument for a batch size outside [1, max batch].
/// - `e.drain()`: completes every batch in flight, so that every update is applied (nothing to do for a synchronous
///   trainer); returns their per-sample weighted loss sum (0 when nothing was in flight).
/// - `e.evaluate(x, targets, n)`: mean loss and accuracy of the current weights on n samples (inference only; the
///   running state read, never updated). Only when drained.
/// - `e.save_state(c)` / `e.load_state(c, where)`: the whole training state to / from a checkpoint (weights,
///   optimizer state, running state, counters); only when drained. load_state throws checkpoint_error naming `where`.
/// - `e.samples_seen()`: samples trained on (pushed, for a pipeline) since the start of the run, checkpoints
///   included; `e.current_learning_rate()`: the learning rate the next batch is trained at.
template <class E>
concept trainer = requires(E& e, const E& ce, const typename E::value_type* x, const std::int32_t* targets,
                           std::size_t b, checkpoint& out, const checkpoint& in, const std::string& where) {
    typename E::value_type;
    { E::input_size } -> std::convertible_to<std::size_t>;
    { E::targets_per_sample } -> std::convertible_to<std::size_t>;
    { e.train_batch(x, targets, b) } -> std::convertible_to<double>;
    { e.drain() } -> std::convertible_to<double>;
    { e.evaluate(x, targets, b) } -> std::same_as<evaluation>;
    ce.save_state(out);
    e.load_state(in, where);
    { ce.samples_seen() } -> std::convertible_to<std::uint64_t>;
    { ce.current_learning_rate() } -> std::convertible_to<double>;
};

}  // namespace pipeprop
