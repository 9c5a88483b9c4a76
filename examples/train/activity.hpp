// examples/train/activity.hpp: what the main program is doing now (loading the data, building an engine, training,
// evaluating), for the one message that has nothing else to go on: a std::bad_alloc, which says only that some
// allocation failed. The modes and the epoch loop call set_activity before each phase that allocates; the phase
// stays until the next one (no scope guard: a guard would be unwound before main's handler reads it). main reports
// "out of memory while <activity>" with the run's network, mode and sizes and the options that lower them.
#pragma once

#include <string>
#include <utility>

namespace train {

/// The phase set last ("starting" before any), e.g. "building the --mode pb engine: 4 stages, micro-batch 1".
[[nodiscard]] inline std::string& current_activity() {
    static std::string activity = "starting";
    return activity;
}

/// Records the phase about to start. If recording it fails for lack of memory, the previous phase stays.
inline void set_activity(std::string what) noexcept {
    try {
        current_activity() = std::move(what);
    } catch (...) {
    }
}

}  // namespace train
