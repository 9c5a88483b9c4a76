// pipeprop/sync/schedule.hpp: synchronous pipeline schedules as data: for p stages and m micro-batches of one
// optimizer step, the ordered op list (F, B, W, BW; pipeprop/op.hpp) every stage executes. The simulator
// (sync/simulator.hpp) times exactly these lists and the executors (sync/schedule_executor.hpp) run exactly these
// lists, op by op, on every stage.
//
// The schedules, their orders, bubbles and memory: docs/schedules.md §2 (2BP-paper, Rae et al. arXiv 2405.18047, §3;
// ZB-paper, Qi et al. arXiv 2401.10241, §2, §3.1, §6; Megatron-LM, Narayanan et al. 2021 §2.2). Stage s in [0, p),
// 0 = input side; micro-batches j in [0, m), any m >= 1 including m < p. Virtual-stage schedules (interleaved_1f1b,
// zb_v) put several stages on one device: schedule::device_of and schedule::device_order. consecutive_steps: the
// lists of k steps back to back without a barrier. Every generated schedule passes validate() (each micro-batch's F,
// B and W exactly once per stage, in that order; deadlock-free under the dependency model). Generators throw
// std::invalid_argument for p == 0, m == 0 or a stage count their placement cannot split.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "pipeprop/op.hpp"

namespace pipeprop::sync {

/// The synchronous pipeline schedules (see the file comment).
enum class schedule_kind : std::uint8_t {
    gpipe,        ///< GPipe: all forwards, then all backwards
    one_f_one_b,  ///< 1F1B (PipeDream-Flush)
    zb_h1,        ///< zero-bubble ZB-H1 (1F1B memory)
    zb_h2,        ///< zero-bubble ZB-H2 (about 2p - 1 micro-batches in flight)
    interleaved_1f1b,  ///< interleaved 1F1B (Megatron-LM): v stages per device
    zb_v,              ///< zero-bubble ZB-V: 2 stages per device, V-shaped placement
};

/// All schedule kinds, in the order of name().
inline constexpr schedule_kind all_schedule_kinds[] = {schedule_kind::gpipe,    schedule_kind::one_f_one_b,
                                                       schedule_kind::zb_h1,    schedule_kind::zb_h2,
                                                       schedule_kind::interleaved_1f1b, schedule_kind::zb_v};

/// True for the kinds with several stages per device (virtual stages).
[[nodiscard]] constexpr bool has_virtual_stages(schedule_kind k) noexcept {
    return k == schedule_kind::interleaved_1f1b || k == schedule_kind::zb_v;
}

/// The operations (pipeprop/op.hpp): the schedules' lists hold F, B, W and BW; each stage's optimizer step (U)
/// follows its list's last op.
using pipeprop::op;
using pipeprop::op_kind;
using pipeprop::short_name;

/// Command-line name of a schedule kind: "gpipe", "1f1b", "zb_h1", "zb_h2", "interleaved_1f1b", "zb_v".
[[nodiscard]] constexpr std::string_view name(schedule_kind k) noexcept {
    switch (k) {
        case schedule_kind::gpipe: return "gpipe";
        case schedule_kind::one_f_one_b: return "1f1b";
        case schedule_kind::zb_h1: return "zb_h1";
        case schedule_kind::zb_h2: return "zb_h2";
        case schedule_kind::interleaved_1f1b: return "interleaved_1f1b";
        case schedule_kind::zb_v: return "zb_v";
    }
    return "?";
}

/// Parses a command-line schedule name (see name()). Throws std::invalid_argument listing the valid names.
[[nodiscard]] inline schedule_kind parse_schedule_kind(std::string_view s) {
    for (auto k : all_schedule_kinds)
        if (s == name(k)) return k;
    throw std::invalid_argument("pipeprop::sync: unknown schedule '" + std::string(s) +
                                "' (expected gpipe, 1f1b, zb_h1, zb_h2, interleaved_1f1b or zb_v)");
}

/// A schedule: ops[s] is the ordered op list of stage s. p = ops.size() stages, `micro_batches` micro-batches over
/// all `steps` optimizer steps in the lists (micro_batches / steps per step; micro-batch j of step n is
/// n * (micro_batches / steps) + j, and every stage runs all of step n's ops before any of step n + 1's).
struct schedule {
    schedule_kind kind = schedule_kind::gpipe;  ///< the schedule whose generator made the lists
    bool two_stage_bp = false;  ///< true: B and W are separate ops; false: fused BW ops
    std::size_t stages = 0;  ///< p, the number of stages (= ops.size())
    std::size_t micro_batches = 0;  ///< micro-batches in the lists, over all `steps` steps
    std::vector<std::vector<op>> ops;  ///< [p]: ops[s] = stage s's ops (kind and micro-batch) in execution order
    std::size_t steps = 1;  ///< optimizer steps in the lists (consecutive_steps); each stage updates after its step
    ///@{
    /// Virtual stages: device_of[s] = the device of stage s, device_order[d] = the stages of device d's ops in its run
    /// order (see the file comment). Both empty: every stage is its own device (and runs its list as it becomes
    /// ready).
    std::vector<std::size_t> device_of{};
    std::vector<std::vector<std::size_t>> device_order{};
    ///@}

    /// Micro-batches of one optimizer step (micro_batches / steps).
    [[nodiscard]] std::size_t micro_batches_per_step() const noexcept {
        return steps > 0 ? micro_batches / steps : 0;
    }
    /// Number of devices: device_order.size(), or the number of stages without virtual stages.
    [[nodiscard]] std::size_t devices() const noexcept {
        return device_order.empty() ? stages : device_order.size();
    }
    /// The device of stage s.
    [[nodiscard]] std::size_t device_of_stage(std::size_t s) const noexcept {
        return device_of.empty() ? s : device_of[s];
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

namespace detail {

/// Appends (stage, op) to device order `order` and to the stage's list.
inline void push_device_op(schedule& sc, std::size_t d, std::size_t stage, op o) {
    sc.ops[stage].push_back(o);
    sc.device_order[d].push_back(stage);
}

/// An empty schedule of S stages on S / v devices.
inline schedule virtual_schedule(schedule_kind k, bool two_stage_bp, std::size_t stages, std::size_t m,
                                 std::size_t devices) {
    schedule sc{k, two_stage_bp, stages, m, std::vector<std::vector<op>>(stages)};
    sc.device_of.assign(stages, 0);
    sc.device_order.assign(devices, {});
    return sc;
}

}  // namespace detail

/// Interleaved 1F1B (Megatron-LM, Narayanan et al. 2021 §2.2) on S stages, v chunks per device (p = S / v devices;
/// stage c p + d on device d), m micro-batches; 2BP on: every W after the device's last B. Throws
/// std::invalid_argument unless v >= 1 divides S and m is a multiple of p or below it, or when S == 0 or m == 0.
[[nodiscard]] inline schedule interleaved_1f1b(std::size_t stages, std::size_t v, std::size_t m, bool two_stage_bp) {
    detail::check_sizes(stages, m, "interleaved_1f1b");
    if (v == 0 || stages % v != 0)
        throw std::invalid_argument("pipeprop::sync::interleaved_1f1b: " + std::to_string(stages) +
                                    " stages do not split into " + std::to_string(v) + " chunks per device");
    const std::size_t p = stages / v;
    if (m > p && m % p != 0)
        throw std::invalid_argument("pipeprop::sync::interleaved_1f1b: m = " + std::to_string(m) +
                                    " micro-batches on " + std::to_string(p) + " devices: m must be a multiple of the " +
                                    "device count (or below it), as in Megatron-LM");
    schedule sc = detail::virtual_schedule(schedule_kind::interleaved_1f1b, two_stage_bp, stages, m, p);
    for (std::size_t s = 0; s < stages; ++s) sc.device_of[s] = s % p;
    // The k-th forward (backward) of a device: micro-batches in groups of p (the last group: m mod p), each group
    // through the chunks in order (backward: in reverse).
    const auto nth = [&](std::size_t k, bool backward) {
        const std::size_t group = k / (p * v), first = group * p, size = std::min(p, m - first);
        const std::size_t in_group = k - group * p * v, chunk = in_group / size;
        return std::pair{backward ? v - 1 - chunk : chunk, first + in_group % size};
    };
    const std::size_t total = m * v;
    for (std::size_t d = 0; d < p; ++d) {
        const std::size_t warmup = std::min(total, 2 * (p - 1 - d) + (v - 1) * p);
        std::size_t f = 0, b = 0;
        const auto forward = [&] {
            const auto [c, j] = nth(f++, false);
            detail::push_device_op(sc, d, c * p + d, {op_kind::forward, j});
        };
        const auto backward = [&] {
            const auto [c, j] = nth(b++, true);
            detail::push_device_op(sc, d, c * p + d, {two_stage_bp ? op_kind::backward_input : op_kind::backward_fused, j});
        };
        for (std::size_t i = 0; i < warmup; ++i) forward();
        while (f < total) {
            forward();
            backward();
        }
        while (b < total) backward();
        if (two_stage_bp)
            for (std::size_t k = 0; k < total; ++k) {
                const auto [c, j] = nth(k, true);
                detail::push_device_op(sc, d, c * p + d, {op_kind::backward_weight, j});
            }
    }
    return sc;
}

/// ZB-V (ZB-paper §6) on S = 2p stages (p devices; device d holds stages d and 2p - 1 - d), m micro-batches; 2BP off:
/// fused BW in place of each B (its W dropped). Throws std::invalid_argument for an odd S, or S == 0 or m == 0.
[[nodiscard]] inline schedule zb_v(std::size_t stages, std::size_t m, bool two_stage_bp) {
    detail::check_sizes(stages, m, "zb_v");
    if (stages % 2 != 0)
        throw std::invalid_argument("pipeprop::sync::zb_v: needs an even number of stages (2 per device), got " +
                                    std::to_string(stages));
    const std::size_t p = stages / 2;
    schedule sc = detail::virtual_schedule(schedule_kind::zb_v, two_stage_bp, stages, m, p);
    for (std::size_t d = 0; d < p; ++d) sc.device_of[d] = sc.device_of[stages - 1 - d] = d;
    // The generator runs for max(m, 2p - 1) micro-batches (the pattern's minimum) and drops those >= m.
    const std::size_t n = std::max(m, 2 * p - 1);
    for (std::size_t d = 0; d < p; ++d) {
        const std::size_t chunk_stage[2] = {d, stages - 1 - d};
        std::size_t next[2][3] = {};  // [chunk][F, B, W]: next micro-batch
        const auto add = [&](std::size_t c, op_kind k) {
            const std::size_t which = k == op_kind::forward ? 0 : k == op_kind::backward_input ? 1 : 2;
            const std::size_t j = next[c][which]++;
            if (j >= m) return;
            if (!two_stage_bp && k == op_kind::backward_weight) return;
            if (!two_stage_bp && k == op_kind::backward_input) k = op_kind::backward_fused;
            detail::push_device_op(sc, d, chunk_stage[c], {k, j});
        };
        for (std::size_t i = 0; i < 2 * (p - d) - 1; ++i) add(0, op_kind::forward);
        for (std::size_t i = 0; i < d; ++i) {
            add(1, op_kind::forward);
            add(0, op_kind::forward);
        }
        for (std::size_t i = 0; i < p - d; ++i) {
            add(1, op_kind::forward);
            add(1, op_kind::backward_input);
            add(1, op_kind::backward_weight);
        }
        while (next[1][0] < next[0][0] || next[0][0] < n) {
            if (next[0][0] < n) add(0, op_kind::forward);
            add(0, op_kind::backward_input);
            add(0, op_kind::backward_weight);
            add(1, op_kind::forward);
            add(1, op_kind::backward_input);
            add(1, op_kind::backward_weight);
        }
        for (std::size_t i = 0; i < d; ++i) {
            add(0, op_kind::backward_input);
            add(1, op_kind::backward_input);
        }
        for (std::size_t i = 0; i < p - d; ++i) {
            add(0, op_kind::backward_input);
            add(0, op_kind::backward_weight);
        }
        while (next[1][2] < next[1][1]) add(1, op_kind::backward_weight);
        while (next[0][2] < next[0][1]) add(0, op_kind::backward_weight);
    }
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
    schedule out{sc.kind, sc.two_stage_bp, sc.stages, sc.micro_batches * k, std::vector<std::vector<op>>(sc.stages), k,
                 sc.device_of, std::vector<std::vector<std::size_t>>(sc.device_order.size())};
    for (std::size_t s = 0; s < sc.stages; ++s) {
        out.ops[s].reserve(sc.ops[s].size() * k);
        for (std::size_t n = 0; n < k; ++n)
            for (const op o : sc.ops[s]) out.ops[s].push_back({o.kind, n * sc.micro_batches + o.micro_batch});
    }
    for (std::size_t d = 0; d < sc.device_order.size(); ++d)  // each device runs its steps one after the other
        for (std::size_t n = 0; n < k; ++n)
            out.device_order[d].insert(out.device_order[d].end(), sc.device_order[d].begin(), sc.device_order[d].end());
    return out;
}

/// True when make_schedule(k, stages, m, two_stage_bp, chunks) generates a schedule (does not throw): the
/// virtual-stage kinds need stages divisible by their stages per device (zb_v 2, interleaved_1f1b `chunks`), and
/// interleaved_1f1b m a multiple of its devices or below it; every kind needs stages >= 1 and m >= 1.
[[nodiscard]] constexpr bool schedule_accepts(schedule_kind k, std::size_t stages, std::size_t m,
                                              std::size_t chunks = 2) noexcept {
    if (stages == 0 || m == 0) return false;
    if (k == schedule_kind::zb_v) return stages % 2 == 0;
    if (k == schedule_kind::interleaved_1f1b) {
        if (chunks == 0 || stages % chunks != 0) return false;
        const std::size_t devices = stages / chunks;
        return m <= devices || m % devices == 0;
    }
    return true;
}

/// The schedule of a kind on p stages (dispatch to the generators above); chunks: the stages per device of
/// interleaved_1f1b (zb_v has 2, the others 1; ignored by them).
[[nodiscard]] inline schedule make_schedule(schedule_kind k, std::size_t p, std::size_t m, bool two_stage_bp,
                                            std::size_t chunks = 2) {
    switch (k) {
        case schedule_kind::gpipe: return gpipe(p, m, two_stage_bp);
        case schedule_kind::one_f_one_b: return one_f_one_b(p, m, two_stage_bp);
        case schedule_kind::zb_h1: return zb_h1(p, m, two_stage_bp);
        case schedule_kind::zb_h2: return zb_h2(p, m, two_stage_bp);
        case schedule_kind::interleaved_1f1b: return interleaved_1f1b(p, chunks, m, two_stage_bp);
        case schedule_kind::zb_v: return zb_v(p, m, two_stage_bp);
    }
    throw std::invalid_argument("pipeprop::sync::make_schedule: unknown schedule kind");
}

}  // namespace pipeprop::sync
