// pipeprop/pb/stage_state.hpp: a PB stage's state made from the network type.
//
// pb::stage_state<Net, Policy, T, Optimizer> is the network-free basic_stage_state<Policy, T, Optimizer>
// (pb/basic_stage_state.hpp: what one stage owns and the per-stage operations both executors share) with
// constructors that read the network from its type: for a stage made outside an engine (tests, tools). The engine
// and the executors hold basic_stage_state, so their code does not depend on the network.
#pragma once

#include <cstddef>
#include <span>

#include "pipeprop/layer_stack.hpp"
#include "pipeprop/pb/basic_stage_state.hpp"
#include "pipeprop/stage_program.hpp"

namespace pipeprop::pb {

/// basic_stage_state made from network type Net (its layer_stack made for the constructor): stage `index` of
/// `stage_count` over layers `range` (the dynamic program) or with the stage's code `program`; arguments as
/// basic_stage_state's.
template <network_type Net, mitigation_policy Policy, class T, class Optimizer = optim::sgd<T>>
class stage_state : public basic_stage_state<Policy, T, Optimizer> {
    using base = basic_stage_state<Policy, T, Optimizer>;

public:
    using typename base::policy_parameters;
    ///@{
    /// See the class comment.
    stage_state(std::size_t index, std::size_t stage_count, layer_range range, std::span<const T> network_block,
                const policy_parameters& parameters)
        : base(layer_stack<Net, T>{}, index, stage_count, pipeprop::detail::make_stage_program<T, dynamic_range>(range),
               network_block, parameters) {}
    stage_state(std::size_t index, std::size_t stage_count, const stage_program<layer_stack<Net, T>>& program,
                std::span<const T> network_block, const policy_parameters& parameters, std::span<T> storage = {},
                const optim::adamw_config& adamw = {})
        : base(layer_stack<Net, T>{}, index, stage_count, program, network_block, parameters, storage, adamw) {}
    ///@}
};

}  // namespace pipeprop::pb
