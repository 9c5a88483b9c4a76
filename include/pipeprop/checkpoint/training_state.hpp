// pipeprop/checkpoint/training_state.hpp: the one checkpoint layout of a trainer's state between updates, written
// and read by sequential_trainer and sync::schedule_executor (sync/checkpoint.hpp), so that a checkpoint moves freely
// between them (pb/checkpoint.hpp writes the same weight and velocity names plus PB's own extras):
//   layer_XX.<tensor>                       parameters (node names: checkpoint/signature.hpp)
//   layer_XX.<tensor>.<state buffer name>   the optimizer's state (velocity; first_moment, second_moment)
//   <node>.<state tensor>                   running state of stateful layers
//   scalars optimizer (the policy's name), step_count, samples_seen, init_seed
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "pipeprop/checkpoint/content.hpp"
#include "pipeprop/checkpoint/network_tensors.hpp"
#include "pipeprop/checkpoint/signature.hpp"
#include "pipeprop/layer_stack.hpp"
#include "pipeprop/optim/optimizer_policy.hpp"

namespace pipeprop {

/// A trainer's state between updates, whole-network layouts.
template <class T>
struct training_state {
    std::vector<T> parameters;                   ///< [parameter_count]
    std::vector<std::vector<T>> optimizer_state; ///< per state buffer of the optimizer: [parameter_count]
    std::vector<T> state;                        ///< running state [state_count]
    std::uint64_t step_count = 0;                ///< updates applied
    std::uint64_t samples_seen = 0;  ///< samples consumed
};

/// Adds the state to c (signature, tensors, scalars optimizer = Optimizer::name, step_count, samples_seen,
/// init_seed). optimizer_state[k] holds buffer Optimizer::state_buffer_names[k]. Throws checkpoint_error on a name
/// clash with what c already holds, std::invalid_argument for a wrong number of buffers.
template <network_type Net, optim::optimizer_policy Optimizer, class T>
void add_training_state(checkpoint& c, std::span<const T> parameters,
                        const std::vector<std::span<const T>>& optimizer_state, std::span<const T> state,
                        std::uint64_t step_count, std::uint64_t samples_seen, std::uint64_t init_seed) {
    if (optimizer_state.size() != Optimizer::state_buffer_names.size())
        throw std::invalid_argument("pipeprop::add_training_state: " + std::to_string(optimizer_state.size()) +
                                    " optimizer state buffers, " + std::string(Optimizer::name) + " has " +
                                    std::to_string(Optimizer::state_buffer_names.size()));
    c.signature = signature_of<Net, T>();
    add_network_tensors<Net, T>(c, parameters);
    for (std::size_t k = 0; k < optimizer_state.size(); ++k)
        add_network_tensors<Net, T>(c, optimizer_state[k], Optimizer::state_buffer_names[k]);
    add_network_state<Net, T>(c, state);
    c.set_scalar("optimizer", std::string(Optimizer::name));
    c.set_scalar("step_count", step_count);
    c.set_scalar("samples_seen", samples_seen);
    c.set_scalar("init_seed", init_seed);
}

/// Reads the state of add_training_state (or of a PB checkpoint, whose weights and velocity have the same names)
/// from c, changing nothing else. Throws checkpoint_error naming `where` when c was made for another network (the
/// first difference) or by another optimizer (scalar optimizer; a checkpoint without it is read as momentum
/// SGD's), or a tensor or scalar is missing or mis-shaped.
template <network_type Net, optim::optimizer_policy Optimizer, class T = typename Optimizer::value_type>
[[nodiscard]] training_state<T> read_training_state(const checkpoint& c, const std::string& where) {
    using stack_type = layer_stack<Net, T>;
    require_signature(c, signature_of<Net, T>(), where);
    const std::string made_by = c.has_scalar("optimizer") ? c.scalar("optimizer") : std::string("sgd");
    if (made_by != Optimizer::name)
        throw checkpoint_error(where + ": the checkpoint holds the state of optimizer " + made_by + ", this run uses " +
                               Optimizer::name + " (resume with the optimizer that made it)");
    training_state<T> s;
    s.parameters.resize(stack_type::parameter_count);
    read_network_tensors<Net, T>(c, std::span<T>(s.parameters));
    for (std::size_t k = 0; k < Optimizer::state_buffer_names.size(); ++k) {
        s.optimizer_state.emplace_back(stack_type::parameter_count);
        read_network_tensors<Net, T>(c, std::span<T>(s.optimizer_state.back()), Optimizer::state_buffer_names[k]);
    }
    s.state.resize(stack_type::state_count);
    read_network_state<Net, T>(c, std::span<T>(s.state));
    s.step_count = c.scalar_as<std::uint64_t>("step_count");
    s.samples_seen = c.scalar_as<std::uint64_t>("samples_seen");
    return s;
}

}  // namespace pipeprop
