// pipeprop/sync/checkpoint.hpp: saving and restoring a synchronous pipeline (sync::schedule_executor) between steps
// through pipeprop's checkpoint format (pipeprop/checkpoint.hpp). Between steps the state is the parameters, the
// optimizer's state, the running state of stateful layers and the counters; the schedule and the cut are not part
// of it (a checkpoint resumes under any schedule, cut or micro-batch count, and in --mode sgd).
//
// The layout is the trainers' (checkpoint/training_state.hpp: parameters, optimizer state buffers, running state,
// scalars optimizer, step_count, samples_seen, init_seed), so a checkpoint moves freely between the sequential
// trainer and the synchronous pipeline with the same optimizer.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "pipeprop/checkpoint.hpp"
#include "pipeprop/sync/schedule_executor.hpp"

namespace pipeprop::sync {

/// Adds the executor's state to c in the trainers' layout (checkpoint/training_state.hpp): signature, parameters,
/// the optimizer's state buffers, running state, scalars optimizer, step_count (the executor's steps()),
/// samples_seen and init_seed (the caller's). Throws checkpoint_error on a name clash.
template <network_type Net, class T, class Loss, class Optimizer>
void save_state(const schedule_executor<Net, T, Loss, Optimizer>& ex, checkpoint& c, std::uint64_t samples_seen,
                std::uint64_t init_seed) {
    const std::vector<T> w = ex.parameters(), s = ex.state();
    std::vector<std::vector<T>> buffers;
    std::vector<std::span<const T>> views;
    for (std::size_t k = 0; k < ex.optimizer_buffer_count; ++k) buffers.push_back(ex.optimizer_state(k));
    for (const auto& b : buffers) views.emplace_back(b);
    add_training_state<Net, Optimizer, T>(c, std::span<const T>(w), views, std::span<const T>(s), ex.steps(),
                                          samples_seen, init_seed);
}

/// What load_state read besides the executor's tensors.
struct loaded_counters {
    std::uint64_t step_count = 0;  ///< The step count saved (optimizer steps done).
    std::uint64_t samples_seen = 0;  ///< The samples consumed up to the checkpoint.
};

/// Replaces the executor's parameters, optimizer state and step counts, running state and step counter with c's
/// (saved by save_state or by the sequential trainer with the same optimizer) and returns the counters. Throws
/// checkpoint_error (read_training_state: another network, another optimizer, a missing or mis-shaped tensor or
/// scalar) before anything is changed.
template <network_type Net, class T, class Loss, class Optimizer>
loaded_counters load_state(const checkpoint& c, schedule_executor<Net, T, Loss, Optimizer>& ex,
                           const std::string& where) {
    const training_state<T> st = read_training_state<Net, Optimizer, T>(c, where);
    ex.set_parameters(st.parameters);
    for (std::size_t k = 0; k < st.optimizer_state.size(); ++k) ex.set_optimizer_state(k, st.optimizer_state[k]);
    ex.set_state(st.state);
    ex.set_steps(st.step_count);
    ex.set_optimizer_step_count(st.step_count);
    return {st.step_count, st.samples_seen};
}

}  // namespace pipeprop::sync
