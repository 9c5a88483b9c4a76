// pipeprop/executor_kind.hpp: which executor runs a pipeline, shared by PB (pb::engine) and the synchronous
// schedules (sync::schedule_executor). Both kinds run the same stage code and give identical bits:
//   sequential: the reference, one thread running the ops in a fixed valid order;
//   concurrent: a oneTBB flow graph of serial nodes, one per stage (or per lane of stages, PB).
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>
#include <string_view>

namespace pipeprop {

/// Which executor runs the pipeline.
enum class executor_kind : std::uint8_t {
    sequential,  ///< the reference: one thread, a fixed valid order of the ops
    concurrent,  ///< oneTBB flow graph: serial nodes, all running concurrently
};

/// "sequential" or "concurrent".
[[nodiscard]] constexpr std::string_view to_string(executor_kind k) noexcept {
    return k == executor_kind::sequential ? "sequential" : "concurrent";
}

/// Parses "sequential" or "concurrent"; throws std::invalid_argument naming the accepted values otherwise.
[[nodiscard]] inline executor_kind parse_executor_kind(std::string_view s) {
    if (s == "sequential") return executor_kind::sequential;
    if (s == "concurrent") return executor_kind::concurrent;
    throw std::invalid_argument("pipeprop: unknown executor '" + std::string(s) +
                                "' (expected sequential or concurrent)");
}

}  // namespace pipeprop
