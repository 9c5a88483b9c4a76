// pipeprop/sync/step_input.hpp: the checks of the synchronous executor's input, all made before any work: one step's
// batch (sizes, max_batch, targets, hyperparameters), the batch list of consecutive steps (count, sizes, no clipping)
// and the samples of an evaluation (sizes). Each throws std::invalid_argument whose message starts with the caller's
// `who` and names the problem.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include "pipeprop/optim/hyperparameters.hpp"
#include "pipeprop/sync/executor_options.hpp"

namespace pipeprop::sync::detail {

/// Checks one step's batch: x [B, input_size], labels [B, Loss::targets_per_sample], 1 <= B <= max_batch, h accepted
/// by `optimizer` (its check(h)). Returns the counted targets N of the batch (Loss::count_targets, which checks every
/// target first: std::out_of_range naming the sample), or 0 without reading the targets when reads_targets is false
/// (a process that runs neither the first nor the last stage).
template <class Loss, class T, class StageOptimizer>
std::size_t check_step_input(std::span<const T> x, std::span<const std::int32_t> labels,
                             const optim::hyperparameters<double>& h, std::size_t input_size, std::size_t max_batch,
                             const StageOptimizer& optimizer, bool reads_targets, const std::string& who) {
    constexpr std::size_t targets_per_sample = Loss::targets_per_sample;
    const std::size_t batch = labels.size() / targets_per_sample;
    if (batch == 0) throw std::invalid_argument(who + "empty batch");
    if (labels.size() != batch * targets_per_sample)
        throw std::invalid_argument(who + std::to_string(labels.size()) + " targets, not a multiple of " +
                                    std::to_string(targets_per_sample) + " per sample");
    if (batch > max_batch)
        throw std::invalid_argument(who + "batch of " + std::to_string(batch) + " samples exceeds max_batch = " +
                                    std::to_string(max_batch));
    if (x.size() != batch * input_size)
        throw std::invalid_argument(who + "input has " + std::to_string(x.size()) + " values, expected B x " +
                                    std::to_string(input_size) + " = " + std::to_string(batch * input_size));
    optimizer.check(h);
    if (!reads_targets) return 0;
    return Loss::count_targets(labels.data(), batch);
}

/// Checks the batches of consecutive_steps and returns one Input {x, labels, counted targets, h} per batch:
/// 1 <= k <= opt.max_consecutive_steps batches, no clipping (opt.max_gradient_norm == 0), all of the same size B,
/// each checked by check_one(batch, who + "batch n: ") (returning its counted targets), B >= opt.micro_batches.
template <class Input, class T, class Options, class CheckOne>
std::vector<Input> consecutive_step_inputs(std::span<const step_batch<T>> batches, std::size_t targets_per_sample,
                                           const Options& opt, const std::string& who, CheckOne check_one) {
    const std::size_t k = batches.size();
    if (k == 0 || k > opt.max_consecutive_steps)
        throw std::invalid_argument(who + std::to_string(k) + " batches; 1 to max_consecutive_steps = " +
                                    std::to_string(opt.max_consecutive_steps) + " run back to back");
    if (opt.max_gradient_norm > 0)
        throw std::invalid_argument(who + "global gradient clipping (max_gradient_norm > 0) needs a barrier after "
                                    "every step; run step() instead");
    const std::size_t batch = batches[0].labels.size() / targets_per_sample;
    std::vector<Input> in;
    for (const auto& bv : batches) {
        if (bv.labels.size() != batches[0].labels.size())
            throw std::invalid_argument(who + "every batch must have the same size (batch " +
                                        std::to_string(in.size()) + " has " +
                                        std::to_string(bv.labels.size() / targets_per_sample) + " samples, batch 0 " +
                                        std::to_string(batch) + ")");
        in.push_back({bv.x.data(), bv.labels.data(), check_one(bv, who + "batch " + std::to_string(in.size()) + ": "),
                      bv.h});
    }
    if (batch < opt.micro_batches)
        throw std::invalid_argument(who + "batches of " + std::to_string(batch) + " samples are fewer than the " +
                                    std::to_string(opt.micro_batches) + " micro-batches; run step() instead");
    return in;
}

/// Checks the samples of an evaluation: labels [n, targets_per_sample], x [n, input_size]. Returns n.
template <class T>
std::size_t check_evaluation_input(std::span<const T> x, std::span<const std::int32_t> labels,
                                   std::size_t input_size, std::size_t targets_per_sample, const std::string& who) {
    const std::size_t n = labels.size() / targets_per_sample;
    if (labels.size() != n * targets_per_sample)
        throw std::invalid_argument(who + std::to_string(labels.size()) + " targets, not a multiple of " +
                                    std::to_string(targets_per_sample) + " per sample");
    if (x.size() != n * input_size)
        throw std::invalid_argument(who + "input has " + std::to_string(x.size()) + " values, expected n x " +
                                    std::to_string(input_size) + " = " + std::to_string(n * input_size));
    return n;
}

}  // namespace pipeprop::sync::detail
