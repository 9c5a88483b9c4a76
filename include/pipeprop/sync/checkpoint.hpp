// pipeprop/sync/checkpoint.hpp: saving and restoring a synchronous pipeline (sync::schedule_executor) between steps
// through pipeprop's checkpoint format (pipeprop/checkpoint.hpp). Between steps the state is the parameters, the
// momentum velocity, the running state of stateful layers and the counters; the schedule and the cut are not part
// of it (a checkpoint resumes under any schedule, cut or micro-batch count, and in --mode sgd).
//
// The names are the sequential trainer's (sequential_trainer::save_state with momentum SGD): layer_XX.<tensor>,
// layer_XX.<tensor>.velocity, <node>.<state tensor>, scalars step_count, samples_seen, init_seed, so a checkpoint
// moves freely between the sequential trainer and the synchronous pipeline.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "pipeprop/checkpoint.hpp"
#include "pipeprop/sync/schedule_executor.hpp"

namespace pipeprop::sync {

/// Adds the executor's state to c: signature, parameters, velocity, running state, scalars step_count (the
/// executor's steps()), samples_seen and init_seed (the caller's). Throws checkpoint_error on a name clash.
template <network_type Net, class T, class Loss>
void save_state(const schedule_executor<Net, T, Loss>& ex, checkpoint& c, std::uint64_t samples_seen,
                std::uint64_t init_seed) {
    c.signature = signature_of<Net, T>();
    const std::vector<T> w = ex.parameters(), v = ex.velocity(), s = ex.state();
    add_network_tensors<Net, T>(c, std::span<const T>(w));
    add_network_tensors<Net, T>(c, std::span<const T>(v), "velocity");
    add_network_state<Net, T>(c, std::span<const T>(s));
    c.set_scalar("step_count", ex.steps());
    c.set_scalar("samples_seen", samples_seen);
    c.set_scalar("init_seed", init_seed);
}

/// What load_state read besides the executor's tensors.
struct loaded_counters {
    std::uint64_t step_count = 0;
    std::uint64_t samples_seen = 0;
};

/// Replaces the executor's parameters, velocity, running state and step counter with c's (saved by save_state or by the
/// sequential trainer with momentum SGD) and returns the counters. Checks the signature first (checkpoint_error
/// naming `where` and the first difference); throws checkpoint_error for a missing or mis-shaped tensor or scalar,
/// before anything is changed.
template <network_type Net, class T, class Loss>
loaded_counters load_state(const checkpoint& c, schedule_executor<Net, T, Loss>& ex, const std::string& where) {
    using stack_type = layer_stack<Net, T>;
    require_signature(c, signature_of<Net, T>(), where);
    std::vector<T> w(stack_type::parameter_count), v(stack_type::parameter_count), s(stack_type::state_count);
    read_network_tensors<Net, T>(c, std::span<T>(w));
    read_network_tensors<Net, T>(c, std::span<T>(v), "velocity");
    read_network_state<Net, T>(c, std::span<T>(s));
    const loaded_counters n{c.scalar_as<std::uint64_t>("step_count"), c.scalar_as<std::uint64_t>("samples_seen")};
    ex.set_parameters(w);
    ex.set_velocity(v);
    ex.set_state(s);
    ex.set_steps(n.step_count);
    return n;
}

}  // namespace pipeprop::sync
