// pipeprop/sync/step_plan.hpp: what the synchronous executor derives from a schedule before it runs it: the op
// lists (sync/schedule.hpp), each stage's activation slots, the boundary channels' capacities and one valid global
// order of all ops (for the sequential executor). Plain data, computed at run time from (kind, p, m, 2BP): every
// schedule is an op list run by the same compiled executor (docs/schedules.md §3).
#pragma once

#include <cstddef>
#include <stdexcept>
#include <string>
#include <vector>

#include "pipeprop/sync/schedule.hpp"
#include "pipeprop/sync/schedule_analysis.hpp"

namespace pipeprop::sync {

/// The op lists of one step with m micro-batches and what running them needs.
struct step_plan {
    schedule sc;                          ///< per stage: the op list
    std::vector<stage_slots> slots;       ///< per stage: activation slots and the slot of each op
    std::vector<channel_capacity> caps;   ///< per boundary: forward and backward messages in flight at most
    std::vector<global_step> order;       ///< a valid interleaving of all stages' ops
    std::vector<std::vector<std::size_t>> update_at;  ///< per stage and step: ops before its update (update_positions)
};

/// The plan of schedule `kind` on p stages for m micro-batches per step, 2BP on or off, for `steps` consecutive
/// optimizer steps without a barrier between them (consecutive_steps; 1: one step); chunks: stages per device of
/// interleaved_1f1b (make_schedule). Throws as make_schedule and
/// consecutive_steps, or std::logic_error when the generated schedule fails validate().
[[nodiscard]] inline step_plan make_step_plan(schedule_kind kind, std::size_t p, std::size_t m, bool two_stage_bp,
                                              std::size_t steps = 1, std::size_t chunks = 2) {
    step_plan pl;
    pl.sc = make_schedule(kind, p, m, two_stage_bp, chunks);
    if (steps != 1) pl.sc = consecutive_steps(pl.sc, steps);
    validate(pl.sc);
    pl.slots = slot_plan(pl.sc);
    pl.caps = channel_capacities(pl.sc);
    pl.order = global_order(pl.sc);
    pl.update_at = update_positions(pl.sc);
    return pl;
}

/// Checks that plan `pl` (e.g. for a short last batch) fits the buffers of an executor built for m_full
/// micro-batches: `slots[s]` activation slots per stage and channel capacities `caps`. The executor sizes them for
/// every plan a step can run (not every generator is monotone in m: interleaved 1F1B's warm-up), so a violation is a
/// logic error (std::logic_error naming stage or boundary), never silent.
inline void check_plan_fits(const step_plan& pl, const std::vector<std::size_t>& slots,
                            const std::vector<channel_capacity>& caps, std::size_t m_full) {
    const std::string what = "pipeprop::sync: schedule " + pl.sc.label() + " for m = " +
                             std::to_string(pl.sc.micro_batches);
    for (std::size_t s = 0; s < pl.slots.size(); ++s)
        if (s >= slots.size() || pl.slots[s].slots > slots[s])
            throw std::logic_error(what + " needs more slots on stage " + std::to_string(s) + " than the one for m = " +
                                   std::to_string(m_full));
    for (std::size_t b = 0; b < pl.caps.size(); ++b)
        if (b >= caps.size() || pl.caps[b].forward > caps[b].forward || pl.caps[b].backward > caps[b].backward)
            throw std::logic_error(what + " needs larger channels at boundary " + std::to_string(b));
}

}  // namespace pipeprop::sync
