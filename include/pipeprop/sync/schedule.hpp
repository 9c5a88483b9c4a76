// pipeprop/sync/schedule.hpp: synchronous pipeline schedules as data: for p stages and m micro-batches of one
// optimizer step, the ordered list of operations every stage executes.
//
// One source of truth: the simulator (sync/simulator.hpp) times exactly these lists, and the executors
// (sync/executor.hpp) run exactly these lists, op by op, on every stage.
//
// Operations (2BP-paper, Rae et al. arXiv 2405.18047, §3; ZB-paper, Qi et al. arXiv 2401.10241, §2: F, B, W):
//   F  (forward)          forward of micro-batch j over the stage's layers; the last stage also computes the loss
//                         and its gradient (shared/docs/2bp-schedules.md §3: mean over the whole batch).
//   B  (backward-p1)      input gradients of micro-batch j; sent upstream at once.
//   W  (backward-p2)      weight gradients of micro-batch j, ADDED into the stage's gradient block.
//   BW (fused backward)   2BP off: p1 and p2 of micro-batch j in one op (layer by layer, last first); its input
//                         gradient is sent upstream when the whole op is done.
//
// Generators (stage s in [0, p), 0 = input side; micro-batches j in [0, m), any m >= 1 including m < p):
//   gpipe (Huang et al. 2019):      F0 .. F(m-1), then the backwards in micro-batch order.
//       2BP on (2BP-paper §3, Fig. 1): F0 .. F(m-1), B0 .. B(m-1), W0 .. W(m-1).
//   one_f_one_b (PipeDream-Flush, Narayanan et al. 2021 §3; the 2BP-paper's 1F1B-1 is m = p, 1F1B-2 is m = 2p):
//       w_s = min(p - 1 - s, m) warm-up F's, then F(w_s + i), B(i) alternating, then the cool-down B's.
//       2BP on (2BP-paper §3): the same F/B order, every W after the stage's last B (W0 .. W(m-1)).
//   zb_h1 (ZB-paper §3.1, "ZB-H1"): the 1F1B F/B order; stage s lets its W's lag its B's by s positions
//       (W(i - s) right after B(i)), so that the B's of the later stages, which lie on the critical path, run
//       earlier, and the W's fill the tail bubbles. At most p micro-batches in flight on every stage (1F1B's peak).
//   zb_h2 (ZB-paper §3.1, "ZB-H2"): 2(p - 1 - s) warm-up F's on stage s (capped by m) and W's lagging their B's
//       by 2s positions: every stage holds up to 2p - 1 micro-batches in flight (the ZB-paper's memory for H2), the
//       first stage's extra F's and the last stage's trailing W's turn the step into a parallelogram, whose
//       steady state (steps back to back) has no bubble when T_F = T_B = T_W (sync/simulator.hpp).
// With 2BP off, zb_h1 and zb_h2 keep their B positions and run p2 inside them (BW): zb_h1 then IS one_f_one_b;
// zero-bubble schedules need the split backward to gain anything.
//
// Every generated schedule is checked by validate() (each micro-batch's F, B and W exactly once per stage, in
// that order; deadlock-free under the dependency model).
//
// Consecutive steps (consecutive_steps): the lists of k optimizer steps back to back on every stage, each stage's
// optimizer step of step n right after its last op of step n, with no barrier between the steps: stage s starts
// step n + 1 while later stages still finish step n (ZB-paper §3.1's steady state, where ZB-H2's parallelogram
// tiles without a bubble). Still exact synchronous training: every op of step n + 1 on stage s runs on the weights
// of s's update n, and a stage's ops never read another stage's weights.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "pipeprop/op.hpp"

namespace pipeprop::sync {

/// The synchronous pipeline schedules (see the file comment).
enum class schedule_kind : std::uint8_t {
    gpipe,        ///< GPipe: all forwards, then all backwards
    one_f_one_b,  ///< 1F1B (PipeDream-Flush)
    zb_h1,        ///< zero-bubble ZB-H1 (1F1B memory)
    zb_h2,        ///< zero-bubble ZB-H2 (about 2p - 1 micro-batches in flight)
};

/// The operations (pipeprop/op.hpp): the schedules' lists hold F, B, W and BW; each stage's optimizer step (U)
/// follows its list's last op.
using pipeprop::op;
using pipeprop::op_kind;
using pipeprop::short_name;

/// Command-line name of a schedule kind: "gpipe", "1f1b", "zb_h1", "zb_h2".
[[nodiscard]] constexpr std::string_view name(schedule_kind k) noexcept {
    switch (k) {
        case schedule_kind::gpipe: return "gpipe";
        case schedule_kind::one_f_one_b: return "1f1b";
        case schedule_kind::zb_h1: return "zb_h1";
        case schedule_kind::zb_h2: return "zb_h2";
    }
    return "?";
}

/// Parses a command-line schedule name (see name()). Throws std::invalid_argument listing the valid names.
[[nodiscard]] inline schedule_kind parse_schedule_kind(std::string_view s) {
    for (auto k : {schedule_kind::gpipe, schedule_kind::one_f_one_b, schedule_kind::zb_h1, schedule_kind::zb_h2})
        if (s == name(k)) return k;
    throw std::invalid_argument("pipeprop::sync: unknown schedule '" + std::string(s) +
                                "' (expected gpipe, 1f1b, zb_h1 or zb_h2)");
}

/// A schedule: ops[s] is the ordered op list of stage s. p = ops.size() stages, `micro_batches` micro-batches over
/// all `steps` optimizer steps in the lists (micro_batches / steps per step; micro-batch j of step n is
/// n * (micro_batches / steps) + j, and every stage runs all of step n's ops before any of step n + 1's).
struct schedule {
    schedule_kind kind = schedule_kind::gpipe;
    bool two_stage_bp = false;  ///< true: B and W are separate ops; false: fused BW ops
    std::size_t stages = 0;
    std::size_t micro_batches = 0;
    std::vector<std::vector<op>> ops;
    std::size_t steps = 1;  ///< optimizer steps in the lists (consecutive_steps); each stage updates after its step

    /// Micro-batches of one optimizer step (micro_batches / steps).
    [[nodiscard]] std::size_t micro_batches_per_step() const noexcept {
        return steps > 0 ? micro_batches / steps : 0;
    }

    /// "gpipe+2bp", "1f1b", ...
    [[nodiscard]] std::string label() const {
        return std::string(name(kind)) + (two_stage_bp ? "+2bp" : "");
    }
};

namespace detail {

/// Appends the backward of micro-batch j: BW(j) when 2BP is off, B(j) when it is on.
inline void push_backward(std::vector<op>& l, std::size_t j, bool split) {
    l.push_back({split ? op_kind::backward_input : op_kind::backward_fused, j});
}

/// 1F1B-shaped list with `warmup` warm-up forwards and, when split, W(i - lag) right after B(i) (W's that are
/// still due after the last B follow it in order). split == false ignores lag (BW ops).
inline std::vector<op> one_f_one_b_list(std::size_t m, std::size_t warmup, bool split, std::size_t lag,
                                        bool all_w_at_end) {
    std::vector<op> l;
    l.reserve(3 * m);
    warmup = std::min(warmup, m);
    std::size_t next_f = 0, next_w = 0;
    for (; next_f < warmup; ++next_f) l.push_back({op_kind::forward, next_f});
    for (std::size_t i = 0; i < m; ++i) {  // i: the micro-batch whose backward comes next
        if (next_f < m) l.push_back({op_kind::forward, next_f++});
        push_backward(l, i, split);
        if (split && !all_w_at_end && i >= lag) l.push_back({op_kind::backward_weight, next_w++});
    }
    if (split)
        for (; next_w < m; ++next_w) l.push_back({op_kind::backward_weight, next_w});
    return l;
}

}  // namespace detail

namespace detail {
inline void check_sizes(std::size_t p, std::size_t m, const char* who) {
    if (p == 0 || m == 0)
        throw std::invalid_argument(std::string("pipeprop::sync::") + who + ": needs at least one stage and one " +
                                    "micro-batch (got p = " + std::to_string(p) + ", m = " + std::to_string(m) + ")");
}
}  // namespace detail

/// GPipe (Huang et al. 2019) for p stages and m micro-batches; 2BP on: all F, all B, all W (2BP-paper Fig. 1).
/// Throws std::invalid_argument when p == 0 or m == 0 (as do all generators).
[[nodiscard]] inline schedule gpipe(std::size_t p, std::size_t m, bool two_stage_bp) {
    detail::check_sizes(p, m, "gpipe");
    schedule sc{schedule_kind::gpipe, two_stage_bp, p, m, std::vector<std::vector<op>>(p)};
    for (auto& l : sc.ops) {
        for (std::size_t j = 0; j < m; ++j) l.push_back({op_kind::forward, j});
        for (std::size_t j = 0; j < m; ++j) detail::push_backward(l, j, two_stage_bp);
        if (two_stage_bp)
            for (std::size_t j = 0; j < m; ++j) l.push_back({op_kind::backward_weight, j});
    }
    return sc;
}

/// 1F1B / PipeDream-Flush (Narayanan et al. 2021 §3); 2BP on: every W after the stage's last B (2BP-paper §3).
[[nodiscard]] inline schedule one_f_one_b(std::size_t p, std::size_t m, bool two_stage_bp) {
    detail::check_sizes(p, m, "one_f_one_b");
    schedule sc{schedule_kind::one_f_one_b, two_stage_bp, p, m, std::vector<std::vector<op>>(p)};
    for (std::size_t s = 0; s < p; ++s) sc.ops[s] = detail::one_f_one_b_list(m, p - 1 - s, two_stage_bp, 0, true);
    return sc;
}

/// ZB-H1 (ZB-paper §3.1): W lags B by s positions on stage s. 2BP off: identical to one_f_one_b.
[[nodiscard]] inline schedule zb_h1(std::size_t p, std::size_t m, bool two_stage_bp) {
    detail::check_sizes(p, m, "zb_h1");
    schedule sc{schedule_kind::zb_h1, two_stage_bp, p, m, std::vector<std::vector<op>>(p)};
    for (std::size_t s = 0; s < p; ++s) sc.ops[s] = detail::one_f_one_b_list(m, p - 1 - s, two_stage_bp, s, false);
    return sc;
}

/// ZB-H2 (ZB-paper §3.1): 2(p-1-s) warm-up F's, W lags B by 2s positions. 2BP off: 1F1B with the extra
/// warm-up.
[[nodiscard]] inline schedule zb_h2(std::size_t p, std::size_t m, bool two_stage_bp) {
    detail::check_sizes(p, m, "zb_h2");
    schedule sc{schedule_kind::zb_h2, two_stage_bp, p, m, std::vector<std::vector<op>>(p)};
    for (std::size_t s = 0; s < p; ++s)
        sc.ops[s] = detail::one_f_one_b_list(m, 2 * (p - 1 - s), two_stage_bp, 2 * s, false);
    return sc;
}

/// The op lists of k consecutive optimizer steps of the one-step schedule sc, without a barrier between them (see
/// the file comment): stage s runs sc.ops[s] for step 0 (micro-batches 0 .. m-1), its optimizer step, then sc.ops[s]
/// for step 1 (micro-batches m .. 2m-1), and so on. Throws std::invalid_argument for k == 0 or an sc that already
/// holds several steps.
[[nodiscard]] inline schedule consecutive_steps(const schedule& sc, std::size_t k) {
    if (k == 0 || sc.steps != 1)
        throw std::invalid_argument("pipeprop::sync::consecutive_steps: needs k >= 1 and a one-step schedule (got k = " +
                                    std::to_string(k) + ", steps = " + std::to_string(sc.steps) + ")");
    schedule out{sc.kind, sc.two_stage_bp, sc.stages, sc.micro_batches * k, std::vector<std::vector<op>>(sc.stages), k};
    for (std::size_t s = 0; s < sc.stages; ++s) {
        out.ops[s].reserve(sc.ops[s].size() * k);
        for (std::size_t n = 0; n < k; ++n)
            for (const op o : sc.ops[s]) out.ops[s].push_back({o.kind, n * sc.micro_batches + o.micro_batch});
    }
    return out;
}

/// The schedule of a kind (dispatch to the generators above).
[[nodiscard]] inline schedule make_schedule(schedule_kind k, std::size_t p, std::size_t m, bool two_stage_bp) {
    switch (k) {
        case schedule_kind::gpipe: return gpipe(p, m, two_stage_bp);
        case schedule_kind::one_f_one_b: return one_f_one_b(p, m, two_stage_bp);
        case schedule_kind::zb_h1: return zb_h1(p, m, two_stage_bp);
        case schedule_kind::zb_h2: return zb_h2(p, m, two_stage_bp);
    }
    throw std::invalid_argument("pipeprop::sync::make_schedule: unknown schedule kind");
}

}  // namespace pipeprop::sync
