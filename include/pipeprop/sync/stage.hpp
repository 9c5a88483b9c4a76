// pipeprop/sync/stage.hpp: what one stage of a synchronous pipeline owns: its layer range, its own parameter,
// gradient and optimizer-state blocks, its activation slots (one per micro-batch in flight) and its workspaces.
//
// Nothing here knows about schedules or threads: the executors (sync/schedule_executor.hpp) decide which op runs on which
// slot and move data across stage boundaries through boundary_channel messages; a stage never reads another
// stage's memory. The type depends only on layer_stack, so another engine can reuse it for its stages.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include "pipeprop/layer_stack.hpp"
#include "pipeprop/stage_program.hpp"
#include "pipeprop/optim/optimizer_policy.hpp"
#include "pipeprop/optim/sgd.hpp"

namespace pipeprop::sync {

/// One stage of a pipeline over layer_stack<Net, T>: layers `range()`, parameters w [parameter_count_of(range)]
/// (a copy of the network block's slice, owned by the stage), gradient dw [same] (accumulated by p2 over the
/// micro-batches of a step), the state of optimizer policy Optimizer (optim/optimizer_policy.hpp; default momentum
/// SGD) over its own block, `slots()` activation buffers for micro-batches of up to max_b samples, int32 targets
/// [max_b, targets_per_sample] per slot (they travel with the micro-batch's forward messages), and one workspace
/// set (a stage runs one op at a time).
template <network_type Net, class T, class Optimizer = optim::sgd<T>>
class stage {
public:
    using stack_type = layer_stack<Net, T>;
    using activations = typename stack_type::activations;
    using optimizer_type = Optimizer;
    using optimizer_config = typename Optimizer::config_type;

    /// Throws std::invalid_argument (from layer_stack) for an empty or out-of-bounds range or max_b == 0, and
    /// when slots == 0; from the optimizer for an invalid configuration.
    stage(const stack_type& stack, std::size_t index, layer_range range, std::size_t max_b, std::size_t slots,
          const optimizer_config& config, std::size_t targets_per_sample = 1)
        : stage(stack, index, make_stage_program<stack_type, dynamic_range>(range), max_b, slots, config,
                targets_per_sample) {}

    /// As above, with the stage's code given (stage_program.hpp: instantiated for its stage type, or dynamic).
    stage(const stack_type& stack, std::size_t index, const stage_program<stack_type>& program, std::size_t max_b,
          std::size_t slots, const optimizer_config& config, std::size_t targets_per_sample = 1)
        : stack_(&stack),
          program_(program),
          index_(index),
          range_(program.range),
          max_b_(max_b),
          w_(stack_type::parameter_count_of(program.range), T(0)),
          dw_(w_.size(), T(0)),
          opt_(w_.size(), config),
          ws_(stack.make_workspaces(program.range, max_b)),
          targets_per_sample_(targets_per_sample),
          labels_(slots * max_b * targets_per_sample, 0) {
        const layer_range range = program.range;
        if (slots == 0)
            throw std::invalid_argument("pipeprop::sync::stage " + std::to_string(index) + ": needs >= 1 slot");
        if constexpr (stack_type::state_count > 0) {
            std::vector<T> all(stack_type::state_count);
            stack.init_state(all);
            state_.assign(all.begin() + static_cast<std::ptrdiff_t>(stack_type::state_offset[range.begin]),
                          all.begin() + static_cast<std::ptrdiff_t>(stack_type::state_offset[range.end]));
        }
        for (std::size_t i = 0; i < slots; ++i) act_.push_back(stack.make_activations(range, max_b));
    }

    [[nodiscard]] std::size_t index() const noexcept { return index_; }
    /// The stage's passes (stage_program.hpp).
    [[nodiscard]] const stage_program<stack_type>& program() const noexcept { return program_; }
    [[nodiscard]] layer_range range() const noexcept { return range_; }
    [[nodiscard]] std::size_t max_batch() const noexcept { return max_b_; }
    /// Number of activation slots (= peak micro-batches in flight of the schedule on this stage).
    [[nodiscard]] std::size_t slots() const noexcept { return act_.size(); }
    /// Bytes of all activation slots (activations, gradients and stashes) of this stage.
    [[nodiscard]] std::size_t activation_bytes() const noexcept {
        std::size_t n = 0;
        for (const auto& a : act_) n += a.bytes();
        return n;
    }
    /// Per-sample elements of the stage input / output.
    [[nodiscard]] std::size_t input_size() const noexcept { return stack_type::activation_size[range_.begin]; }
    [[nodiscard]] std::size_t output_size() const noexcept { return stack_type::activation_size[range_.end]; }

    [[nodiscard]] std::span<T> parameters() noexcept { return w_; }
    [[nodiscard]] std::span<const T> parameters() const noexcept { return w_; }
    /// Running state of the stage's stateful layers [state_count_of(range)] (empty when none). Updated by F and B
    /// in the order the schedule runs them (every schedule runs a stage's F's in micro-batch order and its B's in
    /// micro-batch order; 1F1B interleaves the two kinds, which is why a stateful layer may only let its forward
    /// read what its forward writes and its backward what its backward writes: layer_concept.hpp).
    [[nodiscard]] std::span<T> state() noexcept { return state_; }
    [[nodiscard]] std::span<const T> state() const noexcept { return state_; }
    [[nodiscard]] std::span<T> gradient() noexcept { return dw_; }
    [[nodiscard]] std::span<const T> gradient() const noexcept { return dw_; }
    [[nodiscard]] Optimizer& optimizer() noexcept { return opt_; }
    [[nodiscard]] const Optimizer& optimizer() const noexcept { return opt_; }

    /// Buffers of slot i (see layer_stack::activations) and its targets [max_b, targets_per_sample].
    [[nodiscard]] activations& slot(std::size_t i) noexcept { return act_[i]; }
    [[nodiscard]] std::int32_t* labels(std::size_t i) noexcept {
        return labels_.data() + i * max_b_ * targets_per_sample_;
    }

    /// Zeroes the gradient block (start of a step).
    void zero_gradient() noexcept { std::fill(dw_.begin(), dw_.end(), T(0)); }

    /// F: forward of the b samples in slot i's input (assigned by the caller) over the stage's layers.
    void forward(std::size_t i, std::size_t b) { program_.forward(*stack_, w_, act_[i], b, ws_, state_); }
    /// B (backward-p1): from slot i's output gradient; the input gradient is computed unless this is stage 0.
    void backward_input(std::size_t i, std::size_t b) {
        program_.backward_input(*stack_, w_, act_[i], b, ws_, index_ > 0, state_);
    }
    /// W (backward-p2): adds slot i's weight gradients into gradient().
    void backward_weight(std::size_t i, std::size_t b) {
        program_.backward_weight(*stack_, w_, dw_, act_[i], b, ws_);
    }
    /// BW: p1 and p2 of slot i in one pass (2BP off).
    void backward_fused(std::size_t i, std::size_t b) {
        program_.backward(*stack_, w_, dw_, act_[i], b, ws_, index_ > 0, state_);
    }
    /// Optimizer step of the stage's block with its gradient and learning rate lr (per mean-loss gradient).
    void update(double lr) { opt_.step(w_, dw_, lr); }

private:
    const stack_type* stack_;
    stage_program<stack_type> program_;
    std::size_t index_;
    layer_range range_;
    std::size_t max_b_;
    std::vector<T> w_;
    std::vector<T> dw_;
    std::vector<T> state_;
    Optimizer opt_;
    typename stack_type::workspaces ws_;
    std::size_t targets_per_sample_;
    std::vector<activations> act_;
    std::vector<std::int32_t> labels_;
};

}  // namespace pipeprop::sync
