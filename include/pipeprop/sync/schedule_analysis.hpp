// pipeprop/sync/schedule_analysis.hpp: what a schedule's op lists imply, independent of timing: validity, a
// valid global execution order, activation slots per stage (peak micro-batches in flight) and the capacity every
// boundary channel needs.
//
// Dependency model (communication-free; the simulator and both executors use exactly this one):
//   F(j) on stage s > 0        needs F(j) of stage s - 1 (its output activations);
//   B(j) / BW(j) on s < p - 1  needs B(j) / BW(j) of stage s + 1 (the gradient w.r.t. this stage's output);
//   W(j) needs B(j) of the same stage, and every B/BW needs F(j) of the same stage: both are order constraints
//   inside one list, which validate() checks.
// A micro-batch is "in flight" on a stage from the start of its F to the end of its W (2BP on) or BW (2BP off):
// its activations a(k), gradients g(k) and stashes are alive in between (docs/pitfalls.md item 11).
#pragma once

#include <algorithm>
#include <array>
#include <cstddef>
#include <functional>
#include <limits>
#include <queue>
#include <stdexcept>
#include <string>
#include <vector>

#include "pipeprop/sync/schedule.hpp"

namespace pipeprop::sync {

/// "F3", "BW0", ...
[[nodiscard]] inline std::string to_string(op o) {
    return std::string(short_name(o.kind)) + std::to_string(o.micro_batch);
}

/// True when op o ends the micro-batch's life on its stage (W with 2BP, BW without).
[[nodiscard]] constexpr bool releases_micro_batch(op o) noexcept {
    return o.kind == op_kind::backward_weight || o.kind == op_kind::backward_fused;
}
using pipeprop::is_backward_p1;

/// Progress of every stage through its op list, and the cross-stage readiness test of the dependency model.
class schedule_progress {
public:
    /// Progress over sc (which must outlive this object), every stage at its first op.
    explicit schedule_progress(const schedule& sc)
        : sc_(&sc),
          next_(sc.stages, 0),
          forward_done_(sc.stages, std::vector<char>(sc.micro_batches, 0)),
          p1_done_(sc.stages, std::vector<char>(sc.micro_batches, 0)) {}

    /// Index of the next op of stage s (== ops[s].size() when the stage is done).
    [[nodiscard]] std::size_t next(std::size_t s) const noexcept { return next_[s]; }
    /// True when stage s ran all of its ops.
    [[nodiscard]] bool stage_done(std::size_t s) const noexcept { return next_[s] == sc_->ops[s].size(); }
    /// True when every stage ran all of its ops.
    [[nodiscard]] bool all_done() const noexcept {
        for (std::size_t s = 0; s < sc_->stages; ++s)
            if (!stage_done(s)) return false;
        return true;
    }
    /// True when the next op of stage s exists and its cross-stage dependency is met.
    [[nodiscard]] bool ready(std::size_t s) const noexcept {
        if (stage_done(s)) return false;
        const op o = sc_->ops[s][next_[s]];
        if (o.kind == op_kind::forward) return s == 0 || forward_done_[s - 1][o.micro_batch];
        if (is_backward_p1(o)) return s + 1 == sc_->stages || p1_done_[s + 1][o.micro_batch];
        return true;
    }
    /// Marks the next op of stage s done and returns it. Requires ready(s).
    op advance(std::size_t s) noexcept {
        const op o = sc_->ops[s][next_[s]++];
        if (o.kind == op_kind::forward) forward_done_[s][o.micro_batch] = 1;
        if (is_backward_p1(o)) p1_done_[s][o.micro_batch] = 1;
        return o;
    }

private:
    const schedule* sc_;
    std::vector<std::size_t> next_;
    std::vector<std::vector<char>> forward_done_;
    std::vector<std::vector<char>> p1_done_;
};

/// Progress of every device through its device order (schedule::device_order; without virtual stages device s is
/// stage s and runs its list as it becomes ready): a device runs one op at a time, its entries in order.
class device_progress {
public:
    /// Progress over sc (which must outlive this object), every device at the start of its order.
    explicit device_progress(const schedule& sc) : sc_(&sc), stages_(sc), cursor_(sc.devices(), 0) {}

    /// The stage whose op device d runs next (npos when the device is done).
    [[nodiscard]] std::size_t next_stage(std::size_t d) const noexcept {
        if (sc_->device_order.empty()) return stages_.stage_done(d) ? npos : d;
        return cursor_[d] < sc_->device_order[d].size() ? sc_->device_order[d][cursor_[d]] : npos;
    }
    /// True when device d's next op exists and its cross-stage dependency is met.
    [[nodiscard]] bool ready(std::size_t d) const noexcept {
        const std::size_t s = next_stage(d);
        return s != npos && stages_.ready(s);
    }
    /// Marks device d's next op done; returns its stage. Requires ready(d).
    std::size_t advance(std::size_t d) noexcept {
        const std::size_t s = next_stage(d);
        stages_.advance(s);
        ++cursor_[d];
        return s;
    }
    /// The per-stage progress underneath.
    [[nodiscard]] const schedule_progress& stages() const noexcept { return stages_; }
    /// No stage: the device ran its whole order.
    static constexpr std::size_t npos = std::numeric_limits<std::size_t>::max();

private:
    const schedule* sc_;
    schedule_progress stages_;
    std::vector<std::size_t> cursor_;
};

/// Checks that sc is a valid schedule: ops.size() == stages >= 1, micro_batches >= 1; on every stage every
/// micro-batch has exactly one F and, with 2BP, exactly one B and one W (no BW), without 2BP exactly one BW
/// (no B, no W), in the order F, B, W; a stage runs its steps one after the other; with virtual stages, device_of
/// names a device for every stage and device_order[d] lists exactly the ops of device d's stages (each stage's count
/// of entries = its list's length); and the lists cannot deadlock under the dependency model (each device running
/// one op at a time in its order).
/// Throws std::invalid_argument naming the stage, the op and what is wrong.
inline void validate(const schedule& sc) {
    const std::string who = "pipeprop::sync::validate(" + sc.label() + "): ";
    if (sc.stages == 0 || sc.micro_batches == 0 || sc.ops.size() != sc.stages)
        throw std::invalid_argument(who + "needs stages >= 1, micro_batches >= 1 and one op list per stage");
    if (sc.steps == 0 || sc.micro_batches % sc.steps != 0)
        throw std::invalid_argument(who + std::to_string(sc.micro_batches) + " micro-batches do not split into " +
                                    std::to_string(sc.steps) + " steps");
    const std::size_t m = sc.micro_batches, per_step = sc.micro_batches_per_step();
    for (std::size_t s = 0; s < sc.stages; ++s) {
        for (std::size_t k = 1; k < sc.ops[s].size(); ++k)
            if (sc.ops[s][k].micro_batch / per_step < sc.ops[s][k - 1].micro_batch / per_step)
                throw std::invalid_argument(who + "stage " + std::to_string(s) + " op " + std::to_string(k) + " (" +
                                            to_string(sc.ops[s][k]) + ") belongs to an earlier step than the op " +
                                            "before it (a stage runs its steps one after the other)");
        // position of F, B, W, BW of each micro-batch; npos = absent
        constexpr std::size_t npos = std::numeric_limits<std::size_t>::max();
        std::vector<std::array<std::size_t, 4>> pos(m, {npos, npos, npos, npos});
        for (std::size_t k = 0; k < sc.ops[s].size(); ++k) {
            const op o = sc.ops[s][k];
            if (o.micro_batch >= m)
                throw std::invalid_argument(who + "stage " + std::to_string(s) + " op " + std::to_string(k) + " (" +
                                            to_string(o) + ") names a micro-batch >= m = " + std::to_string(m));
            auto& slot = pos[o.micro_batch][static_cast<std::size_t>(o.kind)];
            if (slot != npos)
                throw std::invalid_argument(who + "stage " + std::to_string(s) + " runs " + to_string(o) + " twice");
            slot = k;
        }
        for (std::size_t j = 0; j < m; ++j) {
            const auto [f, b, w, bw] = pos[j];
            const std::string where = who + "stage " + std::to_string(s) + ", micro-batch " + std::to_string(j) + ": ";
            if (f == npos) throw std::invalid_argument(where + "no F");
            if (sc.two_stage_bp) {
                if (bw != npos) throw std::invalid_argument(where + "a fused BW op in a 2BP schedule");
                if (b == npos || w == npos) throw std::invalid_argument(where + "missing B or W");
                if (!(f < b && b < w)) throw std::invalid_argument(where + "ops not in the order F, B, W");
            } else {
                if (b != npos || w != npos) throw std::invalid_argument(where + "split B/W ops with 2BP off");
                if (bw == npos) throw std::invalid_argument(where + "missing BW");
                if (!(f < bw)) throw std::invalid_argument(where + "BW before F");
            }
        }
    }
    if (sc.device_of.empty() != sc.device_order.empty() || (!sc.device_of.empty() && sc.device_of.size() != sc.stages))
        throw std::invalid_argument(who + "device_of needs one device per stage and device_order one list per device");
    if (!sc.device_order.empty()) {
        std::vector<std::size_t> count(sc.stages, 0);
        for (std::size_t d = 0; d < sc.device_order.size(); ++d)
            for (const std::size_t st : sc.device_order[d]) {
                if (st >= sc.stages || sc.device_of[st] != d)
                    throw std::invalid_argument(who + "device " + std::to_string(d) + "'s order names stage " +
                                                std::to_string(st) + ", which is not on that device");
                ++count[st];
            }
        for (std::size_t st = 0; st < sc.stages; ++st)
            if (count[st] != sc.ops[st].size())
                throw std::invalid_argument(who + "device order runs " + std::to_string(count[st]) + " ops of stage " +
                                            std::to_string(st) + ", whose list has " +
                                            std::to_string(sc.ops[st].size()));
    }
    device_progress pr(sc);
    for (bool moved = true; moved;) {
        moved = false;
        for (std::size_t d = 0; d < sc.devices(); ++d)
            while (pr.ready(d)) {
                pr.advance(d);
                moved = true;
            }
    }
    for (std::size_t d = 0; d < sc.devices(); ++d)
        if (const std::size_t st = pr.next_stage(d); st != device_progress::npos)
            throw std::invalid_argument(who + "deadlock: device " + std::to_string(d) + " (stage " + std::to_string(st) +
                                        ") waits forever at op " + std::to_string(pr.stages().next(st)) + " (" +
                                        to_string(sc.ops[st][pr.stages().next(st)]) + ")");
}

/// A valid global execution order of all ops (stage, op index), as a single thread runs them: the order of the
/// schedule's timeline with unit op costs (every F, B, W and BW 1, no optimizer cost, no latency: the simulator's
/// timeline under those costs; each device one op at a time in its order), ops ordered by start time, ties by stage. So the sequential executor runs the ops in
/// the order of the schedule's figure (and, for consecutive steps, runs a stage's next-step forwards before the
/// later stages' trailing backward-p2 ops where the figure has them first). Requires validate(sc) to pass.
struct global_step {
    std::size_t stage;  ///< The stage of the op.
    std::size_t index;  ///< position in sc.ops[stage]
};
[[nodiscard]] inline std::vector<global_step> global_order(const schedule& sc) {
    struct timed {
        std::size_t start, stage, index;
    };
    std::vector<timed> ops;
    device_progress pr(sc);
    constexpr std::size_t unknown = std::numeric_limits<std::size_t>::max();
    const std::size_t p = sc.stages, m = sc.micro_batches;
    std::vector<std::size_t> free_at(sc.devices(), 0), f_end(p * m, unknown), p1_end(p * m, unknown);
    for (bool moved = true; moved;) {
        moved = false;
        for (std::size_t d = 0; d < sc.devices(); ++d)
            while (pr.ready(d)) {
                const std::size_t s = pr.next_stage(d), index = pr.stages().next(s);
                const op o = sc.ops[s][index];
                std::size_t start = free_at[d];
                if (o.kind == op_kind::forward && s > 0) start = std::max(start, f_end[(s - 1) * m + o.micro_batch]);
                if (is_backward_p1(o) && s + 1 < p) start = std::max(start, p1_end[(s + 1) * m + o.micro_batch]);
                ops.push_back({start, s, index});
                free_at[d] = start + 1;
                if (o.kind == op_kind::forward) f_end[s * m + o.micro_batch] = start + 1;
                if (is_backward_p1(o)) p1_end[s * m + o.micro_batch] = start + 1;
                pr.advance(d);
                moved = true;
            }
    }
    if (!pr.stages().all_done())
        throw std::logic_error("pipeprop::sync::global_order: schedule " + sc.label() + " deadlocks");
    std::stable_sort(ops.begin(), ops.end(), [](const timed& a, const timed& b) {
        return a.start != b.start ? a.start < b.start : a.stage < b.stage;
    });
    std::vector<global_step> order;
    order.reserve(ops.size());
    for (const auto& t : ops) order.push_back({t.stage, t.index});
    return order;
}

/// Where each stage's optimizer steps fall in its list: update_at[s][n] is the number of ops of stage s that belong
/// to steps 0 .. n (the stage updates for step n once it has run that many ops). Requires validate(sc) to pass.
[[nodiscard]] inline std::vector<std::vector<std::size_t>> update_positions(const schedule& sc) {
    const std::size_t per_step = sc.micro_batches_per_step();
    std::vector<std::vector<std::size_t>> at(sc.stages, std::vector<std::size_t>(sc.steps, 0));
    for (std::size_t s = 0; s < sc.stages; ++s) {
        for (const op o : sc.ops[s]) ++at[s][o.micro_batch / per_step];
        for (std::size_t n = 1; n < sc.steps; ++n) at[s][n] += at[s][n - 1];
    }
    return at;
}

/// Activation slots of one stage: slot_of[k] is the slot used by op k of the stage (the micro-batch's buffers),
/// slots the number of slots = the peak number of micro-batches in flight on the stage. A micro-batch takes the
/// lowest free slot at its F and frees it after its W (2BP) or BW.
struct stage_slots {
    std::vector<std::size_t> slot_of;  ///< [ops of the stage]: the slot each op uses.
    std::size_t slots = 0;  ///< Number of slots (peak micro-batches in flight).
};

/// Slot plan of every stage. Requires validate(sc) to pass. Cost: O(ops log slots) (the free slots in a min-heap:
/// GPipe's m slots per stage must not cost m^2).
[[nodiscard]] inline std::vector<stage_slots> slot_plan(const schedule& sc) {
    std::vector<stage_slots> plan(sc.stages);
    for (std::size_t s = 0; s < sc.stages; ++s) {
        auto& p = plan[s];
        std::priority_queue<std::size_t, std::vector<std::size_t>, std::greater<>> free;  // lowest on top
        std::vector<std::size_t> slot_of_mb(sc.micro_batches, 0);
        p.slot_of.reserve(sc.ops[s].size());
        for (const op o : sc.ops[s]) {
            if (o.kind == op_kind::forward) {
                if (free.empty()) {
                    slot_of_mb[o.micro_batch] = p.slots++;
                } else {
                    slot_of_mb[o.micro_batch] = free.top();
                    free.pop();
                }
            }
            p.slot_of.push_back(slot_of_mb[o.micro_batch]);
            if (releases_micro_batch(o)) free.push(slot_of_mb[o.micro_batch]);
        }
    }
    return plan;
}

/// Peak number of micro-batches in flight on each stage (= slot_plan(sc)[s].slots).
[[nodiscard]] inline std::vector<std::size_t> peak_in_flight(const schedule& sc) {
    std::vector<std::size_t> peak;
    for (const auto& p : slot_plan(sc)) peak.push_back(p.slots);
    return peak;
}

/// Capacities of the boundary channels of boundary s (between stages s and s + 1), s in [0, p - 1).
struct channel_capacity {
    std::size_t forward = 0;   ///< most activation messages s -> s+1 sent and not yet consumed
    std::size_t backward = 0;  ///< most gradient messages s+1 -> s sent and not yet consumed
};

/// Worst case over all timings of the number of messages in flight on every boundary: for each prefix of the
/// sender's list, the messages it has sent minus the fewest the receiver must already have consumed for the
/// sender to have got that far (its F's wait for nothing from downstream; its B's wait for the receiver's B's).
/// A boundary_channel with this capacity never runs out of buffers. Requires validate(sc) to pass.
[[nodiscard]] inline std::vector<channel_capacity> channel_capacities(const schedule& sc) {
    const std::size_t p = sc.stages, m = sc.micro_batches;
    std::vector<channel_capacity> caps(p > 0 ? p - 1 : 0);
    // consumed_before[s][k]: how many F's (kind_f) or p1's (!kind_f) stage s has run before op k.
    auto count_before = [&](std::size_t s, bool kind_f) {
        std::vector<std::size_t> c(sc.ops[s].size() + 1, 0);
        for (std::size_t k = 0; k < sc.ops[s].size(); ++k) {
            const op o = sc.ops[s][k];
            c[k + 1] = c[k] + ((kind_f ? o.kind == op_kind::forward : is_backward_p1(o)) ? 1 : 0);
        }
        return c;
    };
    auto position = [&](std::size_t s, bool kind_f) {
        std::vector<std::size_t> pos(m, 0);
        for (std::size_t k = 0; k < sc.ops[s].size(); ++k) {
            const op o = sc.ops[s][k];
            if (kind_f ? o.kind == op_kind::forward : is_backward_p1(o)) pos[o.micro_batch] = k;
        }
        return pos;
    };
    for (std::size_t s = 0; s + 1 < p; ++s) {
        {  // forward: sender s (its F's send), receiver s+1 (its F's consume); s's p1(j) needs s+1's p1(j)
            const auto recv_f = count_before(s + 1, true);
            const auto recv_p1_pos = position(s + 1, false);
            std::size_t sent = 0, need = 0, best = 0;
            for (const op o : sc.ops[s]) {
                if (is_backward_p1(o)) need = std::max(need, recv_p1_pos[o.micro_batch] + 1);
                if (o.kind == op_kind::forward) ++sent;
                best = std::max(best, sent - std::min(sent, recv_f[need]));
            }
            caps[s].forward = best;
        }
        {  // backward: sender s+1 (its p1's send), receiver s (its p1's consume); s+1's F(j) needs s's F(j)
            const auto recv_b = count_before(s, false);
            const auto recv_f_pos = position(s, true);
            std::size_t sent = 0, need = 0, best = 0;
            for (const op o : sc.ops[s + 1]) {
                if (o.kind == op_kind::forward) need = std::max(need, recv_f_pos[o.micro_batch] + 1);
                if (is_backward_p1(o)) ++sent;
                best = std::max(best, sent - std::min(sent, recv_b[need]));
            }
            caps[s].backward = best;
        }
    }
    return caps;
}

}  // namespace pipeprop::sync
