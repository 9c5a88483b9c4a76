// pipeprop/sync/plan_sizes.hpp: the buffer sizes a synchronous schedule needs, without its plan: the activation slots
// of every stage (peak micro-batches in flight, sync/schedule_analysis.hpp) and the capacity of every boundary
// channel, for one schedule (sizes_of) and for every step an executor of m micro-batches can run (covering_sizes),
// at a cost that does not grow with m (the memory estimate of an executor of 65536 micro-batches must not build
// 65536 plans).
//
// Closed form. Every generator (sync/schedule.hpp) is a warm-up, a steady state and a cool-down; past the
// steady-state count m1 = steady_state_micro_batches(kind, S, chunks) (a multiple of size_period: 1, or the devices
// of interleaved_1f1b, whose m is a multiple of them) one more period of micro-batches adds one more round of the
// steady state, which changes every size by the same amount d >= 0: 0 (1F1B, ZB-H1, ZB-H2, ZB-V, 2BP off) or the
// period (GPipe, and 2BP schedules whose W's all wait for the end of the step). So for m > m1 + period
//   sizes(m) = sizes(m1) + (m - m1) / period * (sizes(m1 + period) - sizes(m1)),
// and, d being >= 0, sizes(m') <= sizes(m) for m1 <= m' <= m: a short batch's plan needs more than the full one's
// only below m1 (interleaved 1F1B's warm-up), where covering_sizes takes the exact sizes of each count. The
// generators reach their steady state by m = 2S - 1 (S stages); m1 = 3S rounded up to the period leaves a margin.
// tests/unit/test_memory_estimate.cpp holds the closed form equal to the exact sizes (every kind, 2BP on and off,
// several stage counts, chunks and consecutive steps, m far past m1) and covering_sizes equal to the maximum over
// every plan an executor builds.
#pragma once

#include <algorithm>
#include <cstddef>
#include <stdexcept>
#include <vector>

#include "pipeprop/sync/schedule.hpp"
#include "pipeprop/sync/schedule_analysis.hpp"

namespace pipeprop::sync {

/// Buffer sizes of one or several plans: slots[s] activation slots of stage s [S], caps[b] the capacities of
/// boundary b (between stages b and b + 1) [S - 1].
struct plan_sizes {
    std::vector<std::size_t> slots;      ///< [S] peak micro-batches in flight per stage
    std::vector<channel_capacity> caps;  ///< [S - 1] forward and backward messages in flight at most per boundary

    /// Each size the larger of this one's and o's (an empty plan_sizes takes o's). Requires the same S.
    void widen(const plan_sizes& o) {
        if (slots.empty() && caps.empty()) {
            *this = o;
            return;
        }
        for (std::size_t s = 0; s < slots.size() && s < o.slots.size(); ++s) slots[s] = std::max(slots[s], o.slots[s]);
        for (std::size_t b = 0; b < caps.size() && b < o.caps.size(); ++b) {
            caps[b].forward = std::max(caps[b].forward, o.caps[b].forward);
            caps[b].backward = std::max(caps[b].backward, o.caps[b].backward);
        }
    }
    friend bool operator==(const plan_sizes& a, const plan_sizes& b) {
        if (a.slots != b.slots || a.caps.size() != b.caps.size()) return false;
        for (std::size_t i = 0; i < a.caps.size(); ++i)
            if (a.caps[i].forward != b.caps[i].forward || a.caps[i].backward != b.caps[i].backward) return false;
        return true;
    }
};

/// The exact sizes of schedule sc: slots[s] = slot_plan(sc)[s].slots (counted, without the slot of every op) and
/// caps = channel_capacities(sc). Cost: O(ops). Requires validate(sc) to pass.
[[nodiscard]] inline plan_sizes sizes_of(const schedule& sc) {
    plan_sizes out;
    out.slots.assign(sc.stages, 0);
    for (std::size_t s = 0; s < sc.stages; ++s) {
        std::size_t in_flight = 0;
        for (const op o : sc.ops[s]) {
            if (o.kind == op_kind::forward) out.slots[s] = std::max(out.slots[s], ++in_flight);
            if (releases_micro_batch(o)) --in_flight;
        }
    }
    out.caps = channel_capacities(sc);
    return out;
}

/// The exact sizes of `steps` consecutive steps of m micro-batches of schedule `kind` on S stages (make_step_plan's
/// schedule, without its plan). Cost: O(steps m S). Throws as make_schedule and consecutive_steps.
[[nodiscard]] inline plan_sizes exact_step_sizes(schedule_kind kind, std::size_t S, std::size_t m, bool two_stage_bp,
                                                 std::size_t steps = 1, std::size_t chunks = 2) {
    schedule sc = make_schedule(kind, S, m, two_stage_bp, chunks);
    if (steps != 1) sc = consecutive_steps(sc, steps);
    return sizes_of(sc);
}

/// The micro-batch counts of kind's schedules on S stages grow in steps of this many: the devices S / chunks of
/// interleaved_1f1b (its m is a multiple of them, or below them), 1 for the others.
[[nodiscard]] constexpr std::size_t size_period(schedule_kind kind, std::size_t S, std::size_t chunks) noexcept {
    if (kind == schedule_kind::interleaved_1f1b && chunks > 0 && S / chunks > 0) return S / chunks;
    return 1;
}

/// m1 of the file comment: 3 S rounded up to a multiple of size_period (>= 1).
[[nodiscard]] constexpr std::size_t steady_state_micro_batches(schedule_kind kind, std::size_t S,
                                                               std::size_t chunks) noexcept {
    const std::size_t period = size_period(kind, S, chunks), m1 = std::max<std::size_t>(3 * S, 1);
    return (m1 + period - 1) / period * period;
}

/// The micro-batches a step of `batch` samples runs with when a full step has m: min(m, batch); interleaved 1F1B
/// rounds a count above its devices S / chunks down to a multiple of them (what its generator takes).
[[nodiscard]] constexpr std::size_t micro_batches_for(schedule_kind kind, std::size_t S, std::size_t m,
                                                      std::size_t chunks, std::size_t batch) noexcept {
    std::size_t n = std::min(m, batch);
    if (kind == schedule_kind::interleaved_1f1b && chunks > 0) {
        const std::size_t devices = S / chunks;
        if (devices > 0 && n > devices) n -= n % devices;
    }
    return n;
}

/// The sizes of exact_step_sizes(kind, S, m, two_stage_bp, steps, chunks), at a cost that does not depend on m:
/// exact up to m1 + period, the closed form of the file comment above. Throws as make_schedule (also for an m that
/// the schedule does not take: interleaved_1f1b's m must be a multiple of its devices, or below them).
[[nodiscard]] inline plan_sizes step_sizes(schedule_kind kind, std::size_t S, std::size_t m, bool two_stage_bp,
                                           std::size_t steps = 1, std::size_t chunks = 2) {
    const std::size_t period = size_period(kind, S, chunks), m1 = steady_state_micro_batches(kind, S, chunks);
    if (m <= m1 + period) return exact_step_sizes(kind, S, m, two_stage_bp, steps, chunks);
    (void)make_schedule(kind, S, std::min(m, S), two_stage_bp, chunks);  // S and chunks checked as for m
    if (m % period != 0) (void)interleaved_1f1b(S, chunks, m, two_stage_bp);  // throws: m not a multiple
    const plan_sizes a = exact_step_sizes(kind, S, m1, two_stage_bp, steps, chunks);
    const plan_sizes b = exact_step_sizes(kind, S, m1 + period, two_stage_bp, steps, chunks);
    const std::size_t rounds = (m - m1) / period;
    plan_sizes out = a;
    for (std::size_t s = 0; s < out.slots.size(); ++s) out.slots[s] += rounds * (b.slots[s] - a.slots[s]);
    for (std::size_t i = 0; i < out.caps.size(); ++i) {
        out.caps[i].forward += rounds * (b.caps[i].forward - a.caps[i].forward);
        out.caps[i].backward += rounds * (b.caps[i].backward - a.caps[i].backward);
    }
    return out;
}

/// The larger sizes of the short steps' plans an executor of m micro-batches per full step runs, for batches of 1 to
/// max_batch samples with fewer micro-batches than m1 (micro_batches_for; the counts from m1 up need no more than
/// the full step: see the file comment). Empty when there is none. Cost: O(S^3), independent of m.
[[nodiscard]] inline plan_sizes short_step_sizes(schedule_kind kind, bool two_stage_bp, std::size_t S, std::size_t m,
                                                 std::size_t max_batch, std::size_t chunks) {
    plan_sizes out;
    const std::size_t m1 = steady_state_micro_batches(kind, S, chunks);
    std::size_t last = 0;  // counts come in order, each once
    for (std::size_t batch = 1; batch <= std::min({max_batch, m, m1}); ++batch) {
        const std::size_t n = micro_batches_for(kind, S, m, chunks, batch);
        if (n == last || n >= m || n >= m1) continue;
        last = n;
        out.widen(exact_step_sizes(kind, S, n, two_stage_bp, 1, chunks));
    }
    return out;
}

/// The sizes covering every plan an executor of schedule `kind` on S stages with m micro-batches per full step
/// builds (step_plan_cache): the full step, every short step of 1 to max_batch samples and, with
/// max_consecutive_steps > 1, that many consecutive full steps. Cost independent of m (step_sizes,
/// short_step_sizes). Throws std::invalid_argument as make_schedule and for max_consecutive_steps == 0.
[[nodiscard]] inline plan_sizes covering_sizes(schedule_kind kind, bool two_stage_bp, std::size_t S, std::size_t m,
                                               std::size_t max_batch, std::size_t max_consecutive_steps,
                                               std::size_t chunks) {
    if (max_consecutive_steps == 0)
        throw std::invalid_argument("pipeprop::sync::pipeline_executor: max_consecutive_steps must be >= 1");
    plan_sizes out = step_sizes(kind, S, m, two_stage_bp, 1, chunks);
    out.widen(short_step_sizes(kind, two_stage_bp, S, m, max_batch, chunks));
    if (max_consecutive_steps > 1) out.widen(step_sizes(kind, S, m, two_stage_bp, max_consecutive_steps, chunks));
    return out;
}

}  // namespace pipeprop::sync
