// pipeprop/stage_core.hpp: what a pipeline stage holds whatever engine runs it (one stage state).
// pb::stage_state (Pipelined Backpropagation: adds the optimizer and policy state) and sync::stage (synchronous
// schedules: adds its optimizer, activation slots and workspaces) are built on it.
//
//   program   the stage's passes (stage_program.hpp: instantiated for its stage type, or over a runtime range)
//   weights   w [P], P = parameter_count_of(range): a copy the stage owns, or its slice of parameter storage the caller
//             owns (embedding in another framework: every update writes into the caller's block in place)
//   gradient  [P], the block backward-p2 ADDS into (the engine zeroes it)
//   state     [R], R = state_count_of(range): the running state of the stage's stateful layers (Online Normalization),
//             initialized by the layers' init_state
// All buffers are cache-line aligned and allocated by the constructor; nothing allocates afterwards.
#pragma once

#include <algorithm>
#include <cstddef>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include "pipeprop/layer_stack.hpp"
#include "pipeprop/stage_program.hpp"

namespace pipeprop {

/// The weights, gradient and running state of stage `index` of a network with value type T (see the file comment).
/// Network-free: only the constructor reads the network, through its runtime_layer_stack<T>; stage_core<Net, T> is
/// the same object made from the network type.
template <class T>
class basic_stage_core {
public:
    using stack_type = runtime_layer_stack<T>;  ///< The network's layers, seen through the network-free base.
    /// The stage's weights start as its slice of `network_block` [stack.parameter_count] (e.g. from
    /// layer_stack::init_parameters, which does not depend on the cut), copied into a block the stage owns; or, with
    /// `storage` [stack.parameter_count] given, the stage's weights ARE that block's slice (its values are the
    /// initial weights; network_block is not read and may be empty); the running state starts as the layers'
    /// init_state. Throws std::invalid_argument (naming `who`) for an empty range or one beyond the network, and for
    /// a block or storage of the wrong size.
    basic_stage_core(const stack_type& stack, std::size_t index, const basic_stage_program<T>& program,
                     std::span<const T> network_block, std::span<T> storage, const char* who)
        : program_(program), index_(index) {
        const layer_range r = program.range;
        if (r.begin >= r.end || r.end > stack.layer_count)
            throw std::invalid_argument(std::string(who) + ": stage " + std::to_string(index) + " range [" +
                                        std::to_string(r.begin) + ", " + std::to_string(r.end) +
                                        ") is empty or exceeds the network's " + std::to_string(stack.layer_count) +
                                        " layers");
        parameter_count_ = stack.parameter_count_of(r);
        const std::size_t offset = stack.parameter_offset[r.begin];
        if (!storage.empty()) {
            if (storage.size() != stack.parameter_count)
                throw std::invalid_argument(std::string(who) + ": the caller's parameter storage has " +
                                            std::to_string(storage.size()) + " elements, the network has " +
                                            std::to_string(stack.parameter_count) + " parameters");
            weights_ = storage.subspan(offset, parameter_count_);
        } else {
            if (network_block.size() != stack.parameter_count)
                throw std::invalid_argument(std::string(who) + ": the network parameter block has " +
                                            std::to_string(network_block.size()) + " elements, expected " +
                                            std::to_string(stack.parameter_count));
            owned_weights_.assign(network_block.begin() + static_cast<std::ptrdiff_t>(offset),
                                  network_block.begin() + static_cast<std::ptrdiff_t>(offset + parameter_count_));
            weights_ = owned_weights_;
        }
        gradient_.assign(parameter_count_, T(0));
        if (stack.state_count > 0) {
            std::vector<T> all(stack.state_count);
            stack.init_state(all);
            state_.assign(all.begin() + static_cast<std::ptrdiff_t>(stack.state_offset[r.begin]),
                          all.begin() + static_cast<std::ptrdiff_t>(stack.state_offset[r.end]));
        }
    }

    ///@{
    /// Movable, not copyable (the spans stay valid: they point into moved buffers or the caller's storage).
    basic_stage_core(basic_stage_core&&) noexcept = default;
    basic_stage_core& operator=(basic_stage_core&&) noexcept = default;
    ///@}

    /// The stage's passes (stage_program.hpp).
    [[nodiscard]] const basic_stage_program<T>& program() const noexcept { return program_; }
    [[nodiscard]] std::size_t index() const noexcept { return index_; }  ///< The stage's index s (0 = input side).
    /// The stage's layers [begin, end) of the flattened network.
    [[nodiscard]] layer_range range() const noexcept { return program_.range; }
    /// P: elements of the stage's parameter block (0 for a parameter-free stage).
    [[nodiscard]] std::size_t parameter_count() const noexcept { return parameter_count_; }
    /// True when the weights are a view of the caller's storage.
    [[nodiscard]] bool borrows_weights() const noexcept { return owned_weights_.empty() && parameter_count_ > 0; }

    ///@{
    /// The stage's weights [P]: its own block, or its slice of the caller's storage.
    [[nodiscard]] std::span<T> weights() noexcept { return weights_; }
    [[nodiscard]] std::span<const T> weights() const noexcept { return weights_; }
    ///@}
    ///@{
    /// The stage's gradient block [P]: backward-p2 adds into it; its owner zeroes it before each accumulation.
    [[nodiscard]] std::span<T> gradient() noexcept { return gradient_; }
    [[nodiscard]] std::span<const T> gradient() const noexcept { return gradient_; }
    ///@}
    ///@{
    /// Running state of the stage's stateful layers [state_count_of(range)] (empty when none).
    [[nodiscard]] std::span<T> state() noexcept { return state_; }
    [[nodiscard]] std::span<const T> state() const noexcept { return state_; }
    ///@}

private:
    basic_stage_program<T> program_{};
    std::size_t index_ = 0;
    std::size_t parameter_count_ = 0;
    aligned_vector<T> owned_weights_;  // w [P] when the stage owns its weights
    std::span<T> weights_;             // w [P]: owned_weights_ or the slice of the caller's storage
    aligned_vector<T> gradient_;       // [P]
    aligned_vector<T> state_;          // [R]
};

/// basic_stage_core made from network type Net: the constructor reads the tables and initial running state of
/// layer_stack<Net, T> (see basic_stage_core).
template <network_type Net, class T>
class stage_core : public basic_stage_core<T> {
public:
    /// As basic_stage_core's, with the network's layer_stack made here.
    stage_core(std::size_t index, const stage_program<layer_stack<Net, T>>& program, std::span<const T> network_block,
               std::span<T> storage, const char* who)
        : basic_stage_core<T>(layer_stack<Net, T>{}, index, program, network_block, storage, who) {}
};

}  // namespace pipeprop
