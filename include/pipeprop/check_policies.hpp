// pipeprop/check_policies.hpp: the compile-time checks every trainer and engine makes of its loss and optimizer
// policies (sequential_trainer, sync::schedule_executor, pb::engine), each failure a sentence.
#pragma once

#include <type_traits>

#include "pipeprop/loss/loss_policy.hpp"
#include "pipeprop/optim/optimizer_policy.hpp"

namespace pipeprop {

/// Loss is a loss policy over value type T that reads the network's per-sample output OutputShape, and Optimizer is
/// an optimizer policy over T. Use as static_assert(check_policies<...>()).
template <class Loss, class Optimizer, class T, class OutputShape>
constexpr bool check_policies() {
    static_assert(check_loss_fits_output<Loss, OutputShape>());
    if constexpr (loss_policy<Loss>)
        static_assert(std::is_same_v<typename Loss::value_type, T>,
                      "pipeprop: the Loss must be instantiated for the value type T of the trainer or engine.");
    static_assert(optim::optimizer_policy<Optimizer>,
                  "pipeprop: the Optimizer is not an optimizer policy (optim/optimizer_policy.hpp: config_type, name, "
                  "state_buffer_names, check, step, step_count, state_buffer).");
    if constexpr (optim::optimizer_policy<Optimizer>)
        static_assert(std::is_same_v<typename Optimizer::value_type, T>,
                      "pipeprop: the Optimizer must be instantiated for the value type T of the trainer or engine.");
    return true;
}

}  // namespace pipeprop
