// pipeprop/sync/executor_options.hpp: what the synchronous executor (sync/schedule_executor.hpp) is built with
// and what one optimizer step returns, and the loss interface it needs.
#pragma once

#include <concepts>
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "pipeprop/executor_kind.hpp"
#include "pipeprop/optim/sgd.hpp"
#include "pipeprop/sync/schedule.hpp"

namespace pipeprop::sync {

using pipeprop::executor_kind;
using pipeprop::parse_executor_kind;

/// "sequential" / "concurrent" (same as pipeprop::to_string).
[[nodiscard]] constexpr std::string_view name(executor_kind k) noexcept { return to_string(k); }

/// Construction options of schedule_executor (and pipeline_executor).
struct executor_options {
    std::size_t micro_batches = 1;  ///< m >= 1: micro-batches per optimizer step
    std::size_t max_batch = 1;      ///< largest optimizer batch B a step accepts (buffers hold ceil(max_batch / m))
    optim::sgd_config sgd{};        ///< momentum, weight decay, Nesterov (validated by optim::sgd)
    std::uint64_t seed = 0;         ///< parameter initialization (layer_stack::init_parameters: cut-independent)
    executor_kind executor = executor_kind::concurrent;
    /// > 0: clip the gradient to this global L2 norm (over ALL stages, pitfalls.md item 7) before the updates; the
    /// stages then update after the whole graph has finished (a global barrier). 0: no clipping.
    double max_gradient_norm = 0;
};

/// What one step returns.
struct step_result {
    double loss = 0;              ///< mean loss over the batch (nats), before the update
    std::size_t correct = 0;      ///< samples whose arg-max logit equals the label (before the update)
    std::size_t batch = 0;        ///< B
    std::size_t micro_batches = 0;///< m used (min(m, B))
    double seconds = 0;           ///< wall time of the step
    double gradient_norm = 0;     ///< L2 norm of the mean-loss gradient over all stages (before any clipping)
};

/// A loss usable by the executor: softmax_cross_entropy's static interface.
template <class L, class T>
concept executor_loss = requires(const T* z, const std::int32_t* y, std::size_t b, T* dz, T scale) {
    { L::classes } -> std::convertible_to<std::size_t>;
    { L::loss_and_gradient(z, y, b, dz, scale) } -> std::convertible_to<T>;
    { L::correct(z, y, b) } -> std::convertible_to<std::size_t>;
    L::check_label(y[0], b);
};

}  // namespace pipeprop::sync
