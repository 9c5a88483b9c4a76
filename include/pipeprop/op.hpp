// pipeprop/op.hpp: the operations a pipeline stage runs, for every engine: the op lists of the synchronous
// schedules (sync/schedule.hpp) and the op stream of Pipelined Backpropagation (pb/op_stream.hpp) are lists of
// these, and both engines' executors run them through one flow graph (lane_graph.hpp).
//
// 2BP-paper (Rae et al., arXiv 2405.18047) §3; ZB-paper (Qi et al., arXiv 2401.10241) §2 (F, B, W); PB-paper
// (Kosson et al., arXiv 2003.11666) §3 (a PB stage updates after every micro-batch's backward: U).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace pipeprop {

/// What one operation of a stage does.
enum class op_kind : std::uint8_t {
    forward,          ///< F: forward of a micro-batch over the stage's layers (the last stage also its loss)
    backward_input,   ///< B: backward-p1 (input gradient, sent upstream at once)
    backward_weight,  ///< W: backward-p2 (weight gradient, ADDED into the stage's gradient block)
    backward_fused,   ///< BW: p1 and p2 in one op (2BP off)
    update,           ///< U: the stage's optimizer step (PB: after every micro-batch; synchronous: once per step)
};

/// One operation of a stage: what, on which micro-batch (synchronous: the index within the step; PB: the id).
struct op {
    op_kind kind = op_kind::forward;  ///< F, B, P1, P2 or U.
    std::size_t micro_batch = 0;  ///< Synchronous: index within the step; PB: the micro-batch id.
    friend constexpr bool operator==(op, op) = default;
};

/// True when op o produces the input gradient sent upstream (B or BW).
[[nodiscard]] constexpr bool is_backward_p1(op o) noexcept {
    return o.kind == op_kind::backward_input || o.kind == op_kind::backward_fused;
}

/// Short name of an operation kind as in the ZB-paper's figures: "F", "B", "W", "BW", and "U".
[[nodiscard]] constexpr std::string_view short_name(op_kind k) noexcept {
    switch (k) {
        case op_kind::forward: return "F";
        case op_kind::backward_input: return "B";
        case op_kind::backward_weight: return "W";
        case op_kind::backward_fused: return "BW";
        case op_kind::update: return "U";
    }
    return "?";
}

/// The phase name of an operation kind in error messages: "forward", "backward-p1", "backward-p2", ...
[[nodiscard]] constexpr const char* phase_name(op_kind k) noexcept {
    switch (k) {
        case op_kind::forward: return "forward";
        case op_kind::backward_input: return "backward-p1";
        case op_kind::backward_weight: return "backward-p2";
        case op_kind::backward_fused: return "backward (fused)";
        case op_kind::update: return "update";
    }
    return "op";
}

}  // namespace pipeprop
