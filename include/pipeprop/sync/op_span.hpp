// pipeprop/sync/op_span.hpp: one timed operation of one stage: what the executors record and the simulator
// predicts; the trace writers (sync/trace.hpp) turn lists of them into timelines.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

#include "pipeprop/sync/schedule.hpp"

namespace pipeprop::sync {

/// What a span covers: one of the schedule's ops, or the stage's optimizer step (momentum_update on the stage's
/// parameter block after all its W / BW ops).
enum class span_kind : std::uint8_t { forward, backward_input, backward_weight, backward_fused, optimizer };

/// The span kind of a schedule op.
[[nodiscard]] constexpr span_kind span_kind_of(op_kind k) noexcept {
    switch (k) {
        case op_kind::forward: return span_kind::forward;
        case op_kind::backward_input: return span_kind::backward_input;
        case op_kind::backward_weight: return span_kind::backward_weight;
        case op_kind::backward_fused: return span_kind::backward_fused;
        case op_kind::update: return span_kind::optimizer;
    }
    return span_kind::optimizer;
}

/// Trace name of a span kind: "F", "p1", "p2", "p1+p2", "optimizer".
[[nodiscard]] constexpr std::string_view trace_name(span_kind k) noexcept {
    switch (k) {
        case span_kind::forward: return "F";
        case span_kind::backward_input: return "p1";
        case span_kind::backward_weight: return "p2";
        case span_kind::backward_fused: return "p1+p2";
        case span_kind::optimizer: return "optimizer";
    }
    return "?";
}

/// One timed op. Times in seconds from the start of the step (executor) or of the simulation; start <= end.
/// micro_batch is meaningless for the optimizer span.
struct op_span {
    std::size_t stage = 0;  ///< The stage that ran the op.
    span_kind kind = span_kind::forward;  ///< Forward, backward (-p1, -p2, fused) or optimizer.
    std::size_t micro_batch = 0;  ///< The op's micro-batch (index within the step).
    ///@{
    /// Start and end time, seconds (see the class comment).
    double start = 0;
    double end = 0;
    ///@}
    std::size_t step = 0;  ///< optimizer step the op belongs to (0 for a single step)
};

}  // namespace pipeprop::sync
