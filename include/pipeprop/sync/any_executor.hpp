// pipeprop/sync/any_executor.hpp: a synchronous executor whose schedule kind and 2BP flag are chosen at run time
// (e.g. from a command line). Since the schedules are op lists run by one compiled executor, this is
// schedule_executor itself: code that drives it (a training loop) is compiled once per network.
#pragma once

#include <memory>
#include <utility>
#include <vector>

#include "pipeprop/sync/schedule_executor.hpp"

namespace pipeprop::sync {

/// The executor behind a run-time schedule choice (see schedule_executor for every member's contract).
template <network_type Net, class T = float, class Loss = pipeprop::detail::default_loss_t<Net, T>,
          class Optimizer = optim::sgd<T>>
using any_executor = schedule_executor<Net, T, Loss, Optimizer>;

/// A schedule_executor running `kind` with 2BP on or off. Throws as its constructor.
template <network_type Net, class T = float, class Loss = pipeprop::detail::default_loss_t<Net, T>,
          class Optimizer = optim::sgd<T>>
[[nodiscard]] std::unique_ptr<any_executor<Net, T, Loss, Optimizer>> make_any_executor(
    schedule_kind kind, bool two_stage_bp, std::vector<layer_range> stages,
    const typename any_executor<Net, T, Loss, Optimizer>::options_type& opt) {
    return std::make_unique<any_executor<Net, T, Loss, Optimizer>>(kind, two_stage_bp, std::move(stages), opt);
}

}  // namespace pipeprop::sync
