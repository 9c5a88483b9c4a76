// pipeprop/sync/remote_part.hpp: the seam between sync::schedule_executor (sync/schedule_executor.hpp) and the
// exchange with its stages in other processes (sync/remote_stages.hpp), so that a program that never gives
// executor_options::remote a transport does not compile the exchange.
//
// The executor calls the exchange through remote_part<T> and the exchange reads the executor through remote_host<T>
// (remote_host_of adapts a schedule executor); neither depends on the network or the loss. The exchange itself is
// made by the factory that sync/remote_stages.hpp registers when a program includes it (remote_seam.hpp;
// pipeprop/mpi/mpi_transport.hpp includes it): without it, an executor given options::remote throws
// std::invalid_argument naming the header. The protocol itself: sync/remote_stages.hpp, docs/schedules.md §3.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "pipeprop/boundary_channel.hpp"
#include "pipeprop/executor_kind.hpp"
#include "pipeprop/loss/loss_policy.hpp"
#include "pipeprop/op.hpp"
#include "pipeprop/remote_seam.hpp"
#include "pipeprop/remote_transport.hpp"

namespace pipeprop::sync::detail {

/// What the exchange reads and drives of a schedule executor over values of type T.
template <class T>
class remote_host : public pipeprop::detail::remote_host_base {
public:
    /// The channel that carries the messages in direction dir to stage `to`.
    [[nodiscard]] virtual boundary_channel<T>& channel(direction dir, std::size_t to) const = 0;
    /// Whether stage s runs here, and whether it has made all of the running plan's optimizer steps.
    [[nodiscard]] virtual bool is_local(std::size_t s) const = 0;
    [[nodiscard]] virtual bool updated(std::size_t s) const = 0;
    /// Stage s's next op of the running plan (none: its ops are done).
    [[nodiscard]] virtual std::optional<op> next_op(std::size_t s) const = 0;
    /// Loss totals of micro-batch g of the running steps as the last stage (a local one) found them.
    [[nodiscard]] virtual const loss_totals& last_stage_totals(std::size_t g) const = 0;
    /// run_plan calls so far (the same on every process: messages carry it).
    [[nodiscard]] virtual std::uint64_t run() const = 0;

protected:
    ~remote_host() = default;
};

/// The exchange, as the executor calls it (sync/remote_stages.hpp implements it).
template <class T>
class remote_part {
public:
    using host_type = remote_host<T>;  ///< what the exchange reads of the executor
    virtual ~remote_part() = default;
    /// Which stages run here (returned: [p]) and their lanes: a local device's stages on one lane (lanes numbered
    /// densely; lane_of is rewritten), the others remote_lane. Throws std::invalid_argument for options remote
    /// stages cannot run with (the sequential executor, global gradient clipping) or a device split over ranks.
    virtual std::vector<bool> setup(std::vector<std::size_t>& lane_of, executor_kind executor,
                                    double max_gradient_norm, std::size_t remote_lane) = 0;
    /// The running steps: the first, how many, micro-batches per step; their notes' totals are cleared.
    virtual void begin_steps(std::uint64_t first, std::size_t steps, std::size_t m) = 0;
    /// Loss totals of micro-batch g of the running steps: the last stage's (local) or the backward notes'.
    [[nodiscard]] virtual const loss_totals& totals_of(std::size_t g) const = 0;
    /// A message for stage `to` of another process: to the transport; the channel's buffer is released.
    virtual void send_remote(std::size_t to, const boundary_message& msg) = 0;
    /// The graph is idle: receive until every local stage has made its optimizer steps and the sends arrived.
    virtual void run_with_remote() = 0;
    /// Delivers the kept messages of this run; clear_backlog drops them (a failed run).
    virtual void deliver_backlog() = 0;
    virtual void clear_backlog() noexcept = 0;
};

/// remote_host over Executor, a sync::schedule_executor over values of type T, which befriends it.
template <class Executor, class T>
class remote_host_of final : public remote_host<T> {
public:
    explicit remote_host_of(Executor& ex) noexcept : ex_(ex) {}
    remote_transport& transport() const override { return *ex_.opt_.remote; }
    const char* who() const override { return Executor::who; }
    std::size_t stage_count() const override { return ex_.ranges_.size(); }
    std::size_t max_batch() const override { return ex_.max_b_; }
    std::size_t targets_per_sample() const override { return Executor::targets_per_sample; }
    std::size_t message_size(direction dir, std::size_t to) const override {
        const auto& r = ex_.ranges_[to];
        return Executor::stack_type::activation_size[dir == direction::forward ? r.begin : r.end];
    }
    boundary_channel<T>& channel(direction dir, std::size_t to) const override {
        return dir == direction::forward ? *ex_.forward_[to - 1] : *ex_.backward_[to];
    }
    bool is_local(std::size_t s) const override { return ex_.local_[s]; }
    bool updated(std::size_t s) const override { return ex_.runner_.runtime(s).updated; }
    std::optional<op> next_op(std::size_t s) const override {
        const auto& rt = ex_.runner_.runtime(s);
        if (rt.updated || rt.ops == nullptr || rt.next >= rt.ops->size()) return std::nullopt;
        return (*rt.ops)[rt.next];
    }
    const loss_totals& last_stage_totals(std::size_t g) const override {
        return ex_.runner_.runtimes().back().totals[g];
    }
    std::uint64_t run() const override { return ex_.run_; }
    void put(std::size_t to, const boundary_message& m) const override { ex_.graph_->put(to, m); }
    void wait() const override { ex_.graph_->wait(); }

private:
    Executor& ex_;
};

}  // namespace pipeprop::sync::detail
