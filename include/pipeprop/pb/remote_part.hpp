// pipeprop/pb/remote_part.hpp: the seam between pb::concurrent_executor (pb/concurrent_executor.hpp) and the
// exchange with its stages in other processes (pb/remote_stages.hpp), so that a program that never gives
// options::remote a transport does not compile the exchange.
//
// The executor calls the exchange through remote_part<T> and the exchange reads the executor through remote_host<T>
// (remote_host_of adapts a concurrent executor); neither depends on the network or the policy. The exchange itself is
// made by the factory that pb/remote_stages.hpp registers when a program includes it (remote_seam.hpp;
// pipeprop/mpi/mpi_transport.hpp includes it): without it, an engine given options::remote throws
// std::invalid_argument naming the header. The protocol itself: pb/remote_stages.hpp, docs/pb-semantics.md §9.
#pragma once

#include <cstddef>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "pipeprop/boundary_channel.hpp"
#include "pipeprop/op.hpp"
#include "pipeprop/pb/concurrent_stage_buffers.hpp"
#include "pipeprop/pb/forward_channel.hpp"
#include "pipeprop/remote_seam.hpp"
#include "pipeprop/remote_transport.hpp"

namespace pipeprop::pb::detail {

/// The stages this process runs: local[s] for s < S, one contiguous group [first, last].
struct remote_layout {
    std::vector<bool> local;
    std::size_t first = 0;
    std::size_t last = 0;
};

/// What the exchange reads and drives of a concurrent executor over values of type T.
template <class T>
class remote_host : public pipeprop::detail::remote_host_base {
public:
    /// The channel that carries the forward messages to stage `to` > 0 (stage to - 1's output, stage to's input).
    [[nodiscard]] virtual forward_channel<T>& forward_channel_to(std::size_t to) const = 0;
    /// The channel that carries the backward messages to stage `to` < S - 1.
    [[nodiscard]] virtual boundary_channel<T>& backward_channel_to(std::size_t to) const = 0;
    /// What the last stage found for `micro_batch` (its slot in the executor's ring).
    [[nodiscard]] virtual loss_result<T>& result(std::size_t micro_batch) const = 0;
    /// Stage s's next op (none: its stream is done).
    [[nodiscard]] virtual std::optional<op> current_op(std::size_t s) const = 0;
    /// The id after the last pushed micro-batch.
    [[nodiscard]] virtual std::size_t next_id() const = 0;

protected:
    ~remote_host() = default;
};

/// The exchange, as the executor calls it (pb/remote_stages.hpp implements it).
template <class T>
class remote_part {
public:
    using host_type = remote_host<T>;  ///< what the exchange reads of the executor
    virtual ~remote_part() = default;
    /// Which stages run here (the transport's local ones). Throws std::invalid_argument when none does or they are
    /// not one contiguous group.
    virtual remote_layout setup() = 0;
    /// A message for stage `to`, which another process runs: payload, targets or loss to the transport; a backward
    /// channel's buffer is released (a forward channel's stays the sending stage's output until its BW).
    virtual void send_remote(std::size_t to, const boundary_message& msg) = 0;
    /// The graph is idle: receive from the other processes until the local stages are idle and the sends arrived.
    virtual void run_with_remote() = 0;
    /// Delivers the kept forward messages whose micro-batch has been pushed.
    virtual void deliver_backlog() = 0;
};

/// remote_host over Executor, a pb::concurrent_executor over values of type T, which befriends it.
template <class Executor, class T>
class remote_host_of final : public remote_host<T> {
public:
    explicit remote_host_of(Executor& ex) noexcept : ex_(ex) {}
    remote_transport& transport() const override { return *ex_.remote_; }
    const char* who() const override { return Executor::who; }
    std::size_t stage_count() const override { return ex_.stages_.size(); }
    std::size_t max_batch() const override { return ex_.max_b_; }
    std::size_t targets_per_sample() const override { return Executor::targets_per_sample; }
    std::size_t message_size(direction dir, std::size_t to) const override {
        const auto r = ex_.stages_[to].range();
        return ex_.stack_.activation_size[dir == direction::forward ? r.begin : r.end];
    }
    forward_channel<T>& forward_channel_to(std::size_t to) const override { return *ex_.forward_[to - 1]; }
    boundary_channel<T>& backward_channel_to(std::size_t to) const override { return *ex_.backward_[to]; }
    loss_result<T>& result(std::size_t micro_batch) const override { return ex_.results_[micro_batch % ex_.ring_]; }
    std::optional<op> current_op(std::size_t s) const override { return ex_.per_[s]->stream.current(); }
    std::size_t next_id() const override { return ex_.next_id_; }
    void put(std::size_t to, const boundary_message& m) const override { ex_.graph_->put(to, m); }
    void wait() const override { ex_.graph_->wait(); }

private:
    Executor& ex_;
};

}  // namespace pipeprop::pb::detail
