// pipeprop/sync/step_plan_cache.hpp: the step plans (sync/step_plan.hpp) one synchronous executor runs, each built on
// first use, and the buffer sizes that cover all of them (sync/plan_sizes.hpp): the plan of every micro-batch count a
// batch of 1 to max_batch samples runs with (a short batch runs with fewer micro-batches, docs/schedules.md §3) and,
// with consecutive steps, the plan of k full steps back to back.
#pragma once

#include <algorithm>
#include <cstddef>
#include <map>
#include <memory>
#include <stdexcept>
#include <vector>

#include "pipeprop/sync/plan_sizes.hpp"
#include "pipeprop/sync/schedule.hpp"
#include "pipeprop/sync/schedule_analysis.hpp"
#include "pipeprop/sync/step_plan.hpp"

namespace pipeprop::sync::detail {

/// The plans of schedule `kind` on p stages with m = micro_batches per full step (2BP on or off, `chunks` stages per
/// device for interleaved 1F1B). Not copyable (the executor refers to its plans).
class step_plan_cache {
public:
    step_plan_cache() = default;
    step_plan_cache(const step_plan_cache&) = delete;
    step_plan_cache& operator=(const step_plan_cache&) = delete;

    /// Builds the full step's plan and sizes the buffers for every plan a step can run (covering_sizes,
    /// sync/plan_sizes.hpp): the micro-batch count of every batch size up to max_batch (a short batch's plan may
    /// need more slots on some stage than the full one: interleaved 1F1B's warm-up; the plans of the counts below the
    /// steady state are built here, those above need no more than the full step's) and, with
    /// max_consecutive_steps > 1, their plan (its channels may hold more). Cost: the full plan's, O(m S), plus
    /// O(S^3). Returns the activation slots per stage [p]; channel_sizes() holds the capacities per boundary
    /// [p - 1]. Throws std::invalid_argument for max_consecutive_steps == 0 and as make_schedule for the schedule's
    /// sizes.
    std::vector<std::size_t> build(schedule_kind kind, bool two_stage_bp, std::size_t p, std::size_t micro_batches,
                                   std::size_t max_batch, std::size_t max_consecutive_steps, std::size_t chunks) {
        kind_ = kind;
        two_stage_bp_ = two_stage_bp;
        p_ = p;
        m_ = micro_batches;
        chunks_ = chunks;
        plans_.resize(m_ + 1);
        const step_plan& full = plan_for(m_);
        if (max_consecutive_steps == 0)
            throw std::invalid_argument("pipeprop::sync::pipeline_executor: max_consecutive_steps must be >= 1");
        plan_sizes sizes;
        const auto widen = [&](const step_plan& pl) {
            plan_sizes of{std::vector<std::size_t>(p), pl.caps};
            for (std::size_t s = 0; s < p; ++s) of.slots[s] = pl.slots[s].slots;
            sizes.widen(of);
        };
        widen(full);
        const std::size_t m1 = steady_state_micro_batches(kind_, p_, chunks_);
        for (std::size_t batch = 1; batch <= std::min({max_batch, m_, m1}); ++batch)
            if (const std::size_t n = micro_batches_for(batch); n < m1) widen(plan_for(n));
        if (max_consecutive_steps > 1)
            sizes.widen(exact_step_sizes(kind_, p, m_, two_stage_bp_, max_consecutive_steps, chunks_));
        caps_ = sizes.caps;
        return sizes.slots;
    }
    /// After the buffers are allocated: every plan built from now on is checked to fit `slots` activation slots per
    /// stage and channel_sizes() (check_plan_fits: std::logic_error otherwise).
    void buffers_allocated(std::vector<std::size_t> slots) { slots_ = std::move(slots); }

    /// The micro-batches a step of `batch` samples runs with (sync::micro_batches_for, sync/plan_sizes.hpp).
    [[nodiscard]] std::size_t micro_batches_for(std::size_t batch) const noexcept {
        return sync::micro_batches_for(kind_, p_, m_, chunks_, batch);
    }
    /// The plan of one step with m' <= m micro-batches.
    const step_plan& plan_for(std::size_t m) {
        auto& slot = plans_[m];
        if (!slot) {
            auto p = std::make_unique<step_plan>(make_step_plan(kind_, p_, m, two_stage_bp_, 1, chunks_));
            if (!slots_.empty()) check_plan_fits(*p, slots_, caps_, m_);
            slot = std::move(p);
        }
        return *slot;
    }
    /// The plan of k consecutive full steps (m micro-batches each).
    const step_plan& consecutive_plan(std::size_t k) {
        auto& slot = consecutive_plans_[k];
        if (!slot) {
            auto p = std::make_unique<step_plan>(make_step_plan(kind_, p_, m_, two_stage_bp_, k, chunks_));
            check_plan_fits(*p, slots_, caps_, m_);
            slot = std::move(p);
        }
        return *slot;
    }
    /// The plan of a full step (m micro-batches); built by build().
    [[nodiscard]] const step_plan& full() const { return *plans_[m_]; }
    /// Capacities of the boundary channels (messages), per boundary [p - 1].
    [[nodiscard]] const std::vector<channel_capacity>& channel_sizes() const noexcept { return caps_; }

private:
    schedule_kind kind_ = schedule_kind::gpipe;
    bool two_stage_bp_ = false;
    std::size_t p_ = 0, m_ = 0, chunks_ = 0;
    std::vector<std::unique_ptr<step_plan>> plans_;                        // [m + 1]: by micro-batch count
    std::map<std::size_t, std::unique_ptr<step_plan>> consecutive_plans_;  // by number of steps
    std::vector<channel_capacity> caps_;
    std::vector<std::size_t> slots_;  // the executor's activation slots per stage, once allocated
};

}  // namespace pipeprop::sync::detail
