// pipeprop/sync/executor_options.hpp: what the synchronous executor (sync/schedule_executor.hpp) is built with
// and what one optimizer step returns, and the loss interface it needs; one batch of consecutive steps.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <span>
#include <stdexcept>
#include <string_view>

#include "pipeprop/executor_kind.hpp"
#include "pipeprop/optim/hyperparameters.hpp"
#include "pipeprop/optim/sgd.hpp"
#include "pipeprop/remote_transport.hpp"
#include "pipeprop/sync/schedule.hpp"

namespace pipeprop::sync {

using pipeprop::executor_kind;
using pipeprop::parse_executor_kind;

/// "sequential" / "concurrent" (same as pipeprop::to_string).
[[nodiscard]] constexpr std::string_view name(executor_kind k) noexcept { return to_string(k); }

/// Construction options of schedule_executor (and pipeline_executor) whose optimizer has the config
/// OptimizerConfig (optim::sgd_config for momentum SGD, optim::adamw_config for AdamW). The learning rate, momentum
/// and weight decay are not options: they come with every step (optim::hyperparameters).
template <class OptimizerConfig>
struct basic_executor_options {
    std::size_t micro_batches = 1;  ///< m >= 1: micro-batches per optimizer step
    std::size_t max_batch = 1;      ///< largest optimizer batch B a step accepts (buffers hold ceil(max_batch / m))
    OptimizerConfig optimizer{};    ///< what of the optimizer stays fixed (SGD: Nesterov; AdamW: betas, eps)
    std::uint64_t seed = 0;         ///< parameter initialization (layer_stack::init_parameters: cut-independent)
    executor_kind executor = executor_kind::concurrent;  ///< sequential (the reference, one thread) or concurrent
    /// > 0: clip the gradient to this global L2 norm (over ALL stages, docs/pitfalls.md item 7) before the updates; the
    /// stages then update after the whole graph has finished (a global barrier). 0: no clipping.
    double max_gradient_norm = 0;
    /// Most optimizer steps one schedule_executor::consecutive_steps call runs back to back without a barrier (the
    /// boundary channels are sized for that many; 1: step() only).
    std::size_t max_consecutive_steps = 1;
    /// Stages per device (v) of schedule_kind::interleaved_1f1b (the stage count must be a multiple); ZB-V always
    /// has 2, the other schedules one per device.
    std::size_t chunks = 2;
    /// Stages in several processes (remote_transport.hpp, e.g. pipeprop/mpi/mpi_transport.hpp; it must
    /// outlive the executor): this process runs only the stages the transport calls local, the others' messages
    /// cross the transport. nullptr: every stage runs here. Needs executor == concurrent and no clipping; a device
    /// of a virtual-stage schedule must have all of its stages in one process (docs/schedules.md §3).
    remote_transport* remote = nullptr;
};

namespace detail {
/// Throws std::invalid_argument for micro_batches == 0, max_batch == 0 or a max_gradient_norm that is negative or not
/// finite (the option named).
template <class OptimizerConfig>
void check_executor_options(const basic_executor_options<OptimizerConfig>& opt) {
    if (opt.micro_batches == 0)
        throw std::invalid_argument("pipeprop::sync::pipeline_executor: micro_batches must be >= 1");
    if (opt.max_batch == 0) throw std::invalid_argument("pipeprop::sync::pipeline_executor: max_batch must be >= 1");
    if (!(opt.max_gradient_norm >= 0) || !std::isfinite(opt.max_gradient_norm))
        throw std::invalid_argument("pipeprop::sync::pipeline_executor: max_gradient_norm must be finite and >= 0");
}
}  // namespace detail

/// Options of an executor with momentum SGD (the default optimizer).
using executor_options = basic_executor_options<optim::sgd_config>;

/// What one step returns.
struct step_result {
    double loss = 0;               ///< mean loss over the batch's counted targets (nats), before the update
    std::size_t correct = 0;       ///< counted targets whose arg-max logit equals the target (before the update)
    std::size_t targets = 0;       ///< counted targets N of the batch (B for a classifier; non-ignored tokens)
    std::size_t batch = 0;         ///< B (samples)
    std::size_t micro_batches = 0; ///< m used (min(m, B))
    double seconds = 0;            ///< wall time of the step
    double gradient_norm = 0;      ///< L2 norm of the mean-loss gradient over all stages (before any clipping);
                                   ///< with remote stages over this process's stages only
};

/// One batch of schedule_executor::consecutive_steps (its batch_view): x [B, input size] (row-major), targets
/// [B, targets per sample] and the step's hyperparameters.
template <class T>
struct step_batch {
    std::span<const T> x;  ///< inputs [B, input size], row-major
    std::span<const std::int32_t> labels;  ///< int32 targets [B, targets per sample]
    optim::hyperparameters<double> h{};  ///< the step's learning rate, momentum and weight decay
};

}  // namespace pipeprop::sync
