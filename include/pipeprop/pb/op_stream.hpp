// pipeprop/pb/op_stream.hpp: the op list of one stage of Pipelined Backpropagation, generated as the micro-batches
// come (it has no end while the pipeline runs).
//
// PB-paper (Kosson et al., arXiv 2003.11666) §3; docs/pb-semantics.md §1. In the clocked model stage s runs at
// every tick the forward of the micro-batch that reaches it, then the backward of the one coming back, then that
// micro-batch's update. Micro-batch n reaches stage s at tick tau_n + s and comes back to it D_s = 2 (S - 1 - s)
// ticks later, so the stage's ops are, group after group (group i = the tick at which micro-batch i reaches it):
//     F(i),  BW(i - D_s),  U(i - D_s)                  (ops of pipeprop/op.hpp)
// where a micro-batch before the segment's first one n0 (the first after the last drain) has no backward. A drain
// closes the segment at its end E: no F(i) for i >= E, and the groups go on until BW(E - 1) and U(E - 1) have run.
// Run in this order, the forward of n sees max(n0, n - D_s) updates of the stage and its backward n: the clocked
// model's staleness, whatever thread runs the stage and whenever its inputs arrive (pb/concurrent_executor.hpp).
#pragma once

#include <cstddef>
#include <limits>
#include <optional>

#include "pipeprop/op.hpp"

namespace pipeprop::pb {

/// The op stream of a stage with delay D (see the file comment). Starts closed; open(n0) starts a segment.
class op_stream {
public:
    /// The segment end while no drain has closed it.
    static constexpr std::size_t open_end = std::numeric_limits<std::size_t>::max();

    /// The stream of a stage with delay D_s = delay; closed until open().
    explicit op_stream(std::size_t delay = 0) noexcept : delay_(delay) {}

    /// Starts a segment whose first micro-batch is n0 (after construction or a completed drain).
    void open(std::size_t n0) noexcept {
        begin_ = n0;
        end_ = open_end;
        group_ = n0;
        phase_ = phase::forward;
        normalize();
    }
    /// Closes the segment at end (> every pushed id): no forward of id >= end; the backwards still due follow.
    void close(std::size_t end) noexcept {
        end_ = end;
        normalize();
    }
    /// The next op, or none when the segment is complete (closed and every backward and update run) or not open.
    [[nodiscard]] std::optional<op> current() const noexcept {
        if (phase_ == phase::done) return std::nullopt;
        if (phase_ == phase::forward) return op{op_kind::forward, group_};
        return op{phase_ == phase::backward ? op_kind::backward_fused : op_kind::update, group_ - delay_};
    }
    /// Moves past the current op (which must exist).
    void advance() noexcept {
        if (phase_ == phase::forward)
            phase_ = phase::backward;
        else if (phase_ == phase::backward)
            phase_ = phase::update;
        else {
            ++group_;
            phase_ = phase::forward;
        }
        normalize();
    }
    /// True when the segment is closed and all of its ops have run (or no segment is open).
    [[nodiscard]] bool done() const noexcept { return phase_ == phase::done; }
    [[nodiscard]] std::size_t delay() const noexcept { return delay_; }  ///< The stage's delay D_s.

private:
    enum class phase : unsigned char { forward, backward, update, done };

    // Skips the ops that do not exist: a forward at or after the end, a backward of a micro-batch before n0.
    void normalize() noexcept {
        for (;;) {
            if (phase_ == phase::done) return;
            if (phase_ == phase::forward) {
                if (group_ < end_) return;
                phase_ = phase::backward;
            }
            if (phase_ == phase::backward || phase_ == phase::update) {
                const bool has_backward = group_ >= begin_ + delay_ && group_ - delay_ < end_;
                if (has_backward) return;
                if (end_ != open_end && group_ >= end_ + delay_) {
                    phase_ = phase::done;
                    return;
                }
                ++group_;
                phase_ = phase::forward;
            }
        }
    }

    std::size_t delay_ = 0;
    std::size_t begin_ = 0;
    std::size_t end_ = 0;
    std::size_t group_ = 0;
    phase phase_ = phase::done;
};

}  // namespace pipeprop::pb
