// pipeprop/pb/load_adaptation.hpp: the concurrent PB executor's adaptation to the load of the cores:
// which way the next graph run goes, on the lanes (pb/lane_plan.hpp: one serial flow-graph node per run of
// stages, one per core) or inline (every stage on the calling thread, no flow graph).
//
// Why: the lanes advance in lock step (each needs the other's previous tick), so when another process takes one of
// the cores, every time slice it gets stalls both lanes, and a pipeline on the lanes can run slower than on one
// thread. Neither is better everywhere, and the load changes during a run, so the executor measures: it times every
// run (push_buffer micro-batches) made after the pipeline's fill, keeps the mode that ran more micro-batches per
// second, and every `probe_period` runs makes one run the other way to measure it again (a probe). When a probe
// wins by more than 2%, the executor switches and probes again after `probe_period` runs; when the current mode wins
// by more than 15%, the next probe comes twice as late (at most 8 periods), otherwise after `probe_period` runs.
// Where the stages' ops run never changes a result (every stage runs its op stream in order:
// pb/concurrent_executor.hpp), so the adaptation changes speed only. A probe runs right after the data moved
// between cores (cold caches), which leans against switching; the probes repeat, so a wrong call is undone.
#pragma once

#include <algorithm>
#include <cstddef>

#include "pipeprop/pb/stats.hpp"

namespace pipeprop::pb {

/// The decision of load_adaptation.hpp's file comment, fed with timed runs. Not thread-safe (the executor calls it
/// from push() / drain() only).
class load_adapter {
public:
    /// A run faster by this fraction in a probe makes the executor switch.
    static constexpr double switch_margin = 0.02;
    /// A probe won by more than this fraction (either way) doubles the runs until the next probe.
    static constexpr double clear_margin = 0.15;
    /// The longest wait between probes, in probe periods.
    static constexpr std::size_t max_backoff = 8;
    /// Switches kept in stats().switches (stats().switch_count counts all).
    static constexpr std::size_t kept_switches = 64;

    /// probe_period runs between probes (0: never adapt, every run on the lanes). Throws std::bad_alloc (the record of
    /// the first kept_switches switches is reserved here).
    explicit load_adapter(std::size_t probe_period = 0) : base_(probe_period), period_(probe_period) {
        stats_.enabled = probe_period > 0;
        if (stats_.enabled) stats_.switches.reserve(kept_switches);  // a switch allocates nothing in push() / drain()
    }

    /// True when the adapter probes (probe_period > 0).
    [[nodiscard]] bool enabled() const noexcept { return base_ > 0; }
    /// Whether the next run goes inline (false: on the lanes).
    [[nodiscard]] bool next_inline() const noexcept { return enabled() && (probing_ ? !inline_ : inline_); }

    /// A run in the mode next_inline() gave that is not comparable with others (the fill after the start or a drain,
    /// or a drain itself): counted only.
    void unmeasured(bool was_inline) noexcept { ++(was_inline ? stats_.inline_runs : stats_.lane_runs); }

    /// A measured run in the mode next_inline() gave: `micro_batches` in `seconds` (> 0), starting at micro-batch
    /// `first`. May change the mode of the next run.
    void measured(std::size_t first, std::size_t micro_batches, double seconds) {
        if (!enabled()) return;
        const bool was_inline = next_inline();
        unmeasured(was_inline);
        if (seconds <= 0.0) return;  // a clock that did not advance: counted, not compared
        const double rate = static_cast<double>(micro_batches) / seconds;
        double& r = rate_[was_inline ? 1 : 0];
        if (!probing_) {  // the current mode: a running mean over the last few runs
            r = r == 0.0 ? rate : 0.5 * (r + rate);
            if (++since_probe_ >= period_) probing_ = true;
            return;
        }
        r = rate;  // the other mode, measured now
        probing_ = false;
        since_probe_ = 0;
        ++stats_.probes;
        const double current = rate_[inline_ ? 1 : 0];
        const double lead = std::max(rate, current) / std::min(rate, current);
        period_ = lead > 1.0 + clear_margin ? std::min(period_ * 2, base_ * max_backoff) : base_;
        if (rate > current * (1.0 + switch_margin)) {  // the load changed: probe again soon
            inline_ = was_inline;
            period_ = base_;
            ++stats_.switch_count;
            if (stats_.switches.size() < kept_switches)
                stats_.switches.push_back({first + micro_batches, inline_, rate_[0], rate_[1]});
        }
    }

    /// What the adapter decided so far (run_stats::load).
    [[nodiscard]] const load_adaptation_stats& stats() const noexcept { return stats_; }

private:
    std::size_t base_ = 0;
    std::size_t period_ = 0;
    std::size_t since_probe_ = 0;
    bool inline_ = false;   // the current mode
    bool probing_ = false;  // the next run is a probe of the other mode
    double rate_[2] = {0.0, 0.0};  // micro-batches per second: lanes, inline
    load_adaptation_stats stats_;
};

}  // namespace pipeprop::pb
