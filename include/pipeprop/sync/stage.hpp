// pipeprop/sync/stage.hpp: what one stage of a synchronous pipeline owns: on the stage_core every engine's stages
// share (stage_core.hpp: its code, layer range, parameters (owned, or a view of the caller's storage), gradient and
// running state) its optimizer state, its activation slots (one per micro-batch in flight) and its workspaces.
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
#include "pipeprop/stage_core.hpp"
#include "pipeprop/stage_program.hpp"
#include "pipeprop/optim/optimizer_policy.hpp"
#include "pipeprop/optim/sgd.hpp"

namespace pipeprop::sync {

/// One stage of a pipeline over layer_stack<Net, T>: layers `range()`, parameters w [parameter_count_of(range)]
/// (a copy of the network block's slice owned by the stage, or the slice of the caller's storage), gradient dw
/// [same] (accumulated by p2 over the
/// micro-batches of a step), the state of optimizer policy Optimizer (optim/optimizer_policy.hpp; default momentum
/// SGD) over its own block, `slots()` activation buffers for micro-batches of up to max_b samples, int32 targets
/// [max_b, targets_per_sample] per slot (they travel with the micro-batch's forward messages), and one workspace
/// set (a stage runs one op at a time).
template <network_type Net, class T, class Optimizer = optim::sgd<T>>
class stage {
public:
    using stack_type = layer_stack<Net, T>;  ///< The network's layer stack (layer_stack<Net, T>).
    using activations = typename stack_type::activations;  ///< The buffers of one micro-batch slot (stack_activations).
    using optimizer_type = Optimizer;  ///< The optimizer policy.
    using optimizer_config = typename Optimizer::config_type;  ///< The optimizer's fixed configuration.

    /// Stage `index` with the stage's code `program` (stage_program.hpp: instantiated for its stage type, or
    /// dynamic), initial weights the slice of network_block [parameter_count] (a copy the stage owns) or, with
    /// `storage` [parameter_count] given, the slice of that caller-owned block (updated in place; network_block not
    /// read). Throws std::invalid_argument (stage_core, layer_stack) for an empty or out-of-bounds range, a block or
    /// storage of the wrong size, max_b == 0 or slots == 0; from the optimizer for an invalid configuration.
    stage(const stack_type& stack, std::size_t index, const stage_program<stack_type>& program, std::size_t max_b,
          std::size_t slots, const optimizer_config& config, std::size_t targets_per_sample,
          std::span<const T> network_block, std::span<T> storage = {})
        : stack_(&stack),
          core_(index, program, network_block, storage, "pipeprop::sync::stage"),
          max_b_(max_b),
          opt_(core_.parameter_count(), config),
          ws_(stack.make_workspaces(program.range, max_b)),
          targets_per_sample_(targets_per_sample),
          labels_(slots * max_b * targets_per_sample, 0) {
        if (slots == 0)
            throw std::invalid_argument("pipeprop::sync::stage " + std::to_string(index) + ": needs >= 1 slot");
        for (std::size_t i = 0; i < slots; ++i) act_.push_back(stack.make_activations(program.range, max_b));
    }

    /// The stage's index s (0 = input side).
    [[nodiscard]] std::size_t index() const noexcept { return core_.index(); }
    /// The stage's passes (stage_program.hpp).
    [[nodiscard]] const stage_program<stack_type>& program() const noexcept { return core_.program(); }
    /// The stage's layers [begin, end) of the flattened network.
    [[nodiscard]] layer_range range() const noexcept { return core_.range(); }
    /// The micro-batch capacity max_b of every slot.
    [[nodiscard]] std::size_t max_batch() const noexcept { return max_b_; }
    /// Number of activation slots (= peak micro-batches in flight of the schedule on this stage).
    [[nodiscard]] std::size_t slots() const noexcept { return act_.size(); }
    /// Bytes of all activation slots (activations, gradients and stashes) of this stage.
    [[nodiscard]] std::size_t activation_bytes() const noexcept {
        std::size_t n = 0;
        for (const auto& a : act_) n += a.bytes();
        return n;
    }
    ///@{
    /// Per-sample elements of the stage input / output.
    [[nodiscard]] std::size_t input_size() const noexcept { return stack_type::activation_size[range().begin]; }
    [[nodiscard]] std::size_t output_size() const noexcept { return stack_type::activation_size[range().end]; }
    ///@}

    ///@{
    /// The stage's weights [P] (its own block, or its slice of the caller's storage).
    [[nodiscard]] std::span<T> parameters() noexcept { return core_.weights(); }
    [[nodiscard]] std::span<const T> parameters() const noexcept { return core_.weights(); }
    ///@}
    ///@{
    /// Running state of the stage's stateful layers [state_count_of(range)] (empty when none). Updated by F and B
    /// in the order the schedule runs them (every schedule runs a stage's F's in micro-batch order and its B's in
    /// micro-batch order; 1F1B interleaves the two kinds, which is why a stateful layer may only let its forward
    /// read what its forward writes and its backward what its backward writes: layer_concept.hpp).
    [[nodiscard]] std::span<T> state() noexcept { return core_.state(); }
    [[nodiscard]] std::span<const T> state() const noexcept { return core_.state(); }
    ///@}
    ///@{
    /// The gradient block [P]: backward-p2 adds into it over the micro-batches of a step.
    [[nodiscard]] std::span<T> gradient() noexcept { return core_.gradient(); }
    [[nodiscard]] std::span<const T> gradient() const noexcept { return core_.gradient(); }
    ///@}
    ///@{
    /// The optimizer's state over the stage's block.
    [[nodiscard]] Optimizer& optimizer() noexcept { return opt_; }
    [[nodiscard]] const Optimizer& optimizer() const noexcept { return opt_; }
    ///@}

    ///@{
    /// Buffers of slot i (see layer_stack::activations) and its targets [max_b, targets_per_sample].
    [[nodiscard]] activations& slot(std::size_t i) noexcept { return act_[i]; }
    [[nodiscard]] std::int32_t* labels(std::size_t i) noexcept {
        return labels_.data() + i * max_b_ * targets_per_sample_;
    }
    ///@}

    /// Zeroes the gradient block (start of a step).
    void zero_gradient() noexcept { std::fill(gradient().begin(), gradient().end(), T(0)); }

    /// F: forward of the b samples in slot i's input (assigned by the caller) over the stage's layers.
    void forward(std::size_t i, std::size_t b) {
        program().forward(*stack_, parameters(), act_[i], b, ws_, core_.state());
    }
    /// B (backward-p1): from slot i's output gradient; the input gradient is computed unless this is stage 0.
    void backward_input(std::size_t i, std::size_t b) {
        program().backward_input(*stack_, parameters(), act_[i], b, ws_, index() > 0, core_.state());
    }
    /// W (backward-p2): adds slot i's weight gradients into gradient().
    void backward_weight(std::size_t i, std::size_t b) {
        program().backward_weight(*stack_, parameters(), core_.gradient(), act_[i], b, ws_);
    }
    /// BW: p1 and p2 of slot i in one pass (2BP off).
    void backward_fused(std::size_t i, std::size_t b) {
        program().backward(*stack_, parameters(), core_.gradient(), act_[i], b, ws_, index() > 0, core_.state());
    }
    /// Optimizer step of the stage's block with its gradient and the step's hyperparameters h.
    void update(const optim::hyperparameters<double>& h) { opt_.step(core_.weights(), core_.gradient(), h); }

private:
    const stack_type* stack_;
    stage_core<Net, T> core_;
    std::size_t max_b_;
    Optimizer opt_;
    typename stack_type::workspaces ws_;
    std::size_t targets_per_sample_;
    std::vector<activations> act_;
    std::vector<std::int32_t> labels_;
};

}  // namespace pipeprop::sync
